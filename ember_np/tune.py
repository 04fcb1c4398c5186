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
import contextlib
import dataclasses
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
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ember_np.algorithms import get_algorithm
from ember_np.dqn.config import DqnConfig
from ember_np.training.setup import SetupError
from ember_np.training.spec import RunSpec, build, resolve_preset
from ember_np.tune_results import best_preset, importances, summary
from ember_np.tune_storage import (
    SETTINGS_ATTR,
    TuneError,
    open_storage,
    open_study,
)

__all__ = [
    "DEFAULT_HEARTBEAT",
    "INSTALL_HINT",
    "SurplusTrial",
    "TuneError",
    "TuneSettings",
    "best_preset",
    "config_for",
    "evaluate_config",
    "importances",
    "is_tune_dir",
    "objective_for",
    "open_storage",
    "settings_for",
    "spawn_workers",
    "stop_workers",
    "suggest_config",
    "summary",
    "trial_seeds",
    "work",
]

INSTALL_HINT = 'ember-np tune needs Optuna: pip install "ember-np[tune]"'
DEFAULT_HEARTBEAT = 10  # seconds; a dead worker's trial is failed after 3x this
MAX_CONSECUTIVE_FAILURES = 5  # a worker whose trials keep raising stops


class SurplusTrial(Exception):
    """Raised by :func:`objective_for`'s objective when the study already has its
    trials: the trial ends without sampling or training (:func:`work` moves on)."""


# -- settings ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TuneSettings:
    """What every trial of a study does; stored in the study, checked by joiners.

    Two commands that join one study must agree on all of these, or the
    trials would not be comparable.
    """

    env_id: str
    """The environment as given on the command line (the preset and the report use it)."""
    run: RunSpec
    """What each seed of a trial trains: the env (``ember_np/<env_id>``, compiled, bit for
    bit gymnasium's dynamics, fused training loop, when there is one), the steps per seed,
    the greedy episodes per evaluation, the envs stepped together, and as ``config`` the
    DqnConfig the search starts from (the env's preset, its schedule lengths resolved
    against the steps): fields neither searched nor fixed keep its values."""
    seeds: int
    """K: seeds trained per trial; the objective is the IQM of their final evaluations."""
    evals: int
    """E: greedy evaluations per seed, after every 1/E of the budget (the last is final)."""
    seed: int
    """Study seed: with a trial's parameters it fixes the trial's K training seeds."""
    fixed: dict[str, Any]
    """DqnConfig fields fixed with ``--set`` (not searched)."""

    @property
    def train_env_id(self) -> str:
        """The environment trials train on (``run.env_id``)."""
        return self.run.env_id

    @property
    def steps(self) -> int:
        """Env steps per seed per trial (``run.steps``)."""
        return self.run.steps

    @property
    def base(self) -> dict[str, Any]:
        """The config the search starts from, as a dict (``run.config``)."""
        return self.run.config.to_dict()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (as stored in the study's user attributes)."""
        run = self.run
        return json.loads(json.dumps({
            "env_id": self.env_id, "train_env_id": run.env_id, "steps": run.steps,
            "seeds": self.seeds, "evals": self.evals, "eval_episodes": run.eval_episodes,
            "seed": self.seed, "fixed": self.fixed, "base": self.base,
            "num_envs": run.num_envs, "vectorization": run.vectorization,
        }))  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TuneSettings:
        """Inverse of :meth:`to_dict` (a study of one env before ``num_envs``: one env)."""
        run = RunSpec(data["train_env_id"], config=DqnConfig.from_dict(dict(data["base"])),
                      steps=data["steps"], eval_episodes=data["eval_episodes"],
                      num_envs=data.get("num_envs", 1),
                      vectorization=data.get("vectorization"))  # fmt: skip
        return cls(data["env_id"], run, data["seeds"], data["evals"], data["seed"],
                   data["fixed"])  # fmt: skip


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
    return config_for(settings, values)


def config_for(settings: TuneSettings, values: Mapping[str, Any]) -> DqnConfig:
    """base <- sampled ``values`` <- fixed values, with min_replay_size made consistent.

    ValueError or TypeError when the result is not a valid DqnConfig.
    """
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


def settings_for(
    env_id: str,
    budget: tuple[int | None, int, int, int],
    seed: int,
    sets: list[str],
    say: Callable[[str], None] = print,
    num_envs: int = 1,
    vectorization: str | None = None,
    gymnasium_env: bool = False,
) -> TuneSettings:
    """The settings of a study on ``env_id``, as ``ember-np tune`` builds them.

    Parameters
    ----------
    env_id : str
        As given on the command line; trials train on its compiled twin
        (``NATIVE_IDS``) where there is one, as ``ember-np train`` does.
    budget : tuple (steps or None, seeds, evals, eval_episodes)
        Env steps per seed (None: the env's preset budget, else
        :data:`~ember_np.training.spec.DEFAULT_STEPS`), K seeds per trial, E evaluations per seed,
        greedy episodes per evaluation.
    seed : int
        The study seed.
    sets : list of str
        ``key=value`` DqnConfig fields fixed (not searched).
    say : callable
        Gets the line saying action masks were turned on.
    num_envs, vectorization, gymnasium_env
        ``ember-np train``'s ``--num-envs``, ``--vectorization`` and ``--gymnasium-env``.

    Raises
    ------
    ember_np.training.setup.SetupError
        An unknown env id or ``key``, ``evals`` > ``steps``, or fixed fields
        no config can have.
    """
    steps, n_seeds, evals, eval_episodes = budget
    # as ember-np train: the compiled twin, the preset's schedule lengths over the trial's
    # steps, action masks where the env gives them (the --set fields stay apart: fixed)
    spec, fixed = resolve_preset(env_id, None, sets, steps, (num_envs, vectorization),
                                 gymnasium_env, say)  # fmt: skip
    fixed = {k: list(v) if isinstance(v, tuple) else v for k, v in fixed.items()}  # JSON's
    if evals > spec.steps:
        raise SetupError(f"--evals must be <= --steps (got {evals} > {spec.steps})")
    run = spec.replace(preset=None, eval_episodes=eval_episodes)  # the study records no preset
    settings = TuneSettings(env_id, run, n_seeds, evals, seed, fixed)
    try:  # what is fixed, with the searched fields adjusted to it as every trial adjusts them
        config_for(settings, {})
    except (ValueError, TypeError) as exc:
        raise SetupError(f"--set: {exc}") from None
    return settings


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
    each is evaluated greedily (``settings.run.eval_episodes`` episodes, the mean
    reward), and ``report(step, iqm of the K means)`` is called for every
    evaluation but the last; if it returns True the trial stops
    (``optuna.TrialPruned``). Each stretch of training is the one loop
    (:func:`ember_np.training.loop.train_and_evaluate`, its chunks let other
    threads, Optuna's heartbeat, get the interpreter between compiled calls),
    ending with its evaluation.

    Returns
    -------
    list of float, length K
        The mean reward of each seed's final evaluation.
    """
    import gymnasium as gym

    from ember_np.stats import iqm
    from ember_np.training.loop import train_and_evaluate

    env = gym.make(settings.train_env_id)
    # K buffers fill side by side: refuse before allocating (SetupError) rather
    # than have the trial killed for memory half way through.
    check_setup = get_algorithm(settings.run.algorithm).check_setup
    try:
        if check_setup is not None:
            check_setup(env, config, len(seeds))
    except ValueError as exc:
        raise SetupError(str(exc)) from None
    finally:
        env.close()
    trainers = [build(settings.run.replace(config=config, seed=seed)) for seed in seeds]
    marks = [settings.steps * (i + 1) // settings.evals for i in range(settings.evals)]
    scores: list[float] = []
    for mark in marks:
        # on to the mark from where each agent is (N envs: a stretch ends at the first
        # vector step at or past its mark; the overshoot is not added to later marks)
        scores = [
            float(train_and_evaluate(trainer, max(mark - trainer.agent.total_steps, 0), None,
                                     settings.run.eval_episodes).mean_reward)
            for trainer in trainers
        ]  # fmt: skip
        if report is not None and mark < settings.steps and report(mark, iqm(scores)):
            import optuna

            raise optuna.TrialPruned(f"pruned at step {mark}")
    return scores


def objective_for(settings: TuneSettings, n_trials: int, quiet: bool) -> Callable[[Any], float]:
    """The Optuna objective each worker's ``study.optimize`` runs (see :func:`work`).

    Parameters
    ----------
    settings : TuneSettings
        The search: what :func:`suggest_config` samples, the budget and seeds
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


if __name__ == "__main__":
    try:
        raise SystemExit(_worker_main())
    except KeyboardInterrupt:  # stopped before it started a trial
        raise SystemExit(130) from None
    except TuneError as exc:
        print(f"ember-np tune: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
