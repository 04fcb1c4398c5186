"""PPO as the registry sees it: ``--algo ppo``.

The one place PPO is registered (:data:`ember_np.algorithms.BUILT_IN` names this
module's :data:`PPO`). Its agent, policy, presets and export are imported when a
command first asks for them, so a DQN run imports no module of ``ember_np.ppo``
but this one's name in the registry table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ember_np.algorithms import Algorithm
from ember_np.ppo import search_space
from ember_np.ppo.checkpoint_format import CHECKPOINT_FORMAT
from ember_np.ppo.config import PPOConfig


def _make_agent(env: Any, config: Any, seed: int) -> Any:
    from ember_np.ppo.agent import PPOAgent

    return PPOAgent.for_env(env, config, seed=seed)


def _load_agent(path: Path) -> Any:
    from ember_np.ppo.agent import PPOAgent

    return PPOAgent.from_checkpoint(path)


def _load_policy(path: Path) -> Any:
    from ember_np.ppo.policy import PPOPolicy

    return PPOPolicy.load(path)


def _presets(env_id: str) -> dict[str, Any]:
    from ember_np.ppo.presets import presets_for_env

    return presets_for_env(env_id)


def _default_preset(env_id: str) -> Any:
    from ember_np.ppo.presets import default_preset

    return default_preset(env_id)


def _get_preset(name: str, env_id: str) -> Any:
    from ember_np.ppo.presets import get_preset

    return get_preset(name, env_id)


def _describe(agent: Any) -> str:
    return (f"{agent.n_updates:,} epochs of updates, {agent.buffer.pos} of "
            f"{agent.config.n_steps} steps of the rollout filled")  # fmt: skip


def _entry_kernel(native: bool, num_envs: int) -> Any:
    """The update's kernel (``train_epochs``): every PPO run compiles it."""
    from ember_np.ppo.update import train_epochs

    return train_epochs


def _export_onnx(checkpoint: Path, output: Path) -> dict[str, Any]:
    from ember_np.ppo.onnx import export_onnx

    return export_onnx(checkpoint, output)


PPO = Algorithm(
    name="ppo",
    config_class=PPOConfig,
    checkpoint_format=CHECKPOINT_FORMAT,
    make_agent=_make_agent,
    load_agent=_load_agent,
    load_policy=_load_policy,
    presets=_presets,
    default_preset=_default_preset,
    get_preset=_get_preset,
    describe_agent=_describe,
    tune_space=search_space,
    export_onnx=_export_onnx,
    entry_kernel=_entry_kernel,
)
"""PPO: :class:`~ember_np.ppo.config.PPOConfig`, :class:`~ember_np.ppo.agent.PPOAgent`,
:class:`~ember_np.ppo.policy.PPOPolicy`, the ``zoo`` and ``sb3`` presets, the RL Zoo's
search space, ONNX export."""
