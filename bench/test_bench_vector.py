"""Env transitions/s against N envs stepped together (issue 25).

Run with ``pytest bench/test_bench_vector.py``; each case's transitions/s
is in its extra_info (``steps_per_s_median``). ``bench/vector_speed.py``
measures the same trainers side by side in interleaved rounds (the README's
table and the issue's bars).
"""

from __future__ import annotations

import pytest
from vector_speed import native_trainer, python_trainer


def _per_second(benchmark, trainer, n: int, rounds: int) -> None:
    before = trainer.agent.total_steps
    benchmark.pedantic(trainer.train, args=(n,), rounds=rounds, iterations=1, warmup_rounds=1)
    per_round = (trainer.agent.total_steps - before) / (rounds + 1)
    benchmark.extra_info["transitions_per_round"] = per_round
    benchmark.extra_info["steps_per_s_median"] = per_round / benchmark.stats.stats.median


@pytest.mark.parametrize("n_envs", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("train_freq", [16, 1])
def test_native_fused_vector(benchmark, n_envs, train_freq):
    """Compiled CartPole, fused loop, S1's 64x64 network, batch 32 (N = 1: the single env)."""
    trainer = native_trainer(n_envs, train_freq, 32)
    _per_second(benchmark, trainer, 32_000 if train_freq == 16 else 8_000, 5)


@pytest.mark.parametrize("n_envs", [1, 2, 4, 8])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_python_sleep_env_vector(benchmark, n_envs, mode):
    """A Python env whose step sleeps 1 ms: one env, or N in a Sync/AsyncVectorEnv."""
    if n_envs == 1 and mode == "async":
        pytest.skip("one env is the same in both modes")
    trainer = python_trainer(n_envs, mode, 4)
    try:
        _per_second(benchmark, trainer, 1_000, 3)
    finally:
        trainer.env.close()
