"""DqnConfig: defaults, validation, schedule, serialisation (and what PPOConfig shares
with it: ember_np/_config.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ember_np import DqnConfig
from ember_np.ppo.config import PPOConfig


def test_defaults_are_ember_rl_and_sb3():
    c = DqnConfig()
    assert (c.gamma, c.learning_rate, c.batch_size) == (0.99, 1e-4, 32)
    assert (c.buffer_capacity, c.min_replay_size, c.target_update_freq) == (100_000, 10_000, 1_000)
    assert c.hidden_sizes == (128, 128)
    assert (c.epsilon_start, c.epsilon_end, c.epsilon_decay_steps) == (1.0, 0.05, 50_000)
    assert (c.train_freq, c.gradient_steps, c.double_dqn, c.tau) == (1, 1, False, 1.0)
    assert c.max_grad_norm is None and c.huber_delta == 1.0


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        DqnConfig().gamma = 0.5  # type: ignore[misc]


def test_epsilon_linear_then_flat():
    c = DqnConfig(epsilon_start=1.0, epsilon_end=0.1, epsilon_decay_steps=100)
    assert c.epsilon_at(0) == 1.0
    assert c.epsilon_at(50) == pytest.approx(0.55)
    assert c.epsilon_at(100) == pytest.approx(0.1)
    assert c.epsilon_at(10**9) == pytest.approx(0.1)
    values = [c.epsilon_at(t) for t in range(0, 120)]
    assert all(a >= b for a, b in zip(values, values[1:]))
    assert DqnConfig(epsilon_decay_steps=0, epsilon_end=0.2).epsilon_at(0) == 0.2


def test_derived_values():
    c = DqnConfig(batch_size=64, min_replay_size=1000, train_freq=4, gradient_steps=-1)
    assert c.learning_starts == 1000
    assert c.gradient_steps_per_train == 4
    assert DqnConfig(gradient_steps=3).gradient_steps_per_train == 3


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("gamma", 1.5, r"gamma must be a number in \[0, 1\], got 1.5"),
        ("gamma", -0.1, "gamma must be a number in"),
        ("learning_rate", 0.0, "learning_rate must be a positive finite number, got 0.0"),
        ("learning_rate", float("nan"), "learning_rate must be a positive finite number"),
        ("batch_size", 0, "batch_size must be a positive integer, got 0"),
        ("batch_size", 32.0, "batch_size must be a positive integer, got 32.0"),
        ("buffer_capacity", -1, "buffer_capacity must be a positive integer"),
        ("target_update_freq", 0, "target_update_freq must be a positive integer"),
        ("train_freq", 0, "train_freq must be a positive integer"),
        ("gradient_steps", 0, "gradient_steps must be a positive integer or -1"),
        ("gradient_steps", -2, "gradient_steps must be a positive integer or -1"),
        ("epsilon_start", 1.1, r"epsilon_start must be a number in \[0, 1\]"),
        ("epsilon_end", -0.5, "epsilon_end must be"),
        ("epsilon_decay_steps", -1, "epsilon_decay_steps must be an integer >= 0"),
        ("tau", 0.0, r"tau must be a number in \(0, 1\], got 0.0"),
        ("tau", 1.5, "tau must be"),
        ("max_grad_norm", 0, "max_grad_norm must be a positive finite number or None"),
        ("huber_delta", -1.0, "huber_delta must be a positive finite number"),
        ("hidden_sizes", (64, 0), "hidden_sizes must be a sequence of positive integers"),
        ("hidden_sizes", "64", "hidden_sizes must be a sequence of positive integers"),
        ("double_dqn", "yes", "double_dqn must be True or False"),
    ],
)
def test_each_invalid_value_names_field_and_value(field, value, message):
    with pytest.raises(ValueError, match=message):
        DqnConfig(**{field: value})


def test_cross_field_rules():
    with pytest.raises(ValueError, match=r"min_replay_size must be >= batch_size \(got 16 < 32\)"):
        DqnConfig(min_replay_size=16, batch_size=32)
    with pytest.raises(ValueError, match=r"buffer_capacity must be >= min_replay_size.*500 < 1000"):
        DqnConfig(buffer_capacity=500, min_replay_size=1000)


def test_dict_round_trip_is_json_safe():
    c = DqnConfig(hidden_sizes=(64, 32), max_grad_norm=10.0, double_dqn=True, gradient_steps=-1)
    d = c.to_dict()
    assert d["hidden_sizes"] == [64, 32]
    again = DqnConfig.from_dict(json.loads(json.dumps(d)))
    assert again == c
    with pytest.raises(ValueError, match=r"unknown DqnConfig field\(s\) \['gama'\]"):
        DqnConfig.from_dict({"gama": 0.9})


def test_replace_validates():
    c = DqnConfig()
    assert c.replace(gamma=0.5).gamma == 0.5
    with pytest.raises(ValueError, match="gamma"):
        c.replace(gamma=2.0)


def test_numpy_scalars_become_python_types_so_runs_and_checkpoints_serialise(tmp_path):
    import numpy as np

    from ember_np import DqnAgent, IndexActionMapper, TrainingRun, VecEncoder

    c = DqnConfig(
        batch_size=np.int64(32), gamma=np.float64(0.99), learning_rate=np.float32(1e-3),
        hidden_sizes=np.array([8, 8]), dueling=np.True_, min_replay_size=np.int32(32),
        max_grad_norm=np.float16(10), learning_rate_end=np.float64(1e-5), n_step=np.uint8(2),
    )  # fmt: skip
    for f in dataclasses.fields(c):
        v = getattr(c, f.name)
        assert not isinstance(v, np.generic), (f.name, type(v))
    assert type(c.batch_size) is int and type(c.gamma) is float and c.dueling is True
    assert c.hidden_sizes == (8, 8) and all(type(s) is int for s in c.hidden_sizes)
    assert DqnConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    run = TrainingRun.create("np_scalars", "v1", root=tmp_path)
    run.write_config(c.to_dict())
    assert run.read_config() == c.to_dict()
    agent = DqnAgent(VecEncoder(3), IndexActionMapper(2), c, seed=np.int64(1))
    loaded = DqnAgent.from_checkpoint(agent.save(tmp_path / "a.npz"))
    assert loaded.config == c


@pytest.mark.parametrize("cls", [DqnConfig, PPOConfig])
def test_every_config_converts_checks_and_round_trips_alike(cls):
    import numpy as np

    c = cls(hidden_sizes=np.array([16, 8]), gamma=np.float32(0.5), batch_size=np.int64(64))
    assert c.hidden_sizes == (16, 8) and all(type(s) is int for s in c.hidden_sizes)
    assert type(c.gamma) is float and type(c.batch_size) is int
    d = c.to_dict()
    assert d["hidden_sizes"] == [16, 8] and d["gamma"] == 0.5
    assert cls.from_dict(json.loads(json.dumps(d))) == c
    with pytest.raises(ValueError, match=rf"unknown {cls.__name__} field\(s\) \['gama'\]"):
        cls.from_dict({"gama": 0.9})
    with pytest.raises(ValueError, match=f"a {cls.__name__} dict is expected, got list"):
        cls.from_dict([])  # type: ignore[arg-type]
    for bad in ("64", (64, 0), (64, True), 64):
        with pytest.raises(ValueError, match="hidden_sizes must be a sequence of positive"):
            cls(hidden_sizes=bad)
