"""The workers of ``ember-np tune``: W processes running trials against one storage.

:func:`objective_for` (the Optuna objective: sample, train, report, score),
:func:`work` (one worker's loop until the study holds its trials), the
worker processes (:func:`spawn_workers`, :func:`stop_workers`; ``python -m
ember_np.tune`` is one) and the stop protocol between them.
"""

from __future__ import annotations

import _thread
import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ember_np.training.setup import SetupError
from ember_np.tune.search import TuneSettings, evaluate_config, search_space, trial_seeds
from ember_np.tune.storage import SETTINGS_ATTR, open_storage, open_study

INSTALL_HINT = 'ember-np tune needs Optuna: pip install "ember-np[tune]"'
DEFAULT_HEARTBEAT = 10  # seconds; a dead worker's trial is failed after 3x this
MAX_CONSECUTIVE_FAILURES = 5  # a worker whose trials keep raising stops


class SurplusTrial(Exception):
    """Raised by :func:`objective_for`'s objective when the study already has its
    trials: the trial ends without sampling or training (:func:`work` moves on)."""


def objective_for(settings: TuneSettings, n_trials: int, quiet: bool) -> Callable[[Any], float]:
    """The Optuna objective each worker's ``study.optimize`` runs (see :func:`work`).

    Parameters
    ----------
    settings : TuneSettings
        The search: what its algorithm's search space samples, the budget and seeds
        :func:`evaluate_config` trains.
    n_trials : int
        The study's target count of trials.
    quiet : bool
        Print no line per trial.

    Returns
    -------
    callable
        ``objective(trial) -> float``: samples a config, trains it on
        ``settings.seeds`` seeds reporting each evaluation (so a pruner can stop
        it), records the worker, seeds, config and scores as the trial's user
        attributes, and returns the IQM of the seeds' final scores.

    Raises
    ------
    SurplusTrial
        From the objective, when ``n_trials`` trials that have not failed are
        already ahead of this one (another worker started them): the trial is
        marked ``surplus`` and nothing is sampled.
    optuna.TrialPruned
        From the objective, when the pruner stops the trial or its replay
        buffers do not fit in memory.
    """
    import optuna
    from optuna.trial import TrialState

    from ember_np.stats import iqm

    worker = f"{socket.gethostname()}:{os.getpid()}"
    space = search_space(settings)

    def objective(trial: optuna.Trial) -> float:
        ahead = sum(
            1
            for t in trial.study.get_trials(deepcopy=False)
            if t.number < trial.number and t.state != TrialState.FAIL
        )
        if ahead >= n_trials:
            trial.set_user_attr("surplus", True)
            raise SurplusTrial
        trial.set_user_attr("worker", worker)
        t0 = time.perf_counter()
        config = space.suggest_config(trial, settings)
        seeds = trial_seeds(settings.seed, trial.params, settings.seeds)
        trial.set_user_attr("seeds", seeds)
        trial.set_user_attr("config", config.to_dict())

        def report(step: int, value: float) -> bool:
            with _STOP.shielded():  # not in the middle of a storage write
                trial.report(value, step)
                if trial.should_prune():
                    _say(quiet, f"trial {trial.number}: pruned at step {step:,} (IQM {value:.2f})")
                    return True
                return False

        with _STOP.interruptible():  # a stop request fails the trial (Optuna marks it)
            try:
                scores = evaluate_config(settings, config, seeds, report)
            except SetupError as exc:  # too big for this machine: a bad region, not a crash
                _say(quiet, f"trial {trial.number}: pruned before training: {exc}")
                raise optuna.TrialPruned(str(exc)) from None
        value = iqm(scores)
        trial.set_user_attr("scores", scores)
        each = ", ".join(f"{s:.1f}" for s in scores)
        elapsed = time.perf_counter() - t0
        _say(quiet, f"trial {trial.number}: IQM {value:.2f} (seeds {each}) in {elapsed:.1f} s")
        return value

    return objective


def _say(quiet: bool, line: str) -> None:
    if not quiet:
        print(line, flush=True)


def _sampler(kind: str, seed: int, worker: int) -> Any:
    import optuna

    # Each worker draws its own stream: the same seed everywhere would make
    # every worker (and every machine) sample the same parameters.
    host = int.from_bytes(hashlib.sha256(socket.gethostname().encode()).digest()[:8], "little")
    entropy = [seed, worker, os.getpid(), host]
    sampler_seed = int(np.random.SeedSequence(entropy).generate_state(1)[0])
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=sampler_seed)
    return optuna.samplers.TPESampler(n_startup_trials=10, seed=sampler_seed)


def _pruner(kind: str, steps: int) -> Any:
    import optuna

    if kind == "none":
        return optuna.pruners.NopPruner()
    # Nothing is pruned before a third of the budget, nor before 5 trials finished.
    return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=steps // 3)


# -- the worker --------------------------------------------------------------------


def work(
    study: Any,
    settings: TuneSettings,
    n_trials: int,
    timeout: float | None = None,
    quiet: bool = False,
    poll: float = 1.0,
    heartbeat: bool = False,
) -> int:
    """Run trials of ``study`` until it holds ``n_trials`` complete or pruned trials.

    A worker waits (polling every ``poll`` seconds) while the missing trials
    are running elsewhere, since one of them may die and be enqueued again;
    without a heartbeat (``heartbeat``: the study's storage has one, see
    :func:`has_heartbeat`; journal storage has none) it leaves instead. With
    ``timeout`` (seconds) it starts no trial after that. Returns the number
    of trials this worker finished.
    """
    import optuna
    from optuna.storages import fail_stale_trials
    from optuna.trial import TrialState

    objective = objective_for(settings, n_trials, quiet)
    start = time.monotonic()
    finished = 0
    failures = 0
    while (timeout is None or time.monotonic() - start < timeout) and not _STOP.requested:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            fail_stale_trials(study)
        states = [t.state for t in study.get_trials(deepcopy=False)]
        if sum(s in (TrialState.COMPLETE, TrialState.PRUNED) for s in states) >= n_trials:
            break
        live = sum(s != TrialState.FAIL for s in states)
        if live >= n_trials and TrialState.WAITING not in states:
            if not heartbeat:
                break  # nobody can tell whether the running ones will finish
            time.sleep(poll)
            continue
        try:
            study.optimize(objective, n_trials=1)
        except SurplusTrial:
            continue
        except KeyboardInterrupt:  # Ctrl-C, or the command ended: Optuna failed the trial
            return finished
        except Exception:  # a trial that raised: Optuna marked it failed
            failures += 1
            traceback.print_exc()
            if failures >= MAX_CONSECUTIVE_FAILURES:
                print(
                    f"ember-np tune: {failures} trials in a row raised; this worker stops",
                    file=sys.stderr,
                )
                return finished
            continue
        failures = 0
        finished += 1
    return finished


def has_heartbeat(storage: Any) -> bool:
    """Whether an Optuna storage records trial heartbeats (an RDB storage opened
    with a heartbeat interval), through its public ``get_heartbeat_interval``."""
    interval = getattr(storage, "get_heartbeat_interval", None)
    return callable(interval) and interval() is not None


class _Stop:
    """A worker's stop request (SIGINT, SIGTERM, or its command gone), turned into a
    KeyboardInterrupt only while a trial trains.

    There Optuna catches it and marks the trial failed before the worker
    ends, so no trial is left running; anywhere else (creating, reporting or
    telling a trial, waiting) the request is only noted, and the worker stops
    at its next check. A second signal during that cleanup is ignored.
    """

    def __init__(self) -> None:
        self.requested = False
        self._inside = False

    def handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            return
        self.requested = True
        if self._inside:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """Where a stop request raises KeyboardInterrupt at once (training)."""
        if self.requested:
            raise KeyboardInterrupt
        self._inside = True
        try:
            yield
        finally:
            self._inside = False

    @contextlib.contextmanager
    def shielded(self) -> Iterator[None]:
        """Inside :meth:`interruptible`: a stretch a request must not cut (a storage write)."""
        inside, self._inside = self._inside, False
        try:
            yield
        finally:
            self._inside = inside
        if inside and self.requested:
            raise KeyboardInterrupt


_STOP = _Stop()
STOP_GRACE = 60.0  # seconds a stopped worker has to fail its trial before it is killed


def _watch_parent(fd: int) -> None:
    """End this worker when its command ends, however it ends (SIGKILL included).

    The command holds the write end of the worker's stdin; when it dies the
    read returns EOF, and the worker stops as on SIGTERM (its trial is marked
    failed). If it is still alive ``STOP_GRACE`` seconds later, it exits.
    """

    def watch() -> None:
        while os.read(fd, 65536):  # unbuffered: no lock held at interpreter shutdown
            pass
        _thread.interrupt_main(signal.SIGTERM)
        time.sleep(STOP_GRACE)
        os._exit(1)

    threading.Thread(target=watch, name="ember_np-tune-parent", daemon=True).start()


def worker_main() -> int:
    """Entry point of one worker process (``python -m ember_np.tune``).

    Its spec (storage URL included) is the first line of its stdin, never its
    command line, which any local user can read with ``ps``.
    """
    import optuna

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _STOP.handle)
    spec = json.loads(sys.stdin.buffer.readline())  # the command writes this one line only
    _watch_parent(sys.stdin.fileno())
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = open_storage(spec["storage"], spec["heartbeat"])
    study = open_study(storage, spec["study"], None)
    settings = TuneSettings.from_dict(study.user_attrs[SETTINGS_ATTR])
    study.sampler = _sampler(spec["sampler"], settings.seed, spec["worker"])
    study.pruner = _pruner(spec["pruner"], settings.steps)
    work(study, settings, spec["trials"], spec["timeout"], spec["quiet"],
         heartbeat=has_heartbeat(storage))  # fmt: skip
    return 130 if _STOP.requested else 0


def spawn_workers(spec: dict[str, Any], n: int) -> list[subprocess.Popen]:
    """W worker processes, each with one BLAS thread (set before NumPy loads in it).

    Each gets its spec on its stdin, which stays open: its end tells the
    worker that this command is gone (:func:`_watch_parent`).
    """
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    procs = []
    for i in range(n):
        proc = subprocess.Popen([sys.executable, "-m", "ember_np.tune"], stdin=subprocess.PIPE,
                                env=env)  # fmt: skip
        procs.append(proc)
        assert proc.stdin is not None
        proc.stdin.write((json.dumps({**spec, "worker": i}) + "\n").encode())
        proc.stdin.flush()
    return procs


def stop_workers(procs: list[subprocess.Popen]) -> None:
    """Ask every worker to stop (each fails its running trial), then wait; kill after
    ``STOP_GRACE`` seconds or a second Ctrl-C."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    deadline = time.monotonic() + STOP_GRACE
    try:
        for p in procs:
            p.wait(timeout=max(deadline - time.monotonic(), 0.0))
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def is_tune_dir(path: str | Path) -> bool:
    """Whether ``path`` is a tune directory (it holds ``tune.json``)."""
    return (Path(path) / "tune.json").is_file()
