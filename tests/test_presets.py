"""Presets: named per env (rainbow, zoo, ember), the RL Zoo's rows (rl-baselines3-zoo hyperparams/dqn.yml), ember-rl's
config, the lookup rules and the command line's default."""

from __future__ import annotations

import json

import pytest

from ember_np import DqnConfig
from ember_np.cli import main
from ember_np.presets import (
    PRESETS,
    default_preset,
    get_preset,
    preset_for_env,
    presets_for_env,
)

# rl-baselines3-zoo hyperparams/dqn.yml:
# n_timesteps, lr, batch, buffer, learning_starts, gamma, target_update, train_freq,
# gradient_steps, exploration_fraction, exploration_final_eps
ZOO = {
    "CartPole-v1": (50_000, 2.3e-3, 64, 100_000, 1_000, 0.99, 10, 256, 128, 0.16, 0.04),
    "Acrobot-v1": (100_000, 6.3e-4, 128, 50_000, 0, 0.99, 250, 4, -1, 0.12, 0.1),
    "MountainCar-v0": (120_000, 4e-3, 128, 10_000, 1_000, 0.98, 600, 16, 8, 0.2, 0.07),
    "LunarLander-v3": (100_000, 6.3e-4, 128, 50_000, 0, 0.99, 250, 4, -1, 0.12, 0.1),
}
RAINBOW_ENVS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "LunarLander-v3")
#: The budgets issue 14's bars allow (LunarLander: issue 26, solved within 200k steps).
BUDGET = {
    "CartPole-v1": 100_000,
    "Acrobot-v1": 100_000,
    "MountainCar-v0": 120_000,
    "LunarLander-v3": 200_000,
}


@pytest.mark.parametrize("env_id", list(ZOO))
def test_zoo_presets_match_the_table(env_id):
    n, lr, batch, buffer, starts, gamma, target, freq, grad, frac, final = ZOO[env_id]
    p = PRESETS[env_id]["zoo"]
    c = p.config
    assert p.name == "zoo" and p.env_id == env_id and p.steps == n
    assert (c.learning_rate, c.batch_size, c.buffer_capacity) == (lr, batch, buffer)
    assert c.min_replay_size == max(starts, batch)
    assert (c.gamma, c.target_update_freq, c.train_freq, c.gradient_steps) == (
        gamma,
        target,
        freq,
        grad,
    )
    assert c.epsilon_decay_steps == int(frac * n) and c.epsilon_end == final
    assert c.epsilon_start == 1.0 and c.hidden_sizes == (256, 256)
    # SB3 defaults the Zoo leaves unset
    assert (c.tau, c.max_grad_norm, c.huber_delta, c.double_dqn) == (1.0, 10.0, 1.0, False)
    assert get_preset("zoo", env_id) is p
    assert get_preset(env_id) is p  # the old spelling: an env id means its zoo preset
    assert p.sb3_kwargs["learning_rate"] == lr and p.sb3_kwargs["buffer_size"] == buffer


def test_ember_preset_is_ember_rl_cartpole_config():
    c = get_preset("ember").config
    assert c == DqnConfig(
        hidden_sizes=(64, 64), learning_rate=1e-3, batch_size=64, buffer_capacity=10_000,
        min_replay_size=1_000, target_update_freq=200, epsilon_start=1.0, epsilon_end=0.01,
        epsilon_decay_steps=10_000, gamma=0.99,
    )  # fmt: skip
    assert (
        get_preset("ember", "CartPole-v1") is get_preset("ember") is PRESETS["CartPole-v1"]["ember"]
    )
    # a name only one env has may be used on another env (as before names were per env)
    assert get_preset("ember", "Acrobot-v1") is get_preset("ember")


@pytest.mark.parametrize("env_id", RAINBOW_ENVS)
def test_rainbow_presets_are_the_default_and_within_the_issues_budget(env_id):
    p = get_preset("rainbow", env_id)
    assert p.name == "rainbow" and p.env_id == env_id
    assert default_preset(env_id) is p and preset_for_env(env_id) is p
    assert p.steps <= BUDGET[env_id]
    assert p.config.double_dqn and p.config.dueling  # Rainbow components, not a Zoo row
    assert set(presets_for_env(env_id)) >= {"rainbow", "zoo"}
    assert p.sb3_kwargs is None  # SB3 has no Rainbow: SB3 always gets the zoo arguments


def test_default_is_zoo_without_a_rainbow_preset_and_none_without_any(monkeypatch):
    monkeypatch.delitem(PRESETS["LunarLander-v3"], "rainbow")
    assert default_preset("LunarLander-v3") is PRESETS["LunarLander-v3"]["zoo"]
    assert default_preset("Pong-v5") is None and presets_for_env("Pong-v5") == {}
    assert default_preset("ember") is None  # a preset name, not an env id
    assert set(presets_for_env("CartPole-v1")) == {"rainbow", "zoo", "ember"}
    presets_for_env("CartPole-v1").clear()  # a copy: the registry is untouched
    assert "rainbow" in PRESETS["CartPole-v1"]


def test_lookup_errors_say_what_exists(monkeypatch):
    with pytest.raises(ValueError, match="unknown preset 'x'; known presets: ember alone for "
                       "CartPole-v1/ember; any env's as ENV/NAME: CartPole-v1/rainbow, "):  # fmt: skip
        get_preset("x")
    with pytest.raises(ValueError, match=r"preset 'zoo' exists for CartPole-v1, .*say which env"):
        get_preset("zoo")
    with pytest.raises(ValueError, match=r"no 'ember' preset for Acrobot-v1 .*CartPole-v1/ember"):
        get_preset("Acrobot-v1/ember", "CartPole-v1")
    monkeypatch.delitem(PRESETS["LunarLander-v3"], "rainbow")  # an env with a zoo preset only
    with pytest.raises(
        ValueError, match=r"no 'rainbow' preset for LunarLander-v3 \(its presets: zoo\)"
    ):
        get_preset("rainbow", "LunarLander-v3")


def test_the_cli_picks_rainbow_by_default_and_says_so(tmp_path, capsys):
    argv = ["train", "CartPole-v1", "--steps", "300", "--eval-every", "10000",
            "--eval-episodes", "1", "--root", str(tmp_path), "--quiet"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "CartPole-v1: preset rainbow, 300 steps, seed 0" in out
    (run_dir,) = (tmp_path / "CartPole-v1" / "rainbow").iterdir()
    config = json.loads((run_dir / "config.json").read_text())
    assert config["preset"] == "rainbow"
    # the preset's schedule lengths resolved against the run's 300 steps
    assert DqnConfig.from_dict(config["dqn"]) == PRESETS["CartPole-v1"]["rainbow"].config_for(300)


def test_the_cli_takes_old_and_new_spellings_and_refuses_a_missing_one(tmp_path, capsys):
    base = ["--steps", "300", "--eval-every", "10000", "--eval-episodes", "1", "--root",
            str(tmp_path), "--quiet", "--set", "min_replay_size=128", "hidden_sizes=[16]"]  # fmt: skip
    assert main(["train", "Acrobot-v1", "--preset", "zoo", *base]) == 0
    assert main(["train", "CartPole-v1", "--preset", "CartPole-v1", "--version", "old", *base]) == 0
    out = capsys.readouterr().out
    assert "Acrobot-v1: preset zoo, 300 steps" in out and "CartPole-v1: preset zoo, 300" in out
    (run_dir,) = (tmp_path / "CartPole-v1" / "old").iterdir()
    config = json.loads((run_dir / "config.json").read_text())
    zoo = PRESETS["CartPole-v1"]["zoo"].config_for(300)
    zoo = zoo.replace(min_replay_size=128, hidden_sizes=(16,))
    assert DqnConfig.from_dict(config["dqn"]) == zoo
    assert main(["train", "Taxi-v4", "--preset", "rainbow", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no 'rainbow' preset for Taxi-v4 (its presets: none)" in err
