"""DQN (with every Rainbow component) as the registry sees it: ``--algo dqn``.

The one place DQN is registered (:data:`ember_np.algorithms.BUILT_IN` names
this module's :data:`DQN`). Agents, policies and presets are imported when a
command first asks for them, not when the registry is imported.
"""

from __future__ import annotations

from typing import Any

from ember_np.algorithms import Algorithm, lazy
from ember_np.dqn import search_space
from ember_np.dqn.config import DqnConfig


def check_replay_memory(env: Any, config: DqnConfig, copies: int = 1) -> None:
    """Refuse replay buffers that do not fit in the memory available, before allocating them.

    Parameters
    ----------
    env : gymnasium.Env or VectorEnv
        The env whose observation and action spaces (a vector env's: one copy's)
        set a transition's size.
    config : DqnConfig
        Its ``buffer_capacity`` is the rows of each buffer.
    copies : int, default 1
        Buffers that will live at once (a tune trial trains its K seeds side by side).

    Raises
    ------
    ValueError
        ``copies x config.buffer_capacity`` rows of ``env``'s transitions need
        more bytes than the machine has available (the message says which
        ``buffer_capacity`` fits).
    """
    from ember_np._memory import available_memory, format_bytes
    from ember_np.dqn.replay import transition_dtype
    from ember_np.encoding import IndexActionMapper, encoder_for_space, single_spaces

    obs_space, action_space = single_spaces(env)
    obs_size = encoder_for_space(obs_space).obs_size
    n_actions = IndexActionMapper.for_space(action_space).num_actions
    per_row = transition_dtype(obs_size, n_actions).itemsize
    need = copies * config.buffer_capacity * per_row
    free = available_memory()
    if free is not None and need > free:
        buffers = "the replay buffer" if copies == 1 else f"{copies} replay buffers"
        raise ValueError(
            f"buffer_capacity={config.buffer_capacity} needs {format_bytes(need)} for {buffers} "
            f"({per_row} bytes a transition), more than the {format_bytes(free)} of "
            f"memory available: use --set buffer_capacity=N with N <= {free // per_row // copies:,}"
        )


def _describe(agent: Any) -> str:
    return f"epsilon {agent.epsilon:.3f}, {len(agent.buffer):,} transitions in the replay buffer"


def _entry_kernel(native: bool, num_envs: int) -> str:
    """The fused loop's kernel on a native env (``fused_steps``, ``fused_vec_steps`` for
    N envs), else the Python loop's (``agent_step``, ``agent_vec_step``)."""
    if native:
        return f"ember_np.training._fused:{'fused_vec_steps' if num_envs > 1 else 'fused_steps'}"
    return f"ember_np.dqn.agent_kernels:{'agent_vec_step' if num_envs > 1 else 'agent_step'}"


DQN = Algorithm(
    name="dqn",
    config_class=DqnConfig,
    checkpoint_format="ember_np.dqn_agent",
    make_agent=lazy("ember_np.dqn.agent:DqnAgent.for_env"),
    load_agent=lazy("ember_np.dqn.agent:DqnAgent.from_checkpoint"),
    load_policy=lazy("ember_np.dqn.policy:DqnPolicy.load"),
    presets=lazy("ember_np.dqn.presets:presets_for_env"),
    default_preset=lazy("ember_np.dqn.presets:default_preset"),
    get_preset=lazy("ember_np.dqn.presets:get_preset"),
    describe_agent=_describe,
    check_setup=check_replay_memory,
    tune_space=search_space,
    export_onnx=lazy("ember_np.dqn.onnx:export_onnx"),
    entry_kernel=_entry_kernel,
)
"""DQN: :class:`~ember_np.DqnConfig`, :class:`~ember_np.DqnAgent`,
:class:`~ember_np.DqnPolicy`, the ``rainbow`` / ``zoo`` / ``ember`` presets,
the RL Zoo's search space, ONNX export."""
