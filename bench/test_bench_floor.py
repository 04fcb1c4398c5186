"""The floor cases of ``bench/floor.py`` under pytest-benchmark: the single-thread sgemm
rate and each update, with its FLOPs in ``extra_info`` so that a saved run gives the
fraction of floor speed (``flops / mean / sgemm rate``) of every case, measured side by
side. Run: ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE pytest bench -k floor``."""

from __future__ import annotations

import numpy as np
import pytest
from floor import ENVS, SGEMM_SIZE, env_sizes, update_call, update_flops

from ember_np.nn._blas import gemm
from ember_np.presets import get_preset

CASES = {"S1": ("ember", "CartPole-v1"), "S2": ("zoo", "CartPole-v1")}
CASES.update({f"rainbow-{e}": ("rainbow", e) for e in ENVS})


def test_sgemm_single_thread(benchmark):
    """The kernels' BLAS on one thread: a 1024^3 float32 product (the floors' unit)."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((SGEMM_SIZE, SGEMM_SIZE), dtype=np.float32) for _ in range(2))
    c = np.empty_like(a)
    gemm(a, b, c, False, False, 0.0)
    benchmark.extra_info["flops"] = 2 * SGEMM_SIZE**3
    benchmark(gemm, a, b, c, False, False, 0.0)


@pytest.mark.parametrize("case", list(CASES))
def test_update_floor(benchmark, case):
    """One update of the case's preset; ``extra_info["flops"]`` is its floor's FLOPs."""
    name, env_id = CASES[case]
    config = get_preset(name, env_id).config
    obs_size, n_actions = env_sizes(env_id)
    update = update_call(config, obs_size, n_actions)
    update()
    benchmark.extra_info["flops"] = update_flops(config, obs_size, n_actions)
    benchmark(update)
