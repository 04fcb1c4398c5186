"""TensorBoard event files of a run: the scalars its JSONL logs hold, as a loop callback.

:class:`TensorBoardCallback` is a :class:`~ember_np.training.loop.LoopCallback`
(``ember-np train ... --tensorboard DIR``); :func:`write_seed_events` writes
the same files for the seeds of a multi-seed run, from each seed's logs, once
the seeds have finished (its workers, local processes or a Dask cluster's,
need no tensorboardX). The writer is tensorboardX (``pip install
"ember-np[tensorboard]"``): no TensorFlow, no torch.

The scalars, each at its env step (the step a training episode ended at, or
the step of the evaluation)::

    train/total_reward, train/length    each training episode (train_episodes.jsonl)
    train/epsilon, train/loss           its extras (loss: after the first update)
    eval/total_reward, eval/length      each evaluation episode (eval_episodes.jsonl)
    eval/mean_reward                    each evaluation's mean (the EvalReport)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ember_np.stats import EvalReport
from ember_np.training.loop import LoopCallback

__all__ = ["INSTALL_HINT", "TensorBoardCallback", "write_run_events", "write_seed_events"]

#: The one line said when tensorboardX is missing.
INSTALL_HINT = 'TensorBoard logging needs tensorboardX: pip install "ember-np[tensorboard]"'


def _summary_writer() -> Any:
    """tensorboardX's ``SummaryWriter`` class; ImportError (:data:`INSTALL_HINT`) without it."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return SummaryWriter


class TensorBoardCallback(LoopCallback):
    """Writes a run's scalars to TensorBoard event files under ``log_dir`` as it trains.

    The training and evaluation episodes come from what the run appends to
    its JSONL logs (:meth:`on_train_episodes`, :meth:`on_eval_episodes`), so the
    event files hold the same numbers (as float32, TensorBoard's scalar type);
    a trainer without a :class:`~ember_np.TrainingRun` gets ``eval/mean_reward``
    only. The files are flushed after every chunk and closed after the final
    evaluation (or by :meth:`close`).

    Parameters
    ----------
    log_dir : str or os.PathLike
        Directory of the event files (made when training starts).

    Raises
    ------
    ImportError
        tensorboardX is not installed (:data:`INSTALL_HINT`).
    """

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        self._writer_class = _summary_writer()
        self.log_dir = Path(log_dir)
        self.writer: Any = None

    def _open(self) -> Any:
        if self.writer is None:
            self.writer = self._writer_class(str(self.log_dir))
        return self.writer

    def on_training_start(self, trainer: Any) -> None:
        """Open the writer (its directory is made here)."""
        self._open()

    def on_train_episodes(self, trainer: Any, rows: list[dict[str, Any]]) -> None:
        """``train/total_reward``, ``train/length`` and each extra, at the episode's step."""
        add = self._open().add_scalar
        for row in rows:
            step = int(row["total_steps"])
            add("train/total_reward", row["total_reward"], step)
            add("train/length", row["length"], step)
            for name, value in row.get("extras", {}).items():
                add(f"train/{name}", value, step)

    def on_chunk(self, trainer: Any, steps: int) -> None:
        """Flush: what a stopped run trained is on disk."""
        self._open().flush()

    def on_eval_episodes(self, trainer: Any, rows: list[dict[str, Any]]) -> None:
        """``eval/total_reward`` and ``eval/length`` per episode, at the evaluation's step."""
        add = self._open().add_scalar
        for row in rows:
            step = int(row["total_steps_at_eval"])
            add("eval/total_reward", row["total_reward"], step)
            add("eval/length", row["length"], step)

    def on_eval(self, trainer: Any, report: EvalReport, final: bool) -> None:
        """``eval/mean_reward`` at the evaluation's step; the final one closes the files."""
        self._open().add_scalar("eval/mean_reward", report.mean_reward, report.total_steps)
        if final:
            self.close()
        else:
            self.writer.flush()

    def close(self) -> None:
        """Flush and close the event files (a later training opens new ones)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def write_run_events(
    run_dir: str | os.PathLike[str],
    log_dir: str | os.PathLike[str],
    eval_means: Iterable[tuple[int, float]],
) -> None:
    """The event files :class:`TensorBoardCallback` writes, from a finished run's logs.

    Parameters
    ----------
    run_dir : str or os.PathLike
        A run directory (its ``train_episodes.jsonl`` and ``eval_episodes.jsonl``
        are read; nothing in it is written).
    log_dir : str or os.PathLike
        Directory of the event files.
    eval_means : iterable of (int, float)
        Each evaluation's step and mean reward (a seed's ``result.json`` curve).
    """
    from ember_np.training.run import TrainingRun

    run = TrainingRun.resume(run_dir)
    callback = TensorBoardCallback(log_dir)
    callback.on_training_start(None)
    callback.on_train_episodes(None, run.read_train_episodes())
    callback.on_eval_episodes(None, run.read_eval_episodes())
    for step, mean in eval_means:
        callback.on_eval(None, EvalReport(int(step), 0, {"episode_reward": mean}), False)
    callback.close()


def write_seed_events(seeds: Sequence[Any], log_dir: str | os.PathLike[str]) -> list[Path]:
    """Each finished seed's event files, under ``log_dir/seed_<s>/``; their directories.

    Parameters
    ----------
    seeds : sequence of SeedResult
        The seeds (``MultiSeedResult.runs``): each one's ``run_dir`` logs and
        ``curve`` are written as :func:`write_run_events` writes a run's.
    log_dir : str or os.PathLike
        The parent directory of the seeds' event files.
    """
    written = []
    for result in seeds:
        where = Path(log_dir) / f"seed_{result.seed}"
        write_run_events(result.run_dir, where, [(s, m) for s, m, _ in result.curve])
        written.append(where)
    return written
