"""Env transitions per second against N envs stepped together (issue 25), side by side.

Usage::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/vector_speed.py
    python bench/vector_speed.py --quick          # fewer steps (a smoke run)

Two cases, each measured for every N in one process, in interleaved rounds
(round r times every N once, so a change in machine load hits every column
alike), the median of the rounds reported:

* native: ``DqnTrainer.train`` on compiled CartPole (``ember_np/CartPole-v1``)
  in the fused loop, the 64x64 network of setting S1, at ``train_freq`` 16
  (acting and stepping dominate) and 1 (the update dominates). N = 1 is the
  single env's fused loop; N > 1 a ``NativeVecEnv`` in the compiled vector loop.
* python: a CartPole-shaped Python env whose ``step`` sleeps 1 ms (a
  simulator or a remote game), N = 1 the single env, N > 1 a gymnasium
  ``SyncVectorEnv`` / ``AsyncVectorEnv``, the same update ratio.

Every trainer first trains past ``min_replay_size`` (and compiles), so the
timed steps all learn. Prints a Markdown table (the README's) and, with
``--json PATH``, writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from envs import NullEnv  # noqa: E402
from settings import S1  # noqa: E402

NS = (1, 2, 4, 8, 16)


class SleepEnv(NullEnv):
    """:class:`NullEnv` whose ``step`` waits ``delay`` seconds (1 ms): a slow Python env."""

    def __init__(self, delay: float = 1e-3) -> None:
        super().__init__()
        self.delay = delay

    def step(self, action: Any) -> Any:
        if self.delay:  # (sleep(0) still yields the core: not a free env)
            time.sleep(self.delay)
        return super().step(action)


def native_trainer(n_envs: int, train_freq: int, batch_size: int, warmup: int | None = None) -> Any:
    """A fused trainer on compiled CartPole with N envs, trained ``warmup`` steps (default:
    its replay warm-up) plus one vector step's worth per env."""
    import gymnasium as gym

    from ember_np import DqnAgent, DqnTrainer
    from ember_np.envs import NativeVecEnv

    config = S1.replace(train_freq=train_freq, batch_size=batch_size)
    env = gym.make("ember_np/CartPole-v1") if n_envs == 1 else NativeVecEnv("CartPole-v1", n_envs)
    trainer = DqnTrainer(env, DqnAgent.for_env(env, config, seed=0), seed=0)
    assert trainer.fused
    trainer.train((config.learning_starts if warmup is None else warmup) + 16 * n_envs)
    return trainer


def python_trainer(n_envs: int, mode: str, train_freq: int, delay: float = 1e-3) -> Any:
    """A trainer on :class:`SleepEnv` (N > 1: gymnasium Sync/Async), past its warm-up."""
    from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

    from ember_np import DqnAgent, DqnTrainer
    from ember_np.training.setup import ASYNC_START_METHOD

    config = S1.replace(train_freq=train_freq, min_replay_size=256, batch_size=64)
    if n_envs == 1:
        env: Any = SleepEnv(delay)
    else:
        fns = [lambda: SleepEnv(delay)] * n_envs
        if mode == "async":  # started as ember-np train starts its copies
            env = AsyncVectorEnv(fns, context=ASYNC_START_METHOD)
        else:
            env = SyncVectorEnv(fns)
    agent = DqnAgent.for_env(env, config, seed=0)
    trainer = DqnTrainer(env, agent, seed=0, eval_env=SleepEnv(0.0))
    trainer.train(config.learning_starts + 4 * n_envs)
    return trainer


def rates(trainers: dict[Any, Any], steps: int, rounds: int) -> dict[Any, float]:
    """Median transitions/s of ``trainer.train(steps)`` per key, rounds interleaved."""
    times: dict[Any, list[float]] = {key: [] for key in trainers}
    for _ in range(rounds):
        for key, trainer in trainers.items():
            before = trainer.agent.total_steps
            t0 = time.perf_counter()
            trainer.train(steps)
            elapsed = time.perf_counter() - t0
            times[key].append((trainer.agent.total_steps - before) / elapsed)
    return {key: statistics.median(v) for key, v in times.items()}


def close(trainers: dict[Any, Any]) -> None:
    for trainer in trainers.values():
        trainer.env.close() if hasattr(trainer.env, "close") else None


def measure(quick: bool) -> dict[str, Any]:
    from ember_np.nn._blas import set_blas_threads

    set_blas_threads(1)
    scale = 0.2 if quick else 1.0
    out: dict[str, Any] = {"cases": []}
    for train_freq in (16, 1):
        for batch in (32, 64):
            trainers = {n: native_trainer(n, train_freq, batch) for n in NS}
            steps = int((160_000 if train_freq == 16 else 32_000) * scale)
            r = rates(trainers, steps, 5)
            out["cases"].append({"case": "native CartPole, fused", "train_freq": train_freq,
                                 "batch_size": batch, "rates": r})  # fmt: skip
    for mode in ("sync", "async"):
        trainers = {n: python_trainer(n, mode, 4) for n in (1, 2, 4, 8)}
        r = rates(trainers, int(2_000 * scale), 3)
        close(trainers)
        out["cases"].append({"case": f"Python env, 1 ms step, {mode}", "train_freq": 4,
                             "batch_size": 64, "rates": r})  # fmt: skip
    out["load"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return out


def table(result: dict[str, Any]) -> str:
    lines = ["| case | train_freq | batch | " + " | ".join(f"N={n}" for n in NS) + " |",
             "|---|---|---|" + "---|" * len(NS)]  # fmt: skip
    for case in result["cases"]:
        r = {int(k): v for k, v in case["rates"].items()}
        cells = []
        for n in NS:
            if n in r:
                cells.append(f"{r[n]:,.0f} ({r[n] / r[1]:.2f}x)")
            else:
                cells.append("-")
        lines.append(f"| {case['case']} | {case['train_freq']} | {case['batch_size']} | "
                     + " | ".join(cells) + " |")  # fmt: skip
    lines.append("")
    lines.append(f"env transitions/s (x: against N=1), median of interleaved rounds; load "
                 f"average after: {result['load']}")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--quick", action="store_true", help="a fifth of the steps")
    p.add_argument("--json", type=Path, help="write the numbers here")
    args = p.parse_args()
    result = measure(args.quick)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))


if __name__ == "__main__":
    main()
