"""DqnPolicy per-call latency on both forward paths (S1 network, 4-64-64-2).

Run with ``pytest bench -k policy``. Bars (issue 16): ``act`` <= 10 µs with
``backend="numpy"``, <= 2 µs with ``backend="numba"``. Start-up time, memory
and installed size are measured per fresh process by ``bench/deploy.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import BATCH, SETTINGS

from ember_np import DqnPolicy, IndexActionMapper, VecEncoder


def s1_policy(backend: str) -> DqnPolicy:
    sizes = SETTINGS["S1"]
    n = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    params = np.random.default_rng(0).normal(0.0, 0.3, n).astype(np.float32)
    return DqnPolicy(sizes, params, VecEncoder(sizes[0]), IndexActionMapper(sizes[-1]), backend)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_policy_act(benchmark, backend):
    """One greedy action from one CartPole observation (float32 array)."""
    policy = s1_policy(backend)
    obs = np.array([0.01, -0.02, 0.03, 0.04], dtype=np.float32)
    policy.act(obs)  # compile / load outside the timed region
    benchmark.extra_info["backend"] = backend
    benchmark(policy.act, obs)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_policy_act_batch(benchmark, backend):
    """Greedy actions of a batch of 64 observations."""
    policy = s1_policy(backend)
    obs = np.random.default_rng(1).standard_normal((BATCH, 4)).astype(np.float32)
    policy.act_batch(obs)
    benchmark.extra_info["backend"] = backend
    benchmark(policy.act_batch, obs)
