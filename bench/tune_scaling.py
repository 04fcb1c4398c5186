"""How `ember-np tune` scales with worker processes: one fixed study, 1 worker vs 2.

    python bench/tune_scaling.py                     # 16 trials, 1 and 2 workers, 3 rounds
    python bench/tune_scaling.py --trials 2 --steps 1000 --rounds 1    # a quick check

Each round runs the same study twice from scratch, in a fresh tune directory
(SQLite storage): once with ``--workers 1`` and once with ``--workers 2``
(alternating which goes first), random sampler, no pruning. The fields that
set a trial's cost are fixed with ``--set`` (network, batch, train frequency,
gradient steps, replay sizes), so every trial trains the same number of
updates whatever the sampler draws: the ratio measures the workers, not the
luck of the draw. Time is the whole command's wall time (process start,
imports, storage, all trials, the summary), as a user waits for it.
Bar (issue 15): on a 2-core machine, 2 workers >= 1.7x as fast as 1.

Run it on a quiet machine. With Linux's autogroup scheduling
(``/proc/sys/kernel/sched_autogroup_enabled``), all processes of one session
share one slice of the CPUs against other busy sessions, so a second worker
then gains nothing: on the shared development machine two plain training
processes ran at 2,235 + 2,218 env steps/s where one alone ran at 4,359.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIXED = ["hidden_sizes=[64,64]", "batch_size=64", "train_freq=1", "gradient_steps=1",
         "min_replay_size=1000", "buffer_capacity=50000"]  # fmt: skip


def run_study(workers: int, trials: int, steps: int, seeds: int) -> float:
    """Wall seconds of one `ember-np tune` command on a fresh study."""
    with tempfile.TemporaryDirectory(prefix="ember_np_tune_bench_") as tmp:
        cmd = [sys.executable, "-m", "ember_np", "tune", "CartPole-v1", "--dir", tmp,
               "--trials", str(trials), "--workers", str(workers), "--steps", str(steps),
               "--seeds", str(seeds), "--evals", "2", "--eval-episodes", "5",
               "--sampler", "random", "--pruner", "none", "--quiet", "--set", *FIXED]  # fmt: skip
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True)
        elapsed = time.perf_counter() - t0
        if out.returncode != 0 or f"{trials} complete" not in out.stdout:
            sys.exit(f"ember-np tune failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
        return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--steps", type=int, default=30_000, help="env steps per seed")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per trial")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", help="write the times as JSON here")
    args = parser.parse_args()
    times: dict[int, list[float]] = {1: [], 2: []}
    # A warm-up command compiles (or loads) the kernels outside the timed runs.
    run_study(1, 1, min(args.steps, 2_000), 1)
    for r in range(args.rounds):
        for workers in (1, 2) if r % 2 == 0 else (2, 1):
            times[workers].append(run_study(workers, args.trials, args.steps, args.seeds))
            print(f"round {r + 1}: {workers} worker(s) {times[workers][-1]:.1f} s", flush=True)
    one, two = statistics.median(times[1]), statistics.median(times[2])
    print(f"\n{args.trials} trials x {args.seeds} seeds x {args.steps:,} steps, "
          f"median of {args.rounds}:")  # fmt: skip
    print("| workers | wall time | speed-up |\n|---|---|---|")
    print(f"| 1 | {one:.1f} s | 1.00x |\n| 2 | {two:.1f} s | **{one / two:.2f}x** (bar >= 1.7x) |")
    if args.out:
        result = {"settings": vars(args), "fixed": FIXED, "times": times, "speedup": one / two}
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
