"""PPO's search space for ``ember-np tune --algo ppo``: the RL Zoo's, on PPOConfig's fields.

As rl-baselines3-zoo's ``sample_ppo_params`` (``rl_zoo3/hyperparams_opt.py``):
:func:`suggest_config` samples a config for an Optuna trial, :func:`config_for`
merges the study's base config (the preset's, its ``schedule_steps`` the study's
budget), the sampled values and the fixed fields. ``settings`` is a
:class:`~ember_np.tune.TuneSettings` (its ``fixed`` and ``base``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ember_np.ppo.config import PPOConfig

__all__ = ["NET_ARCHS", "config_for", "suggest_config"]

_FIELDS = frozenset(f.name for f in dataclasses.fields(PPOConfig))
#: The Zoo's ``net_arch`` choices -> hidden_sizes (of the actor and of the critic).
NET_ARCHS = {"tiny": (64,), "small": (64, 64), "medium": (256, 256)}


def suggest_config(trial: Any, settings: Any) -> PPOConfig:
    """Sample a PPOConfig for ``trial`` (an ``optuna.Trial``): the RL Zoo's PPO space.

    Parameters (Optuna name: values -> PPOConfig field)::

        batch_size: 32, 64, 128, 256, 512
        n_steps: 32, 64, 128, 256, 512, 1024, 2048
        one_minus_gamma: log-uniform [1e-4, 0.03] -> gamma
        one_minus_gae_lambda: log-uniform [1e-4, 0.1] -> gae_lambda
        learning_rate: log-uniform [1e-5, 2e-3]
        ent_coef: log-uniform [1e-8, 0.1]
        clip_range: 0.1, 0.2, 0.3, 0.4
        n_epochs: 1, 5, 10, 20
        max_grad_norm: uniform [0.3, 2]
        net_arch: tiny (64), small (64, 64), medium (256, 256) -> hidden_sizes
        activation_fn: tanh, relu -> activation

    A field fixed in ``settings.fixed`` is not searched; the rest (the schedules,
    normalisation, vf_coef) keep the base config's values.
    """
    fixed = settings.fixed
    values: dict[str, Any] = {}

    def searched(field: str) -> bool:
        return field in _FIELDS and field not in fixed

    if searched("batch_size"):
        values["batch_size"] = trial.suggest_categorical("batch_size", [32, 64, 128, 256, 512])
    if searched("n_steps"):
        values["n_steps"] = trial.suggest_categorical(
            "n_steps", [32, 64, 128, 256, 512, 1024, 2048]
        )
    if searched("gamma"):
        values["gamma"] = 1.0 - trial.suggest_float("one_minus_gamma", 1e-4, 0.03, log=True)
    if searched("gae_lambda"):
        values["gae_lambda"] = 1.0 - trial.suggest_float(
            "one_minus_gae_lambda", 1e-4, 0.1, log=True
        )
    if searched("learning_rate"):
        values["learning_rate"] = trial.suggest_float("learning_rate", 1e-5, 2e-3, log=True)
    if searched("ent_coef"):
        values["ent_coef"] = trial.suggest_float("ent_coef", 1e-8, 0.1, log=True)
    if searched("clip_range"):
        values["clip_range"] = trial.suggest_categorical("clip_range", [0.1, 0.2, 0.3, 0.4])
    if searched("n_epochs"):
        values["n_epochs"] = trial.suggest_categorical("n_epochs", [1, 5, 10, 20])
    if searched("max_grad_norm"):
        values["max_grad_norm"] = trial.suggest_float("max_grad_norm", 0.3, 2.0)
    if searched("hidden_sizes"):
        values["hidden_sizes"] = NET_ARCHS[trial.suggest_categorical("net_arch", list(NET_ARCHS))]
    if searched("activation"):
        values["activation"] = trial.suggest_categorical("activation_fn", ["tanh", "relu"])
    return config_for(settings, values)


def config_for(settings: Any, values: Mapping[str, Any]) -> PPOConfig:
    """base <- sampled ``values`` <- fixed values, as a PPOConfig (ValueError or
    TypeError when the result is not a valid one)."""
    return PPOConfig.from_dict({**settings.base, **values, **settings.fixed})
