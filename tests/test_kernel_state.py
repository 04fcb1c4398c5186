"""Kernel state as NamedTuples: one specialization whatever the settings' values."""

from __future__ import annotations

import numpy as np

from ember_np import Batch, DqnAgent, DqnConfig, QNetwork, UpdateOptions
from ember_np.dqn import agent as agent_mod
from ember_np.dqn.learner import network as nw
from ember_np.encoding import IndexActionMapper, VecEncoder
from ember_np.types import EpisodeStatus, Experience

BASE = DqnConfig(hidden_sizes=(8,), batch_size=4, buffer_capacity=64, min_replay_size=4,
                 target_update_freq=3, epsilon_decay_steps=10)  # fmt: skip


def test_settings_of_any_values_compile_one_agent_step():
    """Integer-valued floats, None clipping, tau < 1, double DQN: the settings tuple
    has fixed field types, so the per-step kernels compile once."""
    variants = [
        BASE,
        BASE.replace(gamma=1, learning_rate=1, tau=1, epsilon_start=1, epsilon_end=0),
        BASE.replace(max_grad_norm=10, tau=0.5, double_dqn=True, gradient_steps=2),
        BASE.replace(huber_delta=2, train_freq=2, epsilon_decay_steps=0),
        BASE.replace(learning_rate_end=1, learning_rate_decay_steps=5),  # annealed rate
        BASE.replace(n_step=3, gamma=1, per_beta_start=1, per_beta_steps=0),
        BASE.replace(n_step=2, prioritized_replay=True, per_alpha=1, per_eps=1),
    ]
    rng = np.random.default_rng(0)
    counts = []
    for config in variants:
        agent = DqnAgent(VecEncoder(3), IndexActionMapper(2), config, seed=1)
        settings = agent_mod.agent_settings(config)
        assert [type(v) for v in settings[1:]] == [
            int, int, int, int, int, float, float, float, int, float, int, float, int
        ]  # fmt: skip
        assert [type(v) for v in settings.update] == [float, float, bool, float]
        for _ in range(12):
            obs, nxt = rng.standard_normal(3), rng.standard_normal(3)
            agent.observe(Experience(obs, int(rng.integers(2)), 1.0, nxt, EpisodeStatus(0)))
            agent.act_epsilon_greedy(nxt)
        assert agent.n_updates > 0
        counts.append((len(agent_mod.agent_step.signatures),
                       len(agent_mod.act_explore.signatures)))  # fmt: skip
    # other tests in the process may have compiled other observation sizes:
    # what matters is that these variants added nothing after the first
    assert counts == [counts[0]] * len(variants), counts


def test_update_settings_are_typed_the_same_whatever_the_arguments():
    a = nw.update_settings(1, 1, 0, None)
    b = nw.update_settings(1e-3, 2.0, True, 10)
    assert [type(v) for v in a] == [type(v) for v in b] == [float, float, bool, float]
    net, target = QNetwork((3, 4, 2), seed=0), QNetwork((3, 4, 2), seed=1)
    batch = (np.zeros((2, 3)), np.array([0, 1]), np.ones(2), np.zeros((2, 3)), np.ones(2))
    net.update(
        batch, target, UpdateOptions(gamma=1, learning_rate=1, huber_delta=1, max_grad_norm=None)
    )
    n = len(nw.checked_update.signatures)
    net.update(
        batch,
        target,
        UpdateOptions(gamma=0.5, learning_rate=1e-3, double_dqn=True, max_grad_norm=3),
    )
    net.update(
        Batch(*batch, weights=[1.0, 2.0]), target, UpdateOptions(gamma=0.5, learning_rate=1e-3)
    )
    assert len(nw.checked_update.signatures) == n


def test_kernel_state_views_are_live():
    """The NamedTuples hold the objects' own arrays, not copies."""
    agent = DqnAgent(VecEncoder(3), IndexActionMapper(2), BASE, seed=0)
    net = agent.online.kernel_state(agent.target)
    assert net.params is agent.online.params
    assert np.shares_memory(net.target, agent.target.weights[0])
    assert agent.buffer.kernel_state.storage is agent.buffer.storage
