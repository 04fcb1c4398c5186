"""``ember-np tune``: hyperparameter search on Optuna, from one process to many machines.

ember_np does not schedule trials itself: Optuna does (its samplers, pruners,
storages and heartbeat), and this module only supplies what is ours:

* the search space (:func:`suggest_config`): the RL Zoo's DQN space, mapped
  onto :class:`~ember_np.DqnConfig` fields, each searched only if the field
  exists (the Rainbow switches ``n_step``, ``prioritized_replay`` and
  ``dueling`` join by themselves once DqnConfig has them) and not fixed
  with ``--set``;
* the objective (:func:`evaluate_config`): K seeds trained side by side, a
  greedy evaluation of each after every 1/E of the budget, the IQM of the K
  evaluations reported to Optuna (so the pruner can stop a bad trial) and the
  IQM of the final ones returned; the K seeds come from the study seed and the
  trial's parameters, so the same parameters always give the same value;
* the workers (:func:`work`): W processes on this machine, each with one BLAS
  thread, each running trials against the shared storage until the study
  holds ``--trials`` finished (complete or pruned) trials; every machine that
  runs the same command with the same ``--storage`` and ``--study`` joins;
* the results (:func:`summary`, :func:`best_preset`): the best trials, the
  hyperparameter importances (PED-ANOVA, which needs only NumPy) and the best
  trial as a preset file for ``ember-np train --preset FILE.json``.

Why not ``MaxTrialsCallback``: it stops a worker only after the worker's
trial ends, so W workers can finish up to W - 1 trials too many. Here a trial
that starts when ``--trials`` trials numbered before it are already
complete, pruned, running or waiting is "surplus": it ends at once as failed
(user attribute ``surplus``), before it samples anything. Optuna numbers
trials in the order it creates them (under a lock on the study row in an
RDB), so the study never finishes more than ``--trials`` trials. A worker
killed mid-trial stops its heartbeat; the next worker that looks fails that
trial and :class:`~optuna.storages.RetryHeartbeatStaleTrialCallback` enqueues
a copy with the same parameters, which the next free worker runs: the count
is reached, and nothing is counted twice.

Optuna is an optional dependency (``pip install "ember-np[tune]"``); nothing
here imports it at module level.
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ember_np.cli import (
    NATIVE_IDS,
    UsageError,
    _int_at_least,
    _make_env,
    _parse_sets,
    _with_env_masks,
)
from ember_np.dqn.config import DqnConfig
from ember_np.training.multiseed import check_workers, default_workers

__all__ = [
    "INSTALL_HINT",
    "TuneSettings",
    "add_tune_parser",
    "best_preset",
    "evaluate_config",
    "is_tune_dir",
    "open_storage",
    "show",
    "suggest_config",
    "summary",
    "trial_seeds",
    "work",
]

INSTALL_HINT = 'ember-np tune needs Optuna: pip install "ember-np[tune]"'
SETTINGS_ATTR = "ember_np.tune"  # study user attribute holding the TuneSettings
TRAIN_CHUNK = 1_000  # env steps per compiled call: the heartbeat thread needs the GIL between
DEFAULT_STEPS = 100_000  # trial budget for an env without a preset
DEFAULT_HEARTBEAT = 10  # seconds; a dead worker's trial is failed after 3x this
MAX_RETRY = 3  # a trial whose worker died is run again at most this often
MAX_CONSECUTIVE_FAILURES = 5  # a worker whose trials keep raising stops

_positive = _int_at_least(1)
_non_negative = _int_at_least(0)


class _Surplus(Exception):
    """The study already has its trials: this one ends without running."""


# -- settings ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TuneSettings:
    """What every trial of a study does; stored in the study, checked by joiners.

    Two commands that join one study must agree on all of these, or the
    trials would not be comparable.
    """

    env_id: str
    """The environment as given on the command line (the preset and the report use it)."""
    train_env_id: str
    """The environment trials train on: ``ember_np/<env_id>`` (compiled, bit for bit
    gymnasium's dynamics, fused training loop) when there is one, else ``env_id``."""
    steps: int
    """Env steps per seed per trial."""
    seeds: int
    """K: seeds trained per trial; the objective is the IQM of their final evaluations."""
    evals: int
    """E: greedy evaluations per seed, after every 1/E of the budget (the last is final)."""
    eval_episodes: int
    """Greedy episodes per evaluation."""
    seed: int
    """Study seed: with a trial's parameters it fixes the trial's K training seeds."""
    fixed: dict[str, Any]
    """DqnConfig fields fixed with ``--set`` (not searched)."""
    base: dict[str, Any]
    """The DqnConfig the search starts from (the env's preset): fields neither
    searched nor fixed keep these values."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (as stored in the study's user attributes)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TuneSettings:
        """Inverse of :meth:`to_dict`."""
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})


# -- search space ------------------------------------------------------------------

_FIELDS = frozenset(f.name for f in dataclasses.fields(DqnConfig))


def suggest_config(trial: Any, settings: TuneSettings) -> DqnConfig:
    """Sample a DqnConfig for ``trial`` (an ``optuna.Trial``): the RL Zoo's DQN space.

    Parameters (Optuna name: values -> DqnConfig field)::

        learning_rate: log-uniform [1e-5, 1e-2]
        batch_size: 32, 64, 128, 256
        buffer_capacity: 1e4, 5e4, 1e5, 1e6
        learning_starts_fraction: 0, 0.02, 0.05, 0.1, 0.2 of the budget -> min_replay_size
        train_freq: 1, 4, 8, 16, 64, 256
        subsample_steps: 1, 2, 4, 8 -> gradient_steps = max(train_freq // subsample, 1)
        target_update_freq: 1, 10, 100, 250, 1000, 5000
        exploration_fraction: uniform [0, 0.5] of the budget -> epsilon_decay_steps
        epsilon_end: uniform [0, 0.2]
        width: 64, 128, 256; depth: 1-3 -> hidden_sizes = (width,) * depth
        gamma: 0.9, 0.95, 0.98, 0.99, 0.995, 0.999
        double_dqn: False, True
        n_step: 1, 3, 5; prioritized_replay, dueling: False, True (once DqnConfig has them)

    A field fixed in ``settings.fixed`` is not searched; one DqnConfig does not
    have is skipped. ``min_replay_size`` is kept within [batch_size,
    buffer_capacity] so every sample is a valid config.
    """
    fixed = settings.fixed
    steps = settings.steps
    values: dict[str, Any] = {}

    def searched(*fields: str) -> bool:
        return all(f in _FIELDS and f not in fixed for f in fields)

    if searched("learning_rate"):
        values["learning_rate"] = trial.suggest_float("learning_rate", 1e-5, 1e-2, log=True)
    if searched("batch_size"):
        values["batch_size"] = trial.suggest_categorical("batch_size", [32, 64, 128, 256])
    if searched("buffer_capacity"):
        values["buffer_capacity"] = trial.suggest_categorical(
            "buffer_capacity", [10_000, 50_000, 100_000, 1_000_000]
        )
    if searched("min_replay_size"):
        fraction = trial.suggest_categorical(
            "learning_starts_fraction", [0.0, 0.02, 0.05, 0.1, 0.2]
        )
        values["min_replay_size"] = int(fraction * steps)
    if searched("train_freq"):
        values["train_freq"] = trial.suggest_categorical("train_freq", [1, 4, 8, 16, 64, 256])
    if searched("gradient_steps"):
        subsample = trial.suggest_categorical("subsample_steps", [1, 2, 4, 8])
        train_freq = values.get("train_freq", fixed.get("train_freq", settings.base["train_freq"]))
        values["gradient_steps"] = max(int(train_freq) // subsample, 1)
    if searched("target_update_freq"):
        values["target_update_freq"] = trial.suggest_categorical(
            "target_update_freq", [1, 10, 100, 250, 1_000, 5_000]
        )
    if searched("epsilon_decay_steps"):
        fraction = trial.suggest_float("exploration_fraction", 0.0, 0.5)
        values["epsilon_decay_steps"] = int(fraction * steps)
    if searched("epsilon_end"):
        values["epsilon_end"] = trial.suggest_float("epsilon_end", 0.0, 0.2)
    if searched("hidden_sizes"):
        width = trial.suggest_categorical("width", [64, 128, 256])
        depth = trial.suggest_int("depth", 1, 3)
        values["hidden_sizes"] = (width,) * depth
    if searched("gamma"):
        values["gamma"] = trial.suggest_categorical("gamma", [0.9, 0.95, 0.98, 0.99, 0.995, 0.999])
    if searched("double_dqn"):
        values["double_dqn"] = trial.suggest_categorical("double_dqn", [False, True])
    # The Rainbow switches: searched as soon as DqnConfig has the field.
    if searched("n_step"):
        values["n_step"] = trial.suggest_categorical("n_step", [1, 3, 5])
    for switch in ("prioritized_replay", "dueling"):
        if searched(switch):
            values[switch] = trial.suggest_categorical(switch, [False, True])
    return _config(settings, values)


def _config(settings: TuneSettings, values: Mapping[str, Any]) -> DqnConfig:
    """base <- sampled values <- fixed values, with min_replay_size made consistent."""
    fixed = settings.fixed
    merged = {**settings.base, **values, **fixed}
    # batch_size <= min_replay_size <= buffer_capacity, moving only fields not fixed
    batch, start, capacity = (int(merged[k]) for k in ("batch_size", "min_replay_size",
                                                       "buffer_capacity"))  # fmt: skip
    if "min_replay_size" not in fixed:
        start = max(start, batch)
    if "buffer_capacity" not in fixed:
        capacity = max(capacity, start)
    if "min_replay_size" not in fixed:
        start = min(start, capacity)
    if "batch_size" not in fixed:
        batch = min(batch, start)  # a small fixed buffer caps the searched batch size
    merged.update(batch_size=batch, min_replay_size=start, buffer_capacity=capacity)
    return DqnConfig.from_dict(merged)


def trial_seeds(study_seed: int, params: Mapping[str, Any], k: int) -> list[int]:
    """The K training seeds of a trial: a function of the study seed and the parameters only.

    So a trial run again (a retry after its worker died, or the same
    parameters enqueued twice) trains the same K runs, and gets the same value.
    """
    digest = hashlib.sha256(json.dumps(dict(params), sort_keys=True).encode()).digest()
    entropy = [int(study_seed), int.from_bytes(digest[:8], "little")]
    return [int(s) for s in np.random.SeedSequence(entropy).generate_state(k, dtype=np.uint32)]


# -- the objective -----------------------------------------------------------------


def evaluate_config(
    settings: TuneSettings,
    config: DqnConfig,
    seeds: list[int],
    report: Callable[[int, float], bool] | None = None,
) -> list[float]:
    """Train one agent per seed and return each one's final greedy evaluation.

    The K agents train side by side: after every 1/E of ``settings.steps``
    each is evaluated greedily (``settings.eval_episodes`` episodes, the mean
    reward), and ``report(step, iqm of the K means)`` is called for every
    evaluation but the last; if it returns True the trial stops
    (``optuna.TrialPruned``). Training runs in chunks of ``TRAIN_CHUNK`` env
    steps so other threads (Optuna's heartbeat) get the interpreter between
    compiled calls. Results do not depend on the chunking.

    Returns
    -------
    list of float, length K
        The mean reward of each seed's final evaluation.
    """
    import gymnasium as gym

    from ember_np.dqn.agent import DqnAgent
    from ember_np.stats import iqm
    from ember_np.training.trainer import DqnTrainer

    trainers = []
    for seed in seeds:
        env = gym.make(settings.train_env_id)
        trainers.append(DqnTrainer(env, DqnAgent.for_env(env, config, seed=seed), seed=seed))
    marks = [settings.steps * (i + 1) // settings.evals for i in range(settings.evals)]
    done = 0
    scores: list[float] = []
    for mark in marks:
        scores = []
        for trainer in trainers:
            remaining = mark - done
            while remaining > 0:
                chunk = min(TRAIN_CHUNK, remaining)
                trainer.train(chunk)
                remaining -= chunk
            scores.append(float(trainer.eval(settings.eval_episodes).mean_reward))
        done = mark
        if report is not None and mark < settings.steps and report(mark, iqm(scores)):
            import optuna

            raise optuna.TrialPruned(f"pruned at step {mark}")
    return scores


def _objective(settings: TuneSettings, n_trials: int, quiet: bool) -> Callable[[Any], float]:
    import optuna
    from optuna.trial import TrialState

    from ember_np.stats import iqm

    worker = f"{socket.gethostname()}:{os.getpid()}"

    def objective(trial: optuna.Trial) -> float:
        ahead = sum(
            1
            for t in trial.study.get_trials(deepcopy=False)
            if t.number < trial.number and t.state != TrialState.FAIL
        )
        if ahead >= n_trials:
            trial.set_user_attr("surplus", True)
            raise _Surplus
        trial.set_user_attr("worker", worker)
        t0 = time.perf_counter()
        config = suggest_config(trial, settings)
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
            scores = evaluate_config(settings, config, seeds, report)
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


# -- storage and study -------------------------------------------------------------


def open_storage(storage: str, heartbeat: int | None = None) -> Any:
    """An Optuna storage for ``storage``: an SQLAlchemy URL, or a journal file path (``.log``).

    With ``heartbeat`` (seconds), an RDB storage records a heartbeat per
    running trial; a trial whose heartbeat is older than 3x that is failed and
    enqueued again with the same parameters (at most ``MAX_RETRY`` times).
    Journal files have no heartbeat in Optuna: a dead worker's trial stays
    "running" there.
    """
    import optuna
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    _check_storage(storage)
    if "://" not in storage:
        path = Path(storage)
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))
    kwargs: dict[str, Any] = {}
    if storage.startswith("sqlite"):
        # Workers wait for each other's writes instead of failing after SQLite's 5 s.
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 120}}
    else:  # a server: a silent one fails after the timeouts instead of hanging
        kwargs["engine_kwargs"] = {"connect_args": _server_timeouts(storage)}
    if heartbeat is not None:
        kwargs.update(
            heartbeat_interval=heartbeat,
            grace_period=3 * heartbeat,
        )
    with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna since 2.8
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if heartbeat is not None:
            kwargs["heartbeat_stale_trial_callback"] = RetryHeartbeatStaleTrialCallback(
                max_retry=MAX_RETRY
            )
    from sqlalchemy.exc import OperationalError

    try:
        # Commands started at once on several machines all create the tables;
        # the losers of that race get an error from the database: try again.
        # (Not after an OperationalError: the server is unreachable, silent or refuses us.)
        for attempt in range(3):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    return RDBStorage(storage, **kwargs)
            except (ImportError, ValueError, OperationalError):
                raise
            except Exception:
                if attempt == 2:
                    raise
                time.sleep(1.0 + attempt)
        raise AssertionError("unreachable")
    except ImportError:
        raise UsageError(f"cannot open {_masked(storage)}: {_driver_hint(storage)}") from None
    except Exception as exc:  # SQLAlchemy's errors for bad URLs and unreachable servers
        raise UsageError(f"cannot open {_masked(storage)}: {_error_line(exc)}") from None


#: Seconds to open a connection to a database server (PostgreSQL, MySQL).
CONNECT_TIMEOUT = 10
#: Seconds one statement may run on a database server (as long as SQLite waits for a lock).
STATEMENT_TIMEOUT = 120

#: The pip package of each SQLAlchemy driver (the module SQLAlchemy imports for it).
_DRIVER_PACKAGES = {
    "psycopg2": "psycopg2-binary", "psycopg": "'psycopg[binary]'", "pg8000": "pg8000",
    "asyncpg": "asyncpg", "pymysql": "PyMySQL", "mysqldb": "mysqlclient",
    "mysqlconnector": "mysql-connector-python", "mariadbconnector": "mariadb",
    "cx_oracle": "cx_Oracle", "oracledb": "oracledb", "pyodbc": "pyodbc",
}  # fmt: skip


def _server_timeouts(storage: str) -> dict[str, Any]:
    """The DBAPI connect arguments that bound a connection's and a statement's wait.

    Options already in the URL's query (``?connect_timeout=30``) are kept.
    """
    from sqlalchemy.engine import make_url

    url = make_url(storage)
    backend, driver = url.get_backend_name(), url.get_driver_name()
    args: dict[str, Any] = {}
    if backend == "postgresql" and driver in ("psycopg2", "psycopg"):
        args = {"connect_timeout": CONNECT_TIMEOUT,
                "options": f"-c statement_timeout={STATEMENT_TIMEOUT * 1000}"}  # fmt: skip
    elif backend == "postgresql" and driver == "pg8000":
        args = {"timeout": STATEMENT_TIMEOUT}
    elif backend in ("mysql", "mariadb") and driver in ("pymysql", "mysqldb"):
        args = {"connect_timeout": CONNECT_TIMEOUT, "read_timeout": STATEMENT_TIMEOUT,
                "write_timeout": STATEMENT_TIMEOUT}  # fmt: skip
    return {k: v for k, v in args.items() if k not in url.query}


def _driver_hint(storage: str) -> str:
    """What to install for a storage URL whose database driver is missing."""
    from sqlalchemy.engine import make_url

    url = make_url(storage)
    driver = url.get_driver_name()
    package = _DRIVER_PACKAGES.get(driver.lower(), driver)
    backend = url.get_backend_name()
    return (f"its driver {driver!r} is not installed: pip install {package} "
            f"(or name another driver in the URL, {backend}+DRIVER://...)")  # fmt: skip


def _error_line(exc: BaseException) -> str:
    """A database error on one line: the driver's own message, without SQLAlchemy's links."""
    inner = getattr(exc, "orig", None) or exc
    return " ".join(str(inner).split()) or type(inner).__name__


def _check_storage(storage: str) -> None:
    """Refuse a storage the workers cannot share, with what to give instead."""
    if "://" not in storage and not storage.endswith(".log"):
        raise UsageError(
            f"--storage must be an SQLAlchemy URL (sqlite:///FILE.db, "
            f"postgresql+psycopg2://USER@HOST/DB, mysql+pymysql://...) or an Optuna journal "
            f"file ending in .log, got {storage!r}"
        )
    if "://" not in storage:
        return
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(storage)
    except ArgumentError:
        raise UsageError(
            f"--storage {_masked(storage)} is not an SQLAlchemy URL: use sqlite:///FILE.db, "
            "postgresql+psycopg2://USER@HOST/DB or mysql+pymysql://USER@HOST/DB"
        ) from None
    memory = url.database in (None, "", ":memory:") or url.query.get("mode") == "memory"
    if url.get_backend_name() == "sqlite" and memory:
        raise UsageError(
            f"--storage {storage} is an in-memory SQLite database, which each worker process "
            "would have its own of: give a file, e.g. sqlite:///tunes/study.db"
        )


def _absolute(storage: str) -> str:
    """``storage`` with a relative SQLite or journal file made absolute (against the cwd).

    A tune directory records this form, so it names the same study from any directory.
    """
    if "://" not in storage:
        return str(Path(storage).resolve())
    if not storage.startswith("sqlite"):
        return storage
    from sqlalchemy.engine import make_url

    url = make_url(storage)
    path = Path(url.database)
    if path.is_absolute():
        return storage
    return url.set(database=str(path.resolve())).render_as_string(hide_password=False)


def _local_file(storage: str) -> Path | None:
    """The file an SQLite URL or a journal path names; None for a database server."""
    if "://" not in storage:
        return Path(storage)
    if not storage.startswith("sqlite"):
        return None
    from sqlalchemy.engine import make_url

    return Path(make_url(storage).database)


def _masked(storage: str) -> str:
    """The storage URL with any password replaced by ***."""
    if "://" not in storage or "@" not in storage:
        return storage
    scheme, rest = storage.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}{':***' if ':' in credentials else ''}@{host}"


def _open_study(storage: Any, name: str, settings: TuneSettings | None) -> Any:
    """Create or join study ``name``; with ``settings``, check they match the study's."""
    import optuna

    if settings is None:
        try:
            study = optuna.load_study(study_name=name, storage=storage)
        except KeyError:
            raise UsageError(f"no study {name!r} in that storage (check --study)") from None
    else:
        study = optuna.create_study(
            study_name=name, storage=storage, direction="maximize", load_if_exists=True
        )
        stored = study.user_attrs.get(SETTINGS_ATTR)
        mine = settings.to_dict()
        if stored is None:
            study.set_user_attr(SETTINGS_ATTR, mine)
        elif stored != mine:
            diff = sorted(k for k in mine if stored.get(k) != mine[k])
            details = "; ".join(f"{k}: study {stored.get(k)!r}, here {mine[k]!r}" for k in diff)
            raise UsageError(
                f"study {name!r} was created with other settings ({details}): run the same "
                "command as its other workers, or choose another --study"
            )
    if SETTINGS_ATTR not in study.user_attrs:
        raise UsageError(f"study {name!r} was not made by ember-np tune")
    return study


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

    objective = _objective(settings, n_trials, quiet)
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
        except _Surplus:
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


def _worker_main() -> int:
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
    study = _open_study(storage, spec["study"], None)
    settings = TuneSettings.from_dict(study.user_attrs[SETTINGS_ATTR])
    study.sampler = _sampler(spec["sampler"], settings.seed, spec["worker"])
    study.pruner = _pruner(spec["pruner"], settings.steps)
    work(study, settings, spec["trials"], spec["timeout"], spec["quiet"],
         heartbeat=has_heartbeat(storage))  # fmt: skip
    return 130 if _STOP.requested else 0


def _spawn_workers(spec: dict[str, Any], n: int) -> list[subprocess.Popen]:
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


def _stop_workers(procs: list[subprocess.Popen]) -> None:
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


# -- results -----------------------------------------------------------------------


def _finished(study: Any) -> list[Any]:
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return sorted(trials, key=lambda t: (-t.value, t.number))


def importances(study: Any) -> dict[str, float] | None:
    """Each searched parameter's importance (PED-ANOVA), or None with < 2 complete trials.

    PED-ANOVA (``optuna.importance.PedAnovaImportanceEvaluator``) needs only
    NumPy; Optuna's default, fANOVA, needs scikit-learn.
    """
    import optuna

    if len(_finished(study)) < 2:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "too few trials" notes: the caller says how many
        evaluator = optuna.importance.PedAnovaImportanceEvaluator()
        return optuna.importance.get_param_importances(study, evaluator=evaluator)


def summary(study: Any, top: int = 5) -> str:
    """The study's state, its best ``top`` trials and the hyperparameter importances."""
    from optuna.trial import TrialState

    settings = TuneSettings.from_dict(study.user_attrs[SETTINGS_ATTR])
    trials = study.get_trials(deepcopy=False)
    counts = {s: sum(t.state == s for t in trials) for s in TrialState}
    surplus = sum(bool(t.user_attrs.get("surplus")) for t in trials)
    lines = [
        f"study {study.study_name}: {counts[TrialState.COMPLETE]} complete, "
        f"{counts[TrialState.PRUNED]} pruned, {counts[TrialState.FAIL] - surplus} failed, "
        f"{counts[TrialState.RUNNING]} running, {counts[TrialState.WAITING]} waiting"
        + (f" ({surplus} surplus trials not run)" if surplus else ""),
        f"objective: IQM of {settings.seeds} seeds' final greedy evaluations "
        f"({settings.eval_episodes} episodes each) after {settings.steps:,} steps on "
        f"{settings.train_env_id}",
    ]
    best = _finished(study)[:top]
    if not best:
        lines.append("no complete trial yet")
        return "\n".join(lines)
    lines.append(f"best {len(best)} trials:")
    for t in best:
        scores = ", ".join(f"{s:.1f}" for s in t.user_attrs.get("scores", []))
        params = " ".join(f"{k}={_fmt(v)}" for k, v in sorted(t.params.items()))
        lines.append(f"  trial {t.number:>4}  IQM {t.value:9.2f}  seeds [{scores}]")
        lines += textwrap.wrap(params, 96, initial_indent=" " * 14, subsequent_indent=" " * 14)
    found = importances(study)
    if found is None:
        lines.append("importances: need at least 2 complete trials")
    else:
        n = counts[TrialState.COMPLETE]
        lines.append(f"hyperparameter importance (PED-ANOVA over {n} complete trials):")
        for name, value in found.items():
            lines.append(f"  {name:<26} {value:6.3f}  {'#' * round(40 * value)}")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def best_preset(study: Any) -> dict[str, Any] | None:
    """The best complete trial as a preset (``ember-np train ENV --preset FILE.json``)."""
    best = _finished(study)
    if not best:
        return None
    t = best[0]
    settings = TuneSettings.from_dict(study.user_attrs[SETTINGS_ATTR])
    return {
        "format": "ember_np.preset",
        "env_id": settings.env_id,
        "steps": settings.steps,
        "source": (
            f"ember-np tune: study {study.study_name}, trial {t.number}, "
            f"IQM {t.value:.2f} over {settings.seeds} seeds"
        ),
        "dqn": t.user_attrs["config"],
    }


# -- command line ------------------------------------------------------------------


def add_tune_parser(sub: Any) -> None:
    """Register ``ember-np tune`` on the CLI's subparsers."""
    p = sub.add_parser("tune", help="hyperparameter search on Optuna (needs the tune extra)")
    p.add_argument("env_id", help="gymnasium id, e.g. CartPole-v1")
    p.add_argument(
        "--trials", type=_positive, default=50, help="complete + pruned trials (default 50)"
    )
    p.add_argument("--seeds", type=_positive, default=3, help="K seeds per trial (default 3)")
    p.add_argument("--steps", type=_positive, help="env steps per seed (default: preset budget)")
    p.add_argument(
        "--workers", type=_positive, help="processes on this machine (default: one per core)"
    )
    p.add_argument("--storage", help="SQLAlchemy URL or journal file .log (default: SQLite)")
    p.add_argument("--study", help="study name (default: the env id)")
    p.add_argument("--dir", help="tune directory (default: tunes/<study>)")
    p.add_argument("--sampler", choices=("tpe", "random"), default="tpe")
    p.add_argument("--pruner", choices=("median", "none"), default="median")
    p.add_argument("--timeout", type=_positive, help="seconds after which no trial starts")
    p.add_argument("--seed", type=_non_negative, default=0, help="study seed (default 0)")
    p.add_argument("--evals", type=_positive, default=5, help="evaluations per seed (default 5)")
    p.add_argument("--eval-episodes", type=_positive, default=10)
    p.add_argument(
        "--heartbeat", type=_positive, default=DEFAULT_HEARTBEAT,
        help="seconds between heartbeats; a silent trial is failed and retried after 3x",
    )  # fmt: skip
    p.add_argument("--set", nargs="+", metavar="KEY=VALUE", help="fix DqnConfig fields")
    p.add_argument("--show", action="store_true", help="only print the study's results")
    p.add_argument("--quiet", action="store_true", help="no line per trial")
    p.set_defaults(func=cmd_tune)


def _settings(args: argparse.Namespace) -> TuneSettings:
    from ember_np.presets import default_preset

    env_id = args.env_id
    env = _make_env(env_id)
    env.close()
    train_env_id = NATIVE_IDS.get(env_id, env_id)  # the compiled twin, as ember-np train
    preset = default_preset(env_id.removeprefix("ember_np/"))
    base = preset.config if preset is not None else DqnConfig()
    fixed = _parse_sets(args.set or [])
    base = _with_env_masks(base, train_env_id, fixed)  # as ember-np train: masks where given
    if "hidden_sizes" in fixed and isinstance(fixed["hidden_sizes"], tuple):
        fixed["hidden_sizes"] = list(fixed["hidden_sizes"])
    steps = args.steps or (preset.steps if preset is not None else DEFAULT_STEPS)
    if args.evals > steps:
        raise UsageError(f"--evals must be <= --steps (got {args.evals} > {steps})")
    settings = TuneSettings(
        env_id, train_env_id, steps, args.seeds, args.evals, args.eval_episodes, args.seed,
        fixed, base.to_dict(),
    )  # fmt: skip
    try:  # what is fixed, with the searched fields adjusted to it as every trial adjusts them
        _config(settings, {})
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--set: {exc}") from None
    return settings


def cmd_tune(args: argparse.Namespace) -> int:
    """``ember-np tune``: start or join a study, run W workers, print the results."""
    try:
        import optuna
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    name = args.study or args.env_id
    tune_dir = Path(args.dir) if args.dir else Path("tunes") / str(name).replace("/", "_")
    if args.show:  # the study named in the tune directory, unless named here.
        return show(tune_dir, args.storage, args.study or (None if is_tune_dir(tune_dir) else name))
    settings = _settings(args)  # bad arguments fail before anything is created
    try:
        workers = check_workers(args.workers) if args.workers else default_workers()
    except ValueError as exc:
        raise UsageError(f"--{exc}") from None
    if args.storage:
        _check_storage(args.storage)
    try:
        tune_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the tune directory {tune_dir}: {exc}") from None
    # Absolute: tune.json then names this study from any directory.
    storage_url = _absolute(args.storage or f"sqlite:///{tune_dir / 'study.db'}")
    study = _open_study(open_storage(storage_url, args.heartbeat), name, settings)
    _write_json(
        tune_dir / "tune.json",
        {"study": name, "storage": _masked(storage_url), "settings": settings.to_dict()},
    )
    print(
        f"study {name!r} in {_masked(storage_url)}: {args.trials} trials, {settings.seeds} "
        f"seeds x {settings.steps:,} steps on {settings.train_env_id}, {workers} workers"
    )
    spec = {
        "storage": storage_url, "study": name, "trials": args.trials,
        "timeout": args.timeout, "heartbeat": args.heartbeat, "sampler": args.sampler,
        "pruner": args.pruner, "quiet": args.quiet,
    }  # fmt: skip
    procs = _spawn_workers(spec, workers)
    try:
        codes = [p.wait() for p in procs]
    except KeyboardInterrupt:  # each worker fails its running trial before it ends
        _stop_workers(procs)
        print(f"ember-np tune: interrupted; the running trials were marked failed: run the "
              "same command again to finish the study", file=sys.stderr)  # fmt: skip
        raise
    bad = [f"worker {i}: status {c}" for i, c in enumerate(codes) if c != 0]
    if bad:
        print(f"ember-np tune: {'; '.join(bad)}", file=sys.stderr)
    _say_if_stuck(study, args.trials)
    _results(study, tune_dir)
    return 1 if bad else 0


def _say_if_stuck(study: Any, n_trials: int) -> None:
    """Say why a study ended short of its trials: running trials no heartbeat can fail."""
    from optuna.trial import TrialState

    states = [t.state for t in study.get_trials(deepcopy=False)]
    done = sum(s in (TrialState.COMPLETE, TrialState.PRUNED) for s in states)
    running = states.count(TrialState.RUNNING)
    if done < n_trials and running:
        print(
            f"ember-np tune: {done} of {n_trials} trials finished; {running} are marked running "
            "by workers this command cannot check (a journal file has no heartbeat, so a "
            "killed worker's trial stays running): they count towards --trials until they end",
            file=sys.stderr,
        )


def _results(study: Any, tune_dir: Path) -> None:
    """Print the summary and write the best trial's preset into the tune directory."""
    print(summary(study))
    preset = best_preset(study)
    if preset is not None:
        path = tune_dir / "best_preset.json"
        try:
            tune_dir.mkdir(parents=True, exist_ok=True)
            _write_json(path, preset)
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc}") from None
        print(f"best trial as a preset: {path} (ember-np train {preset['env_id']} --preset {path})")


def is_tune_dir(path: str | Path) -> bool:
    """Whether ``path`` is a tune directory (it holds ``tune.json``)."""
    return (Path(path) / "tune.json").is_file()


def show(tune_dir: str | Path, storage: str | None = None, study_name: str | None = None) -> int:
    """Print a tune directory's results (``--show``; ``ember-np report TUNE_DIR``).

    The study and its storage come from ``tune.json`` unless given; a storage
    URL stored with its password masked must be given again.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tune_dir = Path(tune_dir)
    info_path = tune_dir / "tune.json"
    info: dict[str, Any] = {}
    if storage is None or study_name is None:
        if not info_path.is_file():
            raise UsageError(
                f"no tune directory at {tune_dir} (no tune.json): check --dir or --study"
            )
        try:
            info = json.loads(info_path.read_text())
            info["storage"], info["study"]  # noqa: B018  both must be there
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"cannot read {info_path}: {exc!r}") from None
    if storage is None:
        storage = _recorded_storage(str(info["storage"]), tune_dir, info_path)
    if "***" in storage:
        env_id = (info.get("settings") or {}).get("env_id", "ENV_ID")
        raise UsageError(
            f"{info_path} names {storage} (the password is not recorded): run "
            f"ember-np tune {env_id} --dir {tune_dir} --show --storage FULL_URL"
        )
    _check_storage(storage)
    local = _local_file(storage)
    if local is not None and not local.is_file():  # opening it would create an empty one
        raise UsageError(
            f"no study database at {local}"
            + (f" (named in {info_path})" if info else "")
            + ": check the path, or run ember-np tune first"
        )
    study = _open_study(open_storage(storage), study_name or info["study"], None)
    _results(study, tune_dir)
    return 0


def _recorded_storage(stored: str, tune_dir: Path, info_path: Path) -> str:
    """The storage a tune.json names, independent of the current directory.

    Since this version tune.json holds absolute paths. Older versions wrote
    their default ``sqlite:///<--dir as given>/study.db`` relative to the
    directory tune ran in: that one is found in the tune directory itself when
    the tune directory's path ends with the recorded one; any other relative
    path is refused (it would name whatever file the current directory has).
    """
    local = _local_file(stored)
    if local is None or local.is_absolute():
        return stored
    here = tune_dir.resolve()
    recorded = local.parent.parts
    if (stored.startswith("sqlite") and local.name == "study.db" and recorded
            and here.parts[-len(recorded):] == recorded):  # fmt: skip
        return f"sqlite:///{here / local.name}"
    raise UsageError(
        f"{info_path} names {stored}, relative to the directory tune ran in, which is not "
        f"known: write the file's absolute path into {info_path}"
    )


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    from ember_np.checkpoint import atomic_write_text

    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    try:
        raise SystemExit(_worker_main())
    except KeyboardInterrupt:  # stopped before it started a trial
        raise SystemExit(130) from None
    except UsageError as exc:
        print(f"ember-np tune: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
