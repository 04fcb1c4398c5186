"""DQN's search space for ``ember-np tune``: the RL Zoo's, on DqnConfig's fields.

:func:`suggest_config` samples a config for an Optuna trial,
:func:`config_for` merges the study's base config, sampled values and fixed
fields into a valid one. ``settings`` is a
:class:`~ember_np.tune.TuneSettings` (its ``fixed``, ``steps`` and ``base``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ember_np.dqn.config import DqnConfig

_FIELDS = frozenset(f.name for f in dataclasses.fields(DqnConfig))


def suggest_config(trial: Any, settings: Any) -> DqnConfig:
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


def config_for(settings: Any, values: Mapping[str, Any]) -> DqnConfig:
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
