"""Env transitions/s against N envs stepped together (issue 25).

Run with ``pytest bench/test_bench_vector.py``; each case's transitions/s
is in its extra_info (``steps_per_s_median``). ``bench/vector_speed.py``
measures the same trainers side by side in interleaved rounds (the README's
table and the issue's bars). ``test_native_vector_side_by_side`` times N = 1
and N = 16 at ``train_freq`` 64 in interleaved rounds (their ratio in
extra_info), ``test_vector_stage`` each stage of a vector step alone
(``bench/vector_stages.py`` prints both as tables).
"""

from __future__ import annotations

import statistics
import time

import pytest
from vector_speed import native_trainer, python_trainer
from vector_stages import N_VEC, stage_calls, trainer


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


def test_native_vector_side_by_side(benchmark):
    """N = 1 and N = 16 at train_freq 64 (acting and stepping dominate), batch 32, 64x64:
    each round trains both, so machine load hits both alike. extra_info has each
    one's median transitions/s and ``ratio`` (N = 16 over N = 1)."""
    trainers = {1: trainer(1), N_VEC: trainer(N_VEC)}
    rates: dict[int, list[float]] = {n: [] for n in trainers}

    def one_round() -> None:
        for n, tr in trainers.items():
            before = tr.agent.total_steps
            t0 = time.perf_counter()
            tr.train(64_000)
            rates[n].append((tr.agent.total_steps - before) / (time.perf_counter() - t0))

    benchmark.pedantic(one_round, rounds=5, iterations=1, warmup_rounds=1)
    medians = {n: statistics.median(r[1:]) for n, r in rates.items()}  # (r[0]: the warm-up)
    for n, rate in medians.items():
        benchmark.extra_info[f"transitions_per_s_n{n}"] = rate
    benchmark.extra_info["ratio"] = medians[N_VEC] / medians[1]


_STAGE_TRAINER: list = []


def _stages() -> dict:
    if not _STAGE_TRAINER:
        _STAGE_TRAINER.append(trainer(N_VEC))
    return stage_calls(_STAGE_TRAINER[0])


@pytest.mark.parametrize("stage", range(5), ids=["env", "act_batch", "act_each", "push", "update"])
def test_vector_stage(benchmark, stage):
    """One stage of a vector step of 16 envs alone, in a compiled loop (see
    bench/vector_stages.py); extra_info: its microseconds per transition."""
    name, (run, per_call) = list(_stages().items())[stage]
    run(2)  # compiled / loaded outside the timed rounds
    calls = max(20_000 * 16 // per_call, 50)
    benchmark.pedantic(run, args=(calls,), rounds=5, iterations=1)
    benchmark.extra_info["stage"] = name
    benchmark.extra_info["us_per_transition"] = benchmark.stats.stats.min * 1e6 / (calls * per_call)


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
