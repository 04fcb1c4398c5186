"""Scaling of the multi-seed runner: worker processes, and threads in one process.

Usage::

    python bench/multiseed.py                 # S1 on ember_np/CartPole-v1, 4 seeds x 100,000 steps
    python bench/multiseed.py --steps 2000 --rounds 1   # a quick check

Every seed is the run ``ember-np train ember_np/CartPole-v1 --preset ember
--seed s`` makes (:func:`ember_np.training.multiseed.train_seed`: S1, the
compiled env and the fused loop, checkpoints and logs), ``--seeds`` of them:

* ``processes``: :func:`train_seeds` on 1 and on 2 worker processes (spawned,
  one BLAS thread each), wall time of the whole call (process start included);
* ``threads``: the same seeds in this one process, on 1 and on 2 threads (the
  compiled kernels release the GIL, so two seeds' chunks run at once: what
  numba's parallel loops over seeds would give, without changing a kernel).

Total env steps/s = seeds x steps / wall time. 1 and 2 workers are measured
``--rounds`` times, interleaved (the order alternates each round), and the
ratio is of their medians: one worker's throughput alone varies by ~10% from
run to run on a shared VM, more than the effect measured. Bar (issue 13): 2
worker processes >= 1.8x the total env steps/s of 1. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # this process's seeds (threads mode)


def spec(steps: int):
    from ember_np.presets import get_preset
    from ember_np.training.multiseed import SeedSpec
    from ember_np.training.spec import RunSpec

    run = RunSpec("ember_np/CartPole-v1", preset="ember", config=get_preset("ember").config,
                  steps=steps, eval_every=steps, eval_episodes=1, checkpoint_freq=steps,
                  keep=1)  # fmt: skip
    return SeedSpec(run, "bench", "s1")


def with_processes(seeds: list[int], steps: int, workers: int) -> float:
    from ember_np.training.multiseed import train_seeds

    s = spec(steps)
    with tempfile.TemporaryDirectory() as root:
        t0 = time.perf_counter()
        result = train_seeds(s.run, seeds, workers=workers, root=root, progress=False)
        wall = time.perf_counter() - t0
    assert not result.failed, result.failed
    return len(seeds) * steps / wall


def with_threads(seeds: list[int], steps: int, threads: int) -> float:
    from ember_np.training.multiseed import train_seed

    s = spec(steps)
    with tempfile.TemporaryDirectory() as root:
        train_seed(spec(1000), 99, Path(root) / "warm")  # compile / load the kernels first
        queue = list(seeds)
        lock = threading.Lock()

        def work() -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    seed = queue.pop(0)
                train_seed(s, seed, Path(root) / f"seed_{seed}")

        t0 = time.perf_counter()
        pool = [threading.Thread(target=work) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        wall = time.perf_counter() - t0
    return len(seeds) * steps / wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--steps", type=int, default=100_000, help="env steps per seed")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--modes", default="processes,threads")
    p.add_argument("--rounds", type=int, default=3,
                   help="1 and 2 workers, interleaved, this many times (default 3)")  # fmt: skip
    args = p.parse_args()
    if args.rounds < 1:
        raise SystemExit(f"--rounds must be at least 1, got {args.rounds}")
    seeds = list(range(args.seeds))
    modes = args.modes.split(",")
    lines = [
        f"S1 on ember_np/CartPole-v1, {args.seeds} seeds x {args.steps:,} steps, "
        f"{args.rounds} interleaved rounds; load average before: "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        "",
        "| mode | 1 (median) | 2 (median) | ratio of medians (bar: processes >= 1.8x) "
        "| ratio per round |",
        "|---|---|---|---|---|",
    ]
    for mode in modes:
        run = with_processes if mode == "processes" else with_threads
        one: list[float] = []
        two: list[float] = []
        for r in range(args.rounds):  # alternate which goes first, so drift hits both
            for workers in (1, 2) if r % 2 == 0 else (2, 1):
                (one if workers == 1 else two).append(run(seeds, args.steps, workers))
            print(f"{mode} round {r + 1}: {two[-1] / one[-1]:.2f}x", file=sys.stderr)
        m1, m2 = statistics.median(one), statistics.median(two)
        per_round = ", ".join(f"{b / a:.2f}" for a, b in zip(one, two))
        lines.append(f"| {mode} | {m1:,.0f} env steps/s | {m2:,.0f} env steps/s | "
                     f"{m2 / m1:.2f}x | {per_round} |")  # fmt: skip
    print("\n".join(lines))


if __name__ == "__main__":
    main()
