"""Kernel threads: training with the other cores busy beside quiet, and the update by thread count.

Run with (the two OpenBLAS variables unset for this command alone, so
OpenBLAS picks its kernels by itself; the case records which it picked):

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m pytest bench/test_bench_threads.py

``DqnTrainer.train`` with CartPole-v1's ``rainbow`` preset (64-wide dueling
LayerNorm network, batch 128) on ``ember_np/CartPole-v1``. The case starts one
spinning process per core but one, and alternates timed rounds with the
spinners running and stopped (SIGCONT / SIGSTOP), so the quiet and busy
figures come from the same minutes of the same run. ``extra_info`` holds both
medians and their ratio (issue 23's bar: busy >= 0.8x quiet).

Two settings side by side: ``calling_thread``, the kernels' default (their
products run on the calling thread, ``set_kernel_threads(1)``), and
``all_cores``, the behaviour before issue 23 (the kernels' OpenBLAS on
OpenBLAS's default count, one thread per core, ``set_kernel_threads(cores)``).
``test_update_by_kernel_threads`` times one update of S1 and S2 both ways
(quiet machine): what a wide network gains by opting into threads.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import gymnasium as gym
import numpy as np
import pytest
from conftest import BATCH, SETTINGS

from ember_np import (
    DqnAgent,
    DqnTrainer,
    QNetwork,
    UpdateOptions,
    kernel_threads,
    set_kernel_threads,
)
from ember_np.nn._blas import KERNEL_BLAS
from ember_np.presets import get_preset

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGSTOP / SIGCONT")

CORES = os.cpu_count() or 1
STEPS = 4_000  # env steps a round: ~0.5 s quiet on a 2-core EPYC
ROUNDS = 6  # timed rounds: 3 quiet, 3 busy, alternating


@contextmanager
def spinners(n: int) -> Iterator[list[subprocess.Popen]]:
    """``n`` processes that spin on a core each, started stopped; killed on exit."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        for p in procs:
            os.kill(p.pid, signal.SIGSTOP)
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _blas_record() -> dict:
    """Which OpenBLAS ran, per threadpoolctl (NumPy's instance: the kernels' copy is
    the same file on the same CPU, so it picks the same kernels)."""
    record = {"kernel_blas": KERNEL_BLAS, "kernel_threads": kernel_threads()}
    if KERNEL_BLAS.startswith("private copy: "):  # the kernels' copy, asked directly
        lib = ctypes.CDLL(KERNEL_BLAS.split(": ", 1)[1])  # already loaded: the same instance
        for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename",
                     "openblas_get_corename64_", "openblas_get_corename"):  # fmt: skip
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                record["kernel_corename"] = fn().decode()
                break
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return record | {"threadpoolctl": "not installed (pip install 'ember_np[bench]')"}
    keys = ("internal_api", "version", "architecture", "num_threads", "filepath")
    record["numpy_blas"] = [{k: info.get(k) for k in keys} for info in threadpool_info()]
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS"):
        record[name] = os.environ.get(name)
    return record


@pytest.mark.parametrize("setting", ["calling_thread", "all_cores"])
def test_train_rainbow_with_busy_cores(benchmark, setting):
    """Env steps/s of the rainbow preset, busy (timed by the benchmark) and quiet."""
    config = get_preset("rainbow", "CartPole-v1").config
    set_kernel_threads(1 if setting == "calling_thread" else CORES)
    try:
        env = gym.make("ember_np/CartPole-v1")
        trainer = DqnTrainer(env, DqnAgent.for_env(env, config, seed=0), seed=0)
        trainer.train(config.min_replay_size + 1_000)  # compile / load, fill the buffer
        with spinners(max(CORES - 1, 1)) as procs:
            states: list[str] = []

            def alternate() -> None:
                busy = len(states) % 2 == 1
                for p in procs:
                    os.kill(p.pid, signal.SIGCONT if busy else signal.SIGSTOP)
                states.append("busy" if busy else "quiet")

            benchmark.pedantic(
                trainer.train, args=(STEPS,), setup=alternate, rounds=ROUNDS, iterations=1
            )
        times = benchmark.stats.stats.data[-ROUNDS:]
        kinds = states[-ROUNDS:]
        quiet = STEPS / np.median([t for t, k in zip(times, kinds) if k == "quiet"])
        busy = STEPS / np.median([t for t, k in zip(times, kinds) if k == "busy"])
        benchmark.extra_info.update(
            setting=setting,
            spinners=max(CORES - 1, 1),
            env_steps_per_round=STEPS,
            quiet_steps_per_s_median=round(float(quiet)),
            busy_steps_per_s_median=round(float(busy)),
            busy_over_quiet=round(float(busy / quiet), 3),
            **_blas_record(),
        )
    finally:
        set_kernel_threads(1)


@pytest.mark.parametrize("threads", [1, CORES], ids=["calling_thread", "all_cores"])
@pytest.mark.parametrize("setting", ["S1", "S2"])
def test_update_by_kernel_threads(benchmark, setting, threads, buffer, rng):
    """One plain DQN update (as ``test_bench_kernels.py::test_update``) with the kernels
    on the calling thread (the default) or on every core (``set_kernel_threads``):
    what a wide network (S2, 256 units) gains from threads on a quiet machine."""
    net = QNetwork(SETTINGS[setting], seed=0)
    target = net.copy()
    batch = buffer.sample(BATCH, rng)
    options = UpdateOptions(gamma=0.99, learning_rate=1e-4, max_grad_norm=10.0)
    set_kernel_threads(threads)
    try:
        net.update(batch, target, options)  # compile / load outside the timed region
        benchmark.extra_info.update(layer_sizes=SETTINGS[setting], kernel_threads=threads)
        benchmark(net.update, batch, target, options)
    finally:
        set_kernel_threads(1)
