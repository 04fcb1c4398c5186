"""PPO as the registry sees it: ``--algo ppo``.

The one place PPO is registered (:data:`ember_np.algorithms.BUILT_IN` names this
module's :data:`PPO`). Its agent, policy, presets and export are imported when a
command first asks for them (:func:`~ember_np.algorithms.lazy`): a DQN run imports
nothing of ``ember_np.ppo``.
"""

from __future__ import annotations

from typing import Any

from ember_np.algorithms import Algorithm, lazy
from ember_np.ppo import search_space
from ember_np.ppo.checkpoint_format import CHECKPOINT_FORMAT
from ember_np.ppo.config import PPOConfig


def _describe(agent: Any) -> str:
    return (f"{agent.n_updates:,} epochs of updates, {agent.buffer.pos} of "
            f"{agent.config.n_steps} steps of the rollout filled")  # fmt: skip


def _entry_kernel(native: bool, num_envs: int) -> str:
    """The compiled loop's kernel on N > 1 native envs (``fused_ppo_steps``), else the
    update's (``train_epochs``): what a PPO run compiles first."""
    if native and num_envs > 1:
        return "ember_np.ppo.fused:fused_ppo_steps"
    return "ember_np.ppo.update:train_epochs"


PPO = Algorithm(
    name="ppo",
    config_class=PPOConfig,
    checkpoint_format=CHECKPOINT_FORMAT,
    make_agent=lazy("ember_np.ppo.agent:PPOAgent.for_env"),
    load_agent=lazy("ember_np.ppo.agent:PPOAgent.from_checkpoint"),
    load_policy=lazy("ember_np.ppo.policy:PPOPolicy.load"),
    presets=lazy("ember_np.ppo.presets:presets_for_env"),
    default_preset=lazy("ember_np.ppo.presets:default_preset"),
    get_preset=lazy("ember_np.ppo.presets:get_preset"),
    describe_agent=_describe,
    tune_space=search_space,
    export_onnx=lazy("ember_np.ppo.onnx:export_onnx"),
    entry_kernel=_entry_kernel,
    compile_jobs=lazy("ember_np.ppo.precompile:compile_jobs"),
)
"""PPO: :class:`~ember_np.ppo.config.PPOConfig`, :class:`~ember_np.ppo.agent.PPOAgent`,
:class:`~ember_np.ppo.policy.PPOPolicy`, the ``zoo`` and ``sb3`` presets, the RL Zoo's
search space, ONNX export."""
