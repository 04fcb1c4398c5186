"""The cost of action masks: one agent step and one update, with and without masks.

Run with ``pytest bench -k masks``. An agent built without masks should cost
what it did before masks existed (the kernels branch once per call on an
empty mask); a masked step adds the mask check, its packing into the buffer
and the masked argmax.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import BATCH

from ember_np import (
    CircularBuffer,
    DqnAgent,
    DqnConfig,
    IndexActionMapper,
    QNetwork,
    Rng,
    UpdateOptions,
)
from ember_np import VecEncoder as Vec

N_OBS, N_ACT = 4, 6  # Taxi's action count, CartPole-sized observations
# min_replay_size beyond any number of rounds: the step never trains
CONFIG = DqnConfig(hidden_sizes=(64, 64), learning_rate=1e-3, batch_size=BATCH,
                   buffer_capacity=10_000_000, min_replay_size=10_000_000,
                   target_update_freq=200, epsilon_decay_steps=10_000)  # fmt: skip


@pytest.mark.parametrize("masked", [False, True], ids=["plain", "masked"])
def test_agent_step(benchmark, masked):
    """One observe_encoded(act_next=True) without training (store, count, act)."""
    agent = DqnAgent(Vec(N_OBS), IndexActionMapper(N_ACT), CONFIG.replace(action_masks=masked))
    x = np.array([0.01, -0.02, 0.03, 0.04], dtype=np.float32)
    mask = np.array([1, 1, 0, 0, 1, 0], dtype=np.int8) if masked else None  # as Taxi's info

    def step():
        agent.set_total_steps(0)  # the same epsilon every round
        return agent.observe_encoded(x, 1, 1.0, x, 0, True, next_action_mask=mask)

    step()
    benchmark.extra_info["action_masks"] = masked
    benchmark(step)


@pytest.mark.parametrize("masked", [False, True], ids=["plain", "masked"])
def test_update_with_masks(benchmark, masked, rng):
    """One S1-sized update (6 actions) of a batch sampled from a (masked) buffer."""
    buf = CircularBuffer(2_000, N_OBS, N_ACT, action_masks=masked)
    data = np.random.default_rng(0)
    for _ in range(2_000):
        x = data.standard_normal(N_OBS).astype(np.float32)
        mask = data.random(N_ACT) < 0.5 if masked else None
        if mask is not None:
            mask[0] = True
        buf.push(x, int(data.integers(N_ACT)), 1.0, x, 0, next_action_mask=mask)
    net = QNetwork((N_OBS, 64, 64, N_ACT), seed=0)
    target = net.copy()
    batch = buf.sample(BATCH, Rng(1))
    options = UpdateOptions(gamma=0.99, learning_rate=1e-4, max_grad_norm=10.0)
    net.update(batch, target, options)
    benchmark(net.update, batch, target, options)
