"""Shared fixtures for the pytest-benchmark suite (run: ``pytest bench``)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from ember_np import CircularBuffer, Rng  # noqa: E402

#: The speed-comparison settings of ANCHORS.md: S1 = ember-rl's CartPole
#: network, S2 = the RL Zoo's CartPole network; both use batch 64.
SETTINGS = {"S1": (4, 64, 64, 2), "S2": (4, 256, 256, 2)}
BATCH = 64


def filled_buffer(capacity: int = 10_000, obs_size: int = 4, n: int = 10_000) -> CircularBuffer:
    buf = CircularBuffer(capacity, obs_size, 2)
    data = np.random.default_rng(0)
    obs = data.standard_normal((n, obs_size)).astype(np.float32)
    for i in range(n):
        buf.push(obs[i], i % 2, 1.0, obs[(i + 1) % n], 1 if i % 50 == 49 else 0)
    return buf


@pytest.fixture(scope="session")
def buffer() -> CircularBuffer:
    return filled_buffer()


@pytest.fixture
def rng() -> Rng:
    return Rng(0)
