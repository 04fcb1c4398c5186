"""``RunSpec``: one owner of a run's settings (defaults, config.json, resolve, build, resume)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import shutil
from pathlib import Path

import pytest
from helpers import FIXED_SCHEDULE, files_of

from ember_np import RunSpec, resolve, resume
from ember_np.cli import main
from ember_np.dqn.config import DqnConfig
from ember_np.training import spec as spec_module
from ember_np.training.seeds import SeedSpec

SMALL = ["--set", "min_replay_size=100", "hidden_sizes=[16]", *FIXED_SCHEDULE]
RUN = ["--steps", "400", "--seed", "7", "--eval-every", "200", "--eval-episodes", "1",
       "--checkpoint-freq", "200", "--keep", "1", "--quiet"]  # fmt: skip


def trained(tmp_path: Path, *extra: str) -> Path:
    """The run directory of ``ember-np train CartPole-v1 --preset zoo`` with RUN and SMALL."""
    root = tmp_path / "runs"
    assert main(["train", "CartPole-v1", "--preset", "zoo", *RUN, "--root", str(root), *extra,
                 *SMALL]) == 0  # fmt: skip
    (config,) = root.rglob("config.json")
    return config.parent


def test_config_json_is_the_spec_serialisation_byte_for_byte(tmp_path):
    run_dir = trained(tmp_path)
    text = (run_dir / "config.json").read_text()
    spec = RunSpec.from_json(text)
    assert spec.to_json() == text
    # the keys and values `ember-np train` wrote before RunSpec existed, written as it wrote them
    before = {"env_id": "ember_np/CartPole-v1", "preset": "zoo", "seed": 7, "steps": 400,
              "eval_every": 200, "eval_episodes": 1, "checkpoint_freq": 200, "keep": 1,
              "dqn": spec.config.to_dict()}  # fmt: skip
    assert text == json.dumps(before, indent=2, sort_keys=True)
    assert spec.algorithm == "dqn" and spec.env_source == "compiled"


def test_n_envs_add_their_two_keys_and_one_env_none():
    one = RunSpec("CartPole-v1")
    two = one.replace(num_envs=2, vectorization="sync")
    assert "num_envs" not in one.to_dict() and "vectorization" not in one.to_dict()
    assert (two.to_dict()["num_envs"], two.to_dict()["vectorization"]) == (2, "sync")
    assert list(two.to_dict())[-1] == "dqn"  # the algorithm's config under its name
    assert RunSpec.from_dict(two.to_dict()) == two and RunSpec.from_dict(one.to_dict()) == one


def test_an_old_config_json_without_the_newer_keys_loads_with_the_defaults():
    old = {"env_id": "CartPole-v1", "preset": None, "seed": 3}  # no schedule, envs or dqn
    spec = RunSpec.from_dict(old)
    assert (spec.seed, spec.num_envs, spec.vectorization) == (3, 1, None)
    assert (spec.eval_every, spec.eval_episodes, spec.checkpoint_freq, spec.keep) == (
        spec_module.DEFAULT_EVAL_EVERY, spec_module.DEFAULT_EVAL_EPISODES,
        spec_module.DEFAULT_CHECKPOINT_FREQ, spec_module.DEFAULT_KEEP)  # fmt: skip
    assert spec.config == DqnConfig() and spec.env_source == "gymnasium"
    with pytest.raises(ValueError, match='add "env_id"'):
        RunSpec.from_dict({"seed": 0})
    with pytest.raises(ValueError, match="num_envs must be an integer >= 1, got 0"):
        RunSpec.from_dict({"env_id": "CartPole-v1", "num_envs": 0})


def test_an_old_run_directory_resumes(tmp_path):
    """A config.json of before --num-envs (no num_envs, vectorization) resumes as one env."""
    run_dir = trained(tmp_path)
    config = json.loads((run_dir / "config.json").read_text())
    for key in ("eval_every", "eval_episodes", "checkpoint_freq", "keep"):
        config.pop(key)
    (run_dir / "config.json").write_text(json.dumps(config))
    report = resume(run_dir, 100)
    assert json.loads((run_dir / "metadata.json").read_text())["total_steps"] == 500
    assert report.n_episodes == spec_module.DEFAULT_EVAL_EPISODES  # the default, as before


def test_every_default_comes_from_the_spec():
    """The command line's defaults are RunSpec's: one place defines each."""
    import argparse

    from ember_np.cli.training import add_resume_parser, add_train_parser
    from ember_np.cli.tune import add_tune_parser
    from ember_np.training.trainer import DEFAULT_CHECKPOINT_FREQ, DEFAULT_KEEP_CHECKPOINTS

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    add_train_parser(sub)
    add_resume_parser(sub)
    add_tune_parser(sub)
    train = parser.parse_args(["train", "CartPole-v1"])
    fields = {f.name: f.default for f in dataclasses.fields(RunSpec)}
    for option, field in (("seed", "seed"), ("eval_every", "eval_every"),
                          ("eval_episodes", "eval_episodes"),
                          ("checkpoint_freq", "checkpoint_freq"), ("keep", "keep"),
                          ("vectorization", "vectorization")):  # fmt: skip
        assert getattr(train, option) == fields[field], option
    # --num-envs left out: the preset's envs (a PPO zoo preset's n_envs), else RunSpec's
    assert train.num_envs is None
    assert resolve("CartPole-v1", say=str).num_envs == fields["num_envs"]
    assert resolve("CartPole-v1", algorithm="ppo", say=str).num_envs == 8
    tune = parser.parse_args(["tune", "CartPole-v1"])
    assert tune.eval_episodes == fields["eval_episodes"]
    assert fields["steps"] == spec_module.DEFAULT_STEPS
    # DqnTrainer's own keyword defaults (the trainer is not built from a spec) agree
    assert (DEFAULT_CHECKPOINT_FREQ, DEFAULT_KEEP_CHECKPOINTS) == (
        fields["checkpoint_freq"], fields["keep"])  # fmt: skip


def test_resolve_is_what_train_trained(tmp_path):
    run_dir = trained(tmp_path)
    saved = RunSpec.from_json((run_dir / "config.json").read_text())
    sets = SMALL[1:]
    spec = resolve("CartPole-v1", "zoo", sets, 400).replace(
        seed=7, eval_every=200, eval_episodes=1, checkpoint_freq=200, keep=1
    )
    assert spec == saved
    assert spec.config.hidden_sizes == (16,) and spec.config.min_replay_size == 100
    # no preset: the env's own, its budget; --gymnasium-env: gymnasium's env
    default = resolve("CartPole-v1", gymnasium_env=True, say=lambda line: None)
    assert (default.env_id, default.preset, default.env_source) == ("CartPole-v1", "rainbow",
                                                                   "gymnasium")  # fmt: skip
    from ember_np.presets import get_preset

    assert default.steps == get_preset("rainbow", "CartPole-v1").steps


@pytest.mark.parametrize(
    "args, message",
    [
        (("NoSuchEnv-v0",), "unknown environment 'NoSuchEnv-v0'"),
        (("CartPole-v1", "nope"), "nope"),
        (("CartPole-v1", None, ["gamma=2"]), "--set: gamma"),
        (("CartPole-v1", None, ["nokey=1"]), "unknown config key 'nokey'"),
    ],
)
def test_resolve_refuses_bad_input_in_one_line(args, message):
    from ember_np.training.setup import SetupError

    with pytest.raises(SetupError, match=message) as info:
        resolve(*args)
    assert "\n" not in str(info.value)


def test_library_resume_writes_the_files_the_command_line_resume_writes(tmp_path):
    run_dir = trained(tmp_path)
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(run_dir, a)
    shutil.copytree(run_dir, b)
    assert main(["resume", str(a), "--steps", "300", "--quiet"]) == 0
    report = resume(b, 300)
    files = files_of(b)
    assert files_of(a) == files
    assert {"checkpoints/step_600.npz", "checkpoints/latest.npz"} <= set(files)
    assert json.loads(files["metadata.json"])["total_steps"] == 700
    last = json.loads(files["eval_episodes.jsonl"].decode().splitlines()[-1])
    assert last["total_steps_at_eval"] == 700 and report.n_episodes == 1
    from ember_np.training.run import TrainingRun

    TrainingRun.resume(b).lock()  # resume() let go of the run's lock


@pytest.mark.parametrize("steps", [0, -5, 2.5])
def test_resume_refuses_a_bad_step_count_before_touching_the_run(tmp_path, steps):
    run_dir = trained(tmp_path)
    before = files_of(run_dir)
    with pytest.raises(ValueError, match=r"steps must be an integer >= 1 .* got"):
        resume(run_dir, steps)
    assert files_of(run_dir) == before


def test_resume_refuses_what_is_not_a_run_directory(tmp_path):
    with pytest.raises(ValueError, match=f"no run directory at {tmp_path / 'nothing'}"):
        resume(tmp_path / "nothing", 10)
    (tmp_path / "empty").mkdir()
    with pytest.raises(OSError, match="is neither a run directory"):
        resume(tmp_path / "empty", 10)
    run_dir = trained(tmp_path)
    (run_dir / "config.json").unlink()
    with pytest.raises(ValueError, match=r"config.json does not say which env .* add \"env_id\""):
        resume(run_dir, 10)


def test_seed_spec_and_tune_settings_hold_a_run_spec():
    pytest.importorskip("optuna")
    from ember_np.tune import TuneSettings, settings_for

    run = RunSpec("ember_np/CartPole-v1", preset="zoo", steps=300, eval_every=100, keep=1)
    seed_spec = SeedSpec(run, "name", "v")
    assert seed_spec.run is run and seed_spec.steps == 300 and seed_spec.env_id == run.env_id
    data = seed_spec.to_dict()  # seeds.json's "spec", as before: flat, the config under "config"
    assert list(data) == ["env_id", "config", "steps", "name", "version", "preset", "eval_every",
                          "eval_episodes", "checkpoint_freq", "keep", "num_envs",
                          "vectorization"]  # fmt: skip
    assert SeedSpec.from_dict(data) == seed_spec
    assert seed_spec.run_config(4) == run.replace(seed=4).to_dict()
    old = {k: v for k, v in data.items() if k not in ("num_envs", "vectorization", "keep")}
    assert SeedSpec.from_dict(old).run == run.replace(keep=spec_module.DEFAULT_KEEP)

    settings = settings_for("CartPole-v1", (600, 2, 3, 4), 0, ["hidden_sizes=[8]"],
                            say=lambda line: None)  # fmt: skip
    assert isinstance(settings.run, RunSpec)
    assert (settings.run.env_id, settings.run.steps, settings.run.eval_episodes) == (
        "ember_np/CartPole-v1", 600, 4)  # fmt: skip
    assert settings.fixed == {"hidden_sizes": [8]}
    assert settings.base == resolve("CartPole-v1", steps=600).config.to_dict()  # before --set
    assert TuneSettings.from_dict(settings.to_dict()) == settings


def test_train_seeds_takes_a_run_spec_and_no_loose_options(tmp_path):
    from ember_np.training.multiseed import train_seeds

    parameters = inspect.signature(train_seeds).parameters.values()
    assert not [p for p in parameters if p.kind is inspect.Parameter.VAR_KEYWORD]
    with pytest.raises(ValueError, match="run must be a RunSpec .* got str"):
        train_seeds("ember_np/CartPole-v1", [0], root=tmp_path)
    assert not list(tmp_path.iterdir())


def test_a_spec_refuses_bad_settings_naming_them():
    with pytest.raises(ValueError, match="eval_every must be an integer >= 1, got 0"):
        RunSpec("CartPole-v1", eval_every=0)
    with pytest.raises(ValueError, match="unknown algorithm 'a2c'; built in: dqn, ppo"):
        RunSpec("CartPole-v1", algorithm="a2c")
    with pytest.raises(ValueError, match="vectorization must be None, 'sync' or 'async'"):
        RunSpec("CartPole-v1", num_envs=2, vectorization="threads")
    with pytest.raises(ValueError, match="config must be a DqnConfig"):
        RunSpec("CartPole-v1", config={"gamma": 0.9})  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        RunSpec("CartPole-v1").steps = 5  # type: ignore[misc]
