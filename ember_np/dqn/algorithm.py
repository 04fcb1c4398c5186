"""DQN (with every Rainbow component) as the registry sees it: ``--algo dqn``.

The one place DQN is registered (:data:`ember_np.algorithms.BUILT_IN` names
this module's :data:`DQN`). Agents, policies and presets are imported when a
command first asks for them, not when the registry is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ember_np.algorithms import Algorithm
from ember_np.dqn.config import DqnConfig


def _make_agent(env: Any, config: Any, seed: int) -> Any:
    from ember_np.dqn.agent import DqnAgent

    return DqnAgent.for_env(env, config, seed=seed)


def _load_agent(path: Path) -> Any:
    from ember_np.dqn.agent import DqnAgent

    return DqnAgent.from_checkpoint(path)


def _load_policy(path: Path) -> Any:
    from ember_np.dqn.policy import DqnPolicy

    return DqnPolicy.load(path)


def _presets(env_id: str) -> dict[str, Any]:
    from ember_np.presets import presets_for_env

    return presets_for_env(env_id)


def _default_preset(env_id: str) -> Any:
    from ember_np.presets import default_preset

    return default_preset(env_id)


def _get_preset(name: str, env_id: str) -> Any:
    from ember_np.presets import get_preset

    return get_preset(name, env_id)


def _describe(agent: Any) -> str:
    return f"epsilon {agent.epsilon:.3f}, {len(agent.buffer):,} transitions in the replay buffer"


def _suggest(trial: Any, settings: Any) -> Any:
    from ember_np.tune import suggest_config

    return suggest_config(trial, settings)


def _export_onnx(checkpoint: Path, output: Path) -> dict[str, Any]:
    from ember_np.export import export_onnx

    return export_onnx(checkpoint, output)


DQN = Algorithm(
    name="dqn",
    config_class=DqnConfig,
    checkpoint_format="ember_np.dqn_agent",
    make_agent=_make_agent,
    load_agent=_load_agent,
    load_policy=_load_policy,
    presets=_presets,
    default_preset=_default_preset,
    get_preset=_get_preset,
    describe_agent=_describe,
    tune_space=_suggest,
    export_onnx=_export_onnx,
)
"""DQN: :class:`~ember_np.DqnConfig`, :class:`~ember_np.DqnAgent`,
:class:`~ember_np.DqnPolicy`, the ``rainbow`` / ``zoo`` / ``ember`` presets,
the RL Zoo's search space, ONNX export."""
