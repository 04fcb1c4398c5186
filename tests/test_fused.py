"""Fused training on native envs: identical to the Python path in every observable way."""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest
from helpers import agent_state_with_cursor as agent_state

import ember_np.envs  # noqa: F401
from ember_np import DqnAgent, DqnConfig, DqnTrainer, TrainingRun
from ember_np.envs.native import unwrap_native
from ember_np.stats import StatsTracker

CONFIG = DqnConfig(
    hidden_sizes=(32, 32), learning_rate=1e-3, batch_size=32, buffer_capacity=3_000,
    min_replay_size=100, target_update_freq=50, epsilon_end=0.05, epsilon_decay_steps=2_000,
    max_grad_norm=10.0,
)  # fmt: skip


def trainer(env_id="ember_np/CartPole-v1", config=CONFIG, seed=0, **kw):
    env = gym.make(env_id)
    return DqnTrainer(env, DqnAgent.for_env(env, config, seed=seed), seed=seed, **kw)


class Recorder(StatsTracker):
    """A StatsTracker that also keeps every record it is given."""

    def __init__(self):
        super().__init__()
        self.records = []

    def update(self, record):
        super().update(record)
        self.records.append(record)


def test_fused_is_chosen_for_native_envs_only():
    assert trainer().fused
    assert not trainer("CartPole-v1").fused
    assert not trainer(fused=False).fused
    with pytest.raises(ValueError, match="fused=True needs a native env"):
        trainer("CartPole-v1", fused=True)


@pytest.mark.parametrize(
    "env_id", ["ember_np/CartPole-v1", "ember_np/Acrobot-v1", "ember_np/MountainCar-v0"]
)
def test_same_episodes_updates_and_state_as_the_python_path(env_id):
    n = 3_000
    a = trainer(env_id, fused=False, stats=Recorder())
    python = list(itertools.islice(a.steps(), n))
    b = trainer(env_id, stats=Recorder())
    assert b.fused
    b.train(n)
    ended = [(m.episode_reward, m.episode_step, m.episode_status)
             for m in python if m.episode_done]  # fmt: skip
    assert b.stats.records == a.stats.records  # extras (epsilon, loss) included
    assert [(r.total_reward, r.length, r.status) for r in b.stats.records] == ended
    assert len(ended) >= 3
    assert b.agent.n_updates == a.agent.n_updates == sum(m.did_update for m in python) > 2_000
    assert agent_state(a.agent) == agent_state(b.agent)


def test_same_agent_state_stats_and_run_files(tmp_path):
    runs = [TrainingRun.create(name, "v1", root=tmp_path) for name in ("python", "fused")]
    a = trainer(run=runs[0], checkpoint_freq=700, keep_checkpoints=2, fused=False)
    b = trainer(run=runs[1], checkpoint_freq=700, keep_checkpoints=2)
    assert b.fused and not a.fused
    for n in (1_000, 1, 2_499):  # chunks that end mid-episode and off checkpoint boundaries
        a.train(n)
        b.train(n)
    assert agent_state(a.agent) == agent_state(b.agent)
    assert a.stats.summary() == b.stats.summary()
    assert a.episode == b.episode
    assert unwrap_native(a.env).state.tobytes() == unwrap_native(b.env).state.tobytes()
    assert runs[0].read_train_episodes() == runs[1].read_train_episodes()
    # byte for byte: the fused chunk logs its episodes in one write, Python one by one
    assert (runs[0].dir / "train_episodes.jsonl").read_bytes() == (
        runs[1].dir / "train_episodes.jsonl"
    ).read_bytes()
    files_a = sorted(p.name for p in runs[0].checkpoints_dir.iterdir())
    files_b = sorted(p.name for p in runs[1].checkpoints_dir.iterdir())
    assert files_a == files_b == ["latest.npz", "step_2800.npz", "step_3500.npz"]
    for name in files_a:
        with (
            np.load(runs[0].checkpoints_dir / name) as za,
            np.load(runs[1].checkpoints_dir / name) as zb,
        ):
            assert za.files == zb.files
            for key in za.files:
                assert np.array_equal(za[key], zb[key]), (name, key)
    # evaluation afterwards agrees too
    assert a.eval(3) == b.eval(3)
    # and so does the episode in progress: its step count and reward so far (in the
    # next step's metrics), its observation and the action already picked for it (in
    # the transition that step stores)
    assert next(a.steps()) == next(b.steps())
    assert agent_state(a.agent) == agent_state(b.agent)
    assert unwrap_native(a.env).state.tobytes() == unwrap_native(b.env).state.tobytes()


def test_python_steps_and_fused_train_interleave():
    a, b = trainer(fused=False), trainer()
    ma = list(itertools.islice(a.steps(), 1_700))
    mb = list(itertools.islice(b.steps(), 500))
    b.train(700)
    assert b.fused and b.agent.total_steps == 1_200
    mb += list(itertools.islice(b.steps(), 500))
    assert ma[:500] + ma[1_200:] == mb
    assert agent_state(a.agent) == agent_state(b.agent)


def test_fused_training_learns_cartpole():
    t = trainer(config=CONFIG.replace(hidden_sizes=(64, 64), buffer_capacity=10_000,
                                      min_replay_size=1_000, target_update_freq=200,
                                      epsilon_end=0.01, epsilon_decay_steps=10_000))  # fmt: skip
    best = -np.inf
    for _ in range(5):
        t.train(8_000)
        best = max(best, t.eval(10).mean_reward)
    assert best >= 150
