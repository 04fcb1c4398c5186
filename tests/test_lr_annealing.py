"""Learning-rate annealing: DqnConfig.learning_rate_end / learning_rate_decay_steps.

The schedule against its formula, the agent's updates using the scheduled
rate on both loops (a replica with the rate set by hand takes bit-identical
steps), no annealing leaving updates bit-identical, and exact resume.
"""

from __future__ import annotations

import gymnasium as gym
import helpers
import numpy as np
import pytest

import ember_np.envs  # noqa: F401  (registers ember_np/CartPole-v1)
from ember_np import DqnAgent, DqnConfig, DqnTrainer, UpdateOptions
from ember_np.rng import Rng
from ember_np.training.setup import parse_sets

BASE = dict(
    hidden_sizes=(16, 16), learning_rate=2e-3, batch_size=16, buffer_capacity=2_000,
    min_replay_size=50, target_update_freq=40, epsilon_decay_steps=500, max_grad_norm=10.0,
)  # fmt: skip
ANNEALED = DqnConfig(**BASE, learning_rate_end=1e-4, learning_rate_decay_steps=300)


def formula(step, start, end, decay):
    return start + (end - start) * min(step / decay, 1.0)


def trainer(config, fused=None, seed=0):
    env = gym.make("ember_np/CartPole-v1")
    return DqnTrainer(env, DqnAgent.for_env(env, config, seed=seed), seed=seed, fused=fused)


def test_config_fields_defaults_validation_and_cli():
    c = DqnConfig()
    assert c.learning_rate_end is None and c.learning_rate_decay_steps == 100_000
    assert all(c.learning_rate_at(t) == c.learning_rate for t in (0, 10, 10**9))
    for bad in (0.0, -1e-4, float("inf"), "1e-5", True):
        with pytest.raises(ValueError, match="learning_rate_end must be a positive finite"):
            DqnConfig(learning_rate_end=bad)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="learning_rate_decay_steps must be a positive"):
            DqnConfig(learning_rate_decay_steps=bad)
    cli = DqnConfig(**parse_sets(["learning_rate_end=1e-5", "learning_rate_decay_steps=5000"]))
    assert cli.learning_rate_end == 1e-5 and cli.learning_rate_decay_steps == 5_000
    assert DqnConfig.from_dict(ANNEALED.to_dict()) == ANNEALED


@pytest.mark.parametrize("step", [0, 1, 77, 150, 299, 300, 301, 10_000])
def test_schedule_matches_the_formula(step):
    expected = formula(step, 2e-3, 1e-4, 300)
    agent = DqnAgent.for_env(gym.make("CartPole-v1"), ANNEALED)
    assert ANNEALED.learning_rate_at(step) == pytest.approx(expected, rel=1e-14)
    assert agent.learning_rate_at(step) == pytest.approx(expected, rel=1e-14)
    agent.set_total_steps(step)
    assert agent.learning_rate == agent.learning_rate_at(step)
    # rising schedules are linear too (end > start)
    up = ANNEALED.replace(learning_rate=1e-4, learning_rate_end=1e-3)
    assert up.learning_rate_at(step) == pytest.approx(formula(step, 1e-4, 1e-3, 300), rel=1e-14)


def replica_steps(config, n_steps, fused):
    """An agent trained ``n_steps`` with the rate of every step set by hand
    (a constant-rate config swapped in before each step) and the annealed one."""
    annealed = trainer(config, fused=fused)
    by_hand = trainer(config.replace(learning_rate_end=None), fused=fused)
    for step in range(n_steps):
        rate = annealed.agent.learning_rate_at(step + 1)  # training follows the step count
        by_hand.agent.config = by_hand.agent.config.replace(learning_rate=rate)
        by_hand.train(1)
    annealed.train(n_steps)
    return annealed, by_hand


@pytest.mark.parametrize("fused", [False, True], ids=["python loop", "fused loop"])
def test_every_update_uses_the_scheduled_rate(fused):
    annealed, by_hand = replica_steps(ANNEALED, 420, fused)
    assert annealed.fused == by_hand.fused == fused
    assert annealed.agent.n_updates > 300  # updates before, across and after the decay's end
    assert helpers.agent_state(annealed.agent) == helpers.agent_state(by_hand.agent)
    constant = trainer(ANNEALED.replace(learning_rate_end=None), fused=fused)
    constant.train(420)
    assert helpers.agent_state(constant.agent)[0] != helpers.agent_state(annealed.agent)[0]


def test_train_steps_uses_the_rate_of_the_step_count():
    """DqnAgent.train_steps (the Python API) against QNetwork.update at the rate."""
    t = trainer(ANNEALED, fused=False)
    t.train(120)
    agent = t.agent
    agent.set_total_steps(200)
    rate = formula(200, 2e-3, 1e-4, 300)
    reference = agent.online.copy()
    target = agent.target.copy()
    rng = Rng.from_state(agent.replay_rng.state.copy())
    batch = agent.buffer.sample(ANNEALED.batch_size, rng)
    reference.update(batch, target, UpdateOptions(gamma=ANNEALED.gamma, learning_rate=agent.learning_rate, max_grad_norm=10.0))  # fmt: skip
    assert agent.learning_rate == pytest.approx(rate, rel=1e-14)
    agent.train_steps(1)
    np.testing.assert_array_equal(agent.online.params, reference.params)


def test_no_annealing_is_bit_identical_to_a_constant_rate():
    """learning_rate_end None (and = learning_rate) take the very steps of a
    fixed rate: QNetwork.update at config.learning_rate, step by step."""
    config = DqnConfig(**BASE)
    t = trainer(config, fused=False)
    t.train(100)
    agent = t.agent
    reference = agent.online.copy()
    rng = Rng.from_state(agent.replay_rng.state.copy())
    for _ in range(3):
        batch = agent.buffer.sample(config.batch_size, rng)
        reference.update(batch, agent.target, UpdateOptions(gamma=config.gamma, learning_rate=config.learning_rate, max_grad_norm=10.0))  # fmt: skip
    agent.train_steps(3)
    np.testing.assert_array_equal(agent.online.params, reference.params)
    same = trainer(config.replace(learning_rate_end=config.learning_rate), fused=True)
    none = trainer(config, fused=True)
    same.train(400)
    none.train(400)
    assert helpers.agent_state(same.agent) == helpers.agent_state(none.agent)


def test_exact_resume_with_annealing(tmp_path):
    a = trainer(ANNEALED)
    a.train(200)
    path = a.agent.save(tmp_path / "a.npz", include_buffer=True)
    restored = DqnAgent.from_checkpoint(path)
    assert restored.config.learning_rate_end == 1e-4
    assert restored.learning_rate == a.agent.learning_rate < 2e-3
    runs = [DqnTrainer(gym.make("ember_np/CartPole-v1"), agent, seed=3)
            for agent in (a.agent, restored)]  # fmt: skip
    for t in runs:
        t.train(250)  # through the end of the decay
    assert helpers.agent_state(a.agent) == helpers.agent_state(restored)
