"""Presets in runs: schedule lengths are fractions of the run, resolved against ``--steps``;
a preset borrowed from another env is recorded and filed under its own name (``ENV/NAME``);
the error for an unknown name lists exactly the names that are accepted."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from ember_np import DqnAgent, DqnConfig
from ember_np.cli import main
from ember_np.dqn.config import SCHEDULE_FIELDS
from ember_np.presets import (
    PRESETS,
    Preset,
    get_preset,
    load_preset_file,
    preset_names,
    resolve_schedule,
)

ALL = [p for presets in PRESETS.values() for p in presets.values()]
IDS = [f"{p.env_id}/{p.name}" for p in ALL]

#: The schedule lengths every preset had as fixed step counts before they became
#: fractions of the run (epsilon, learning rate, PER beta): at each preset's budget
#: the resolved config must still hold exactly these.
BEFORE = {
    "CartPole-v1/rainbow": (35_000, 8_000, 35_000, 100_000),
    "Acrobot-v1/rainbow": (100_000, 12_000, 100_000, 100_000),
    "MountainCar-v0/rainbow": (120_000, 24_000, 120_000, 100_000),
    "LunarLander-v3/rainbow": (200_000, 24_000, 200_000, 100_000),
    "CartPole-v1/zoo": (50_000, 8_000, 100_000, 100_000),
    "Acrobot-v1/zoo": (100_000, 12_000, 100_000, 100_000),
    "MountainCar-v0/zoo": (120_000, 24_000, 100_000, 100_000),
    "LunarLander-v3/zoo": (100_000, 12_000, 100_000, 100_000),
    "CartPole-v1/ember": (50_000, 10_000, 100_000, 100_000),
}
TRAIN = ["--eval-every", "100000", "--eval-episodes", "1", "--quiet"]
SMALL_SETS = ["--set", "min_replay_size=64", "batch_size=64", "hidden_sizes=[16]"]


def test_schedule_fields_are_every_step_length_of_dqnconfig():
    lengths = {f.name for f in dataclasses.fields(DqnConfig) if f.name.endswith("_steps")}
    assert set(SCHEDULE_FIELDS) == lengths - {"gradient_steps"}  # a count per update, not a length


@pytest.mark.parametrize("preset", ALL, ids=IDS)
def test_every_preset_at_its_budget_keeps_its_step_counts(preset):
    budget, *lengths = BEFORE[f"{preset.env_id}/{preset.name}"]
    assert preset.steps == budget
    assert set(preset.schedule) == set(SCHEDULE_FIELDS)  # every length is a fraction
    resolved = preset.config_for(budget)
    assert resolved == preset.config
    assert [getattr(resolved, f) for f in SCHEDULE_FIELDS] == lengths


@pytest.mark.parametrize("preset", ALL, ids=IDS)
@pytest.mark.parametrize("steps", [1, 1_200, 100_000, 1_000_000])
def test_another_length_scales_every_schedule(preset, steps):
    c = preset.config_for(steps)
    for field in SCHEDULE_FIELDS:
        fraction = getattr(preset.config, field) / preset.steps  # as long, relative to the run
        assert getattr(c, field) == max(round(fraction * steps), 1)
    # nothing but the schedule lengths depends on the run's length
    assert c.replace(**{f: getattr(preset.config, f) for f in SCHEDULE_FIELDS}) == preset.config


def test_rainbow_anneals_its_learning_rate_over_the_run_it_is_given():
    p = get_preset("rainbow", "CartPole-v1")
    c = p.config_for(100_000)
    assert c.learning_rate_at(50_000) == pytest.approx((2.5e-3 + 1e-5) / 2)  # halfway
    assert c.learning_rate_at(100_000) == pytest.approx(1e-5)


def run_config(root: Path, env_dir: str, version: str) -> dict:
    (run_dir,) = (root / env_dir / version).iterdir()
    return json.loads((run_dir / "config.json").read_text())


def test_train_resolves_the_schedule_against_steps_and_set_wins(tmp_path, capsys):
    assert main(["train", "CartPole-v1", "--steps", "700", "--root", str(tmp_path), *TRAIN,
                 "--set", "per_beta_steps=5000", "min_replay_size=128"]) == 0  # fmt: skip
    dqn = run_config(tmp_path, "CartPole-v1", "rainbow")["dqn"]
    # 8/35 of the run for epsilon, the whole run for the learning rate, beta as set
    assert dqn["epsilon_decay_steps"] == 160 and dqn["learning_rate_decay_steps"] == 700
    assert dqn["per_beta_steps"] == 5000
    expected = get_preset("rainbow", "CartPole-v1").config_for(700)
    assert DqnConfig.from_dict(dqn) == expected.replace(per_beta_steps=5000, min_replay_size=128)


def test_resume_keeps_the_schedule_the_run_was_started_with(tmp_path, capsys):
    assert main(["train", "CartPole-v1", "--preset", "ember", "--steps", "400",
                 "--root", str(tmp_path), *TRAIN, *SMALL_SETS]) == 0  # fmt: skip
    (run_dir,) = (tmp_path / "CartPole-v1" / "ember").iterdir()
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["dqn"]["epsilon_decay_steps"] == 80  # 0.2 of 400
    assert main(["resume", str(run_dir), "--steps", "800", "--quiet"]) == 0  # 800 more
    agent = DqnAgent.from_checkpoint(run_dir / "checkpoints" / "latest.npz")
    assert agent.total_steps == 1200 and agent.config == DqnConfig.from_dict(saved["dqn"])
    assert json.loads((run_dir / "config.json").read_text()) == saved


def test_a_preset_file_schedule_scales_and_must_agree_with_its_dqn(tmp_path, capsys):
    path = tmp_path / "mine.json"
    dqn = DqnConfig(epsilon_decay_steps=300, learning_rate_end=1e-5,
                    learning_rate_decay_steps=1200).to_dict()  # fmt: skip
    schedule = {"epsilon_decay_steps": 0.25, "learning_rate_decay_steps": 1.0}
    data = {"dqn": dqn, "steps": 1200, "schedule": schedule}
    path.write_text(json.dumps(data))
    p = load_preset_file(path)
    assert p.config == DqnConfig.from_dict(dqn) and p.config_for(1200) == p.config
    c = p.config_for(4800)
    assert (c.epsilon_decay_steps, c.learning_rate_decay_steps) == (1200, 4800)
    assert c.per_beta_steps == dqn["per_beta_steps"]  # not in the schedule: kept
    path.write_text(json.dumps({**data, "schedule": {"epsilon_decay_steps": 0.5}}))
    with pytest.raises(ValueError, match=r"schedule epsilon_decay_steps 0.5 of its 1,200 steps "
                       r"is 600, but dqn epsilon_decay_steps is 300"):  # fmt: skip
        load_preset_file(path)
    for bad, problem in [({"gradient_steps": 0.5}, "not a schedule length"),
                         ({"per_beta_steps": -1}, "a finite number >= 0")]:  # fmt: skip
        path.write_text(json.dumps({**data, "schedule": bad}))
        assert main(["train", "CartPole-v1", "--preset", str(path)]) == 2
        err = capsys.readouterr().err
        assert str(path) in err and problem in err and len(err.strip().splitlines()) == 1


# -- a preset of another env ------------------------------------------------------------


@pytest.mark.parametrize("spelling, recorded", [
    ("CartPole-v1", "CartPole-v1/zoo"),  # the old spelling: CartPole's zoo preset
    ("CartPole-v1/zoo", "CartPole-v1/zoo"),
    ("ember", "CartPole-v1/ember"),  # the one name only CartPole has
    ("Acrobot-v1/zoo", "zoo"),  # the env's own, however it is spelled
])  # fmt: skip
def test_a_borrowed_preset_is_recorded_and_filed_under_its_own_name(
    spelling, recorded, tmp_path, capsys
):
    assert main(["train", "Acrobot-v1", "--preset", spelling, "--steps", "200", "--root",
                 str(tmp_path), *TRAIN, *SMALL_SETS]) == 0  # fmt: skip
    assert f"Acrobot-v1: preset {recorded}, 200 steps" in capsys.readouterr().out
    (version,) = (tmp_path / "Acrobot-v1").iterdir()
    assert version.name == recorded.replace("/", "_")  # never Acrobot-v1/zoo for CartPole's
    config = run_config(tmp_path, "Acrobot-v1", version.name)
    assert config["preset"] == recorded
    preset = get_preset(spelling, "Acrobot-v1")
    expected = preset.config_for(200).replace(min_replay_size=64, batch_size=64,
                                              hidden_sizes=(16,))  # fmt: skip
    assert DqnConfig.from_dict(config["dqn"]) == expected


def test_report_of_a_borrowed_preset_names_it(tmp_path, capsys):
    assert main(["train", "Acrobot-v1", "--preset", "CartPole-v1", "--steps", "200",
                 "--seeds", "2", "--workers", "1", "--root", str(tmp_path), *TRAIN,
                 *SMALL_SETS]) == 0  # fmt: skip
    (parent,) = (tmp_path / "Acrobot-v1" / "CartPole-v1_zoo").iterdir()
    spec = json.loads((parent / "seeds.json").read_text())["spec"]
    assert spec["preset"] == "CartPole-v1/zoo" and spec["version"] == "CartPole-v1_zoo"
    seed_config = json.loads((parent / "seed_0" / "config.json").read_text())
    assert seed_config["preset"] == "CartPole-v1/zoo"
    capsys.readouterr()
    assert main(["report", str(parent)]) == 0
    assert f"Acrobot-v1/CartPole-v1_zoo/{parent.name}" in capsys.readouterr().out


CANDIDATES = sorted(
    {name for presets in PRESETS.values() for name in presets}
    | set(PRESETS)
    | {f"{e}/{n}" for e in PRESETS for n in ("rainbow", "zoo", "ember")}
    | {"Taxi-v3/zoo", "CartPole-v1/nope", "nope", "CartPole-v1/"}
)


def listed(message: str) -> set[str]:
    """The candidate names that the error's listing shows as names."""
    tokens = set(re.findall(r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)?", message))
    return tokens & set(CANDIDATES)


@pytest.mark.parametrize("env_id", [None, "CartPole-v1", "Acrobot-v1", "LunarLander-v3",
                                    "ember_np/MountainCar-v0", "Taxi-v3"])  # fmt: skip
def test_the_unknown_name_error_lists_exactly_what_is_accepted(env_id):
    with pytest.raises(ValueError) as error:
        get_preset("no-such-preset", env_id)
    message = str(error.value)
    assert message.startswith("unknown preset 'no-such-preset'; known presets: ")
    accepted = set()
    for name in CANDIDATES:
        try:
            preset = get_preset(name, env_id)
        except ValueError:
            continue
        assert isinstance(preset, Preset)
        accepted.add(name)
    assert accepted == set(preset_names(env_id)) == listed(message.split("; known", 1)[1])


def test_every_accepted_name_means_the_preset_it_names():
    for env_id in PRESETS:
        for name, preset in preset_names(env_id).items():
            if "/" in name:
                assert name == f"{preset.env_id}/{preset.name}"
            elif name in PRESETS:
                assert (preset.env_id, preset.name) == (name, "zoo")
            else:
                assert preset.name == name
            expected = preset.name if preset.env_id == env_id else f"{preset.env_id}/{preset.name}"
            assert preset.name_for(env_id) == preset.name_for(f"ember_np/{env_id}") == expected


def test_lengths_are_exact_up_to_int64_and_refused_beyond_in_one_line(tmp_path, capsys):
    top = 2**63 - 1
    assert resolve_schedule({"learning_rate_decay_steps": 1.0}, top) == {
        "learning_rate_decay_steps": top}  # fmt: skip
    assert resolve_schedule({"epsilon_decay_steps": 0.0, "per_beta_steps": 1e-30}, 10) == {
        "epsilon_decay_steps": 0,
        "per_beta_steps": 1,
    }  # a positive fraction lasts a step
    # CartPole's rainbow anneals beta over 100/35 of the run: beyond int64 at this length
    assert main(["train", "CartPole-v1", "--steps", str(top), "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ember-np: error: --steps {top}: per_beta_steps: 2.85714 of ")
    assert "beyond 2**63 - 1" in err and len(err.splitlines()) == 1
    assert not list(tmp_path.iterdir())  # refused before a run directory was made
