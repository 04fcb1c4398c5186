"""One seed of a multi-seed run: the same training on a local worker and on a Dask worker.

:func:`train_seed` is what every seed of ``ember-np train ENV --seeds K``
runs, whether a local worker process (:mod:`ember_np.training.multiseed`)
or a task on a Dask cluster (:mod:`ember_np.training.cluster`) trains it:
the run ``ember-np train ENV --seed s`` makes, ``result.json`` last.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

from ember_np.checkpoint import atomic_write_text
from ember_np.stats import EvalReport
from ember_np.training.loop import LoopCallback, train_and_evaluate
from ember_np.training.seeds import RESULT_FILE, SeedResult, SeedSpec
from ember_np.training.spec import build

__all__ = ["CurveCallback", "train_seed"]


def train_seed(
    spec: SeedSpec,
    seed: int,
    run_dir: str | os.PathLike[str],
    on_steps: Callable[[int], None] | None = None,
) -> SeedResult:
    """Train one seed into the new run directory ``run_dir``; returns its result.

    The same run as ``ember-np train`` with ``--seed seed`` and ``spec``'s
    options: ``spec.run`` with the seed, built by :func:`~ember_np.training.spec.build`, the
    same loop
    (:func:`~ember_np.training.loop.train_and_evaluate`), a greedy evaluation
    every ``spec.eval_every`` steps and a final one. ``on_steps(n)`` is
    called after each chunk (progress). Writes ``result.json`` into the run
    directory last.
    """
    from ember_np.training.run import TrainingRun

    t0 = time.perf_counter()
    run = spec.run.replace(seed=seed)

    def new_run() -> TrainingRun:
        made = TrainingRun.create_in(run_dir, spec.name, spec.version)
        made.write_config(run.to_dict())
        return made

    trainer = build(run, new_run)
    try:  # closed at the end: an async vector env's processes stop with the seed
        curve = CurveCallback(t0, on_steps)
        # A seed that does not finish is trained again from the start (resume_seeds), so
        # its latest.npz is written with the numbered checkpoints and at its end only
        # (each write, replay buffer included, cost about a tenth of a chunk's training).
        report = train_and_evaluate(trainer, run.steps, run.eval_every, run.eval_episodes,
                                    [curve], latest_every_chunk=False)  # fmt: skip
    finally:
        trainer.env.close()
    result = SeedResult(seed, trainer.run.dir, report.mean_reward, trainer.best_eval_reward,
                        curve.curve, time.perf_counter() - t0)  # fmt: skip
    atomic_write_text(trainer.run.dir / RESULT_FILE, json.dumps(result.to_dict(), indent=1))
    return result


class CurveCallback(LoopCallback):
    """Records ``(step, mean eval reward, seconds since t0)`` per evaluation; passes on steps.

    Parameters
    ----------
    t0 : float
        ``time.perf_counter()`` when the seed started (before its env was made).
    on_steps : callable, optional
        Called with the env steps of every chunk (the parent's progress bar).
    """

    def __init__(self, t0: float, on_steps: Callable[[int], None] | None = None) -> None:
        self.t0 = t0
        self.on_steps = on_steps
        self.curve: list[tuple[int, float, float]] = []

    def on_chunk(self, trainer: Any, steps: int) -> None:
        """Pass the chunk's steps to ``on_steps``."""
        if self.on_steps is not None:
            self.on_steps(steps)

    def on_eval(self, trainer: Any, report: EvalReport, final: bool) -> None:
        """Append the evaluation to the curve."""
        self.curve.append((trainer.agent.total_steps, report.mean_reward,
                           time.perf_counter() - self.t0))  # fmt: skip
