"""``ember-np tune``: hyperparameter search on Optuna, from one process to many machines.

ember_np does not schedule trials itself: Optuna does (its samplers, pruners,
storages and heartbeat), and this module only supplies what is ours:

* the search space is the algorithm's (:attr:`Algorithm.tune_space
  <ember_np.algorithms.Algorithm.tune_space>`): DQN's
  (:mod:`ember_np.dqn.search_space`, :func:`suggest_config`) is the RL Zoo's
  DQN space, mapped onto :class:`~ember_np.DqnConfig` fields, each searched
  only if the field exists and is not fixed with ``--set``;
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

The package: :mod:`~ember_np.tune.search` (settings and objective),
:mod:`~ember_np.tune.workers` (the worker processes),
:mod:`~ember_np.tune.storage` (Optuna storages and studies) and
:mod:`~ember_np.tune.results` (a study's summary and best preset).
"""

from __future__ import annotations

from ember_np.dqn.search_space import config_for, suggest_config
from ember_np.tune.results import best_preset, importances, summary
from ember_np.tune.search import TuneSettings, evaluate_config, settings_for, trial_seeds
from ember_np.tune.storage import TuneError, open_storage
from ember_np.tune.workers import (
    DEFAULT_HEARTBEAT,
    INSTALL_HINT,
    SurplusTrial,
    is_tune_dir,
    objective_for,
    spawn_workers,
    stop_workers,
    work,
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
