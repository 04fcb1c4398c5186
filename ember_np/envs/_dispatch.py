"""One entry point for every native environment, selected by its kind.

:func:`env_reset` and :func:`env_step` take the kind as an integer and pick the
dynamics at run time (the vectorised stepper and the rollout benchmark: one
compiled kernel serves every environment). The fused trainer and a single env
stepped from Python take an :class:`EnvState` of the env's own class
(:data:`ENV_STATES`) instead, and :func:`reset_of` / :func:`step_of` pick the
dynamics by that class when they compile: a CartPole run then never compiles
Acrobot's or MountainCar's dynamics (each of those kernels compiles for the
class it is given). The time limit
lives here, as gymnasium's ``TimeLimit`` wrapper: ``counters[0]`` counts the
steps of the episode and ``truncated`` is set once it reaches ``max_steps``
(even on a terminal step, as ``TimeLimit`` does).

Both are inlined into their compiled callers. The loops below are written
once and called once per kind with the kind as a constant, so LLVM drops the
other environments' code from each copy and optimises the loop for one
environment (native CartPole: about twice the steps per second of a loop
that dispatches on every step).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numba.extending import overload

from ember_np._jit import exact_kernel, inlined_exact_kernel
from ember_np.envs._acrobot import acrobot_reset, acrobot_step
from ember_np.envs._cartpole import cartpole_reset, cartpole_step
from ember_np.envs._mountaincar import mountaincar_reset, mountaincar_step
from ember_np.rng import next_below

if TYPE_CHECKING:
    from ember_np._jit import JitOptions

CARTPOLE, ACROBOT, MOUNTAINCAR = 0, 1, 2
STATE_SIZE = 8


class EnvState(NamedTuple):
    """One native env as kernels see it (one value).

    kind : int, CARTPOLE, ACROBOT or MOUNTAINCAR.
    state : ndarray of float64, shape (STATE_SIZE,), the physical state.
    counters : ndarray of int64, shape (2,); counters[0] counts the episode's steps.
    rng : ndarray of uint64, shape (4,), the PCG64 state resets draw from.
    max_steps : int, the time limit (0: none).
    """

    kind: int
    state: np.ndarray
    counters: np.ndarray
    rng: np.ndarray
    max_steps: int


class CartPoleState(EnvState):
    """An :class:`EnvState` of native CartPole: kernels taking it compile CartPole alone."""

    __slots__ = ()


class AcrobotState(EnvState):
    """An :class:`EnvState` of native Acrobot (see :class:`CartPoleState`)."""

    __slots__ = ()


class MountainCarState(EnvState):
    """An :class:`EnvState` of native MountainCar (see :class:`CartPoleState`)."""

    __slots__ = ()


class VecEnvState(NamedTuple):
    """N native envs of one kind as kernels see them (one value).

    kind : int; states : float64 (N, STATE_SIZE); counters : int64 (N, 2);
    rngs : uint64 (N, 4), each copy's reset stream; max_steps : int (0: none).
    Row i is copy i's :class:`EnvState`.
    """

    kind: int
    states: np.ndarray
    counters: np.ndarray
    rngs: np.ndarray
    max_steps: int


class CartPoleVecState(VecEnvState):
    """A :class:`VecEnvState` of native CartPole copies (see :class:`CartPoleState`)."""

    __slots__ = ()


class AcrobotVecState(VecEnvState):
    """A :class:`VecEnvState` of native Acrobot copies (see :class:`CartPoleState`)."""

    __slots__ = ()


class MountainCarVecState(VecEnvState):
    """A :class:`VecEnvState` of native MountainCar copies (see :class:`CartPoleState`)."""

    __slots__ = ()


#: The EnvState and VecEnvState class of each kind.
ENV_STATES = {CARTPOLE: CartPoleState, ACROBOT: AcrobotState, MOUNTAINCAR: MountainCarState}
VEC_ENV_STATES = {CARTPOLE: CartPoleVecState, ACROBOT: AcrobotVecState,
                  MOUNTAINCAR: MountainCarVecState}  # fmt: skip


@inlined_exact_kernel
def env_reset(
    kind: int, state: np.ndarray, counters: np.ndarray, rng_state: np.ndarray, obs: np.ndarray
) -> None:
    """Start an episode: draw the initial state from ``rng_state``, write its observation.

    kind : int, CARTPOLE, ACROBOT or MOUNTAINCAR (anything else runs MountainCar);
    state : float64 (STATE_SIZE,), written; counters : int64 (2,), counters[0] set to 0;
    rng_state : uint64 (4,), advanced; obs : float32 (the env's obs_size,), written.
    """
    counters[0] = 0
    if kind == CARTPOLE:
        cartpole_reset(state, rng_state, obs)
    elif kind == ACROBOT:
        acrobot_reset(state, rng_state, obs)
    else:
        mountaincar_reset(state, rng_state, obs)


@inlined_exact_kernel
def env_step(
    kind: int,
    state: np.ndarray,
    counters: np.ndarray,
    action: int,
    obs: np.ndarray,
    max_steps: int,
) -> tuple[float, bool, bool]:
    """Advance one step; returns (reward, terminated, truncated).

    kind, state, counters, obs : as :func:`env_reset` (state and counters updated,
    obs written); action : int in [0, n_actions) (callers check);
    max_steps : int >= 0, the time limit (0: none).
    """
    if kind == CARTPOLE:
        reward, terminated = cartpole_step(state, action, obs)
    elif kind == ACROBOT:
        reward, terminated = acrobot_step(state, action, obs)
    else:
        reward, terminated = mountaincar_step(state, action, obs)
    return reward, terminated, counted_step(counters, max_steps)


@inlined_exact_kernel
def counted_step(counters: np.ndarray, max_steps: int) -> bool:
    """Count a step of the episode in ``counters[0]``; whether it reached the time
    limit ``max_steps`` (0: none), gymnasium's ``TimeLimit`` truncation."""
    counters[0] += 1
    return max_steps > 0 and counters[0] >= max_steps


@inlined_exact_kernel
def _step_batch_of(
    kind: int,
    states: np.ndarray,
    counters: np.ndarray,
    rng_states: np.ndarray,
    actions: np.ndarray,
    max_steps: int,
    obs: np.ndarray,
    final_obs: np.ndarray,
    rewards: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
) -> None:
    for i in range(states.shape[0]):
        r, term, trunc = env_step(kind, states[i], counters[i], actions[i], obs[i], max_steps)
        rewards[i] = r
        terminated[i] = term
        truncated[i] = trunc
        if term or trunc:
            final_obs[i, :] = obs[i]
            env_reset(kind, states[i], counters[i], rng_states[i], obs[i])


@exact_kernel
def step_batch(
    kind: int,
    states: np.ndarray,
    counters: np.ndarray,
    rng_states: np.ndarray,
    actions: np.ndarray,
    max_steps: int,
    obs: np.ndarray,
    final_obs: np.ndarray,
    rewards: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
) -> None:
    """Step N copies; a copy whose episode ends is reset in the same call.

    kind : int; states : float64 (N, STATE_SIZE); counters : int64 (N, 2);
    rng_states : uint64 (N, 4); actions : int64 (N,), each in [0, n_actions);
    max_steps : int >= 0; obs, final_obs : float32 (N, obs_size);
    rewards : float64 (N,); terminated, truncated : bool (N,). All but kind,
    actions and max_steps are updated or written in place.

    For a finished copy ``obs[i]`` is the first observation of its next
    episode and ``final_obs[i]`` the last one of the episode that ended.
    """
    # One call per kind, spelled out: an inlined call cannot take *args.
    if kind == CARTPOLE:
        _step_batch_of(CARTPOLE, states, counters, rng_states, actions, max_steps, obs,
                       final_obs, rewards, terminated, truncated)  # fmt: skip
    elif kind == ACROBOT:
        _step_batch_of(ACROBOT, states, counters, rng_states, actions, max_steps, obs,
                       final_obs, rewards, terminated, truncated)  # fmt: skip
    else:
        _step_batch_of(MOUNTAINCAR, states, counters, rng_states, actions, max_steps, obs,
                       final_obs, rewards, terminated, truncated)  # fmt: skip


@inlined_exact_kernel
def _random_rollout_of(
    kind: int,
    state: np.ndarray,
    counters: np.ndarray,
    rng_state: np.ndarray,
    obs: np.ndarray,
    max_steps: int,
    n_actions: int,
    n_steps: int,
) -> int:
    episodes = 0
    for _ in range(n_steps):
        _, term, trunc = env_step(kind, state, counters, next_below(rng_state, n_actions), obs,
                                  max_steps)  # fmt: skip
        if term or trunc:
            episodes += 1
            env_reset(kind, state, counters, rng_state, obs)
    return episodes


@exact_kernel
def random_rollout(
    kind: int,
    state: np.ndarray,
    counters: np.ndarray,
    rng_state: np.ndarray,
    obs: np.ndarray,
    max_steps: int,
    n_actions: int,
    n_steps: int,
) -> int:
    """``n_steps`` steps with uniformly random actions and automatic resets.

    kind, state, counters, rng_state, obs : as :func:`env_reset` (the env must
    have been reset); max_steps : int >= 0; n_actions : int >= 1; n_steps : int >= 0.

    Returns the number of episodes finished (the speed benchmark's loop).
    """
    if kind == CARTPOLE:
        return _random_rollout_of(CARTPOLE, state, counters, rng_state, obs, max_steps,
                                  n_actions, n_steps)  # fmt: skip
    if kind == ACROBOT:
        return _random_rollout_of(ACROBOT, state, counters, rng_state, obs, max_steps,
                                  n_actions, n_steps)  # fmt: skip
    return _random_rollout_of(MOUNTAINCAR, state, counters, rng_state, obs, max_steps,
                              n_actions, n_steps)  # fmt: skip


# reset_of / step_of: the dynamics chosen by the class of the env state when a
# kernel compiles (numba types a NamedTuple subclass by its class).
# as exact_kernel
_EXACT_OPTIONS: JitOptions = {"fastmath": False, "error_model": "numpy", "nogil": True}


_KIND_OF_CLASS: dict[object, int] = {cls: kind for table in (ENV_STATES, VEC_ENV_STATES)
                  for kind, cls in table.items()}  # fmt: skip


def _kind_of_class(env: object) -> int | None:
    """The kind an EnvState or VecEnvState class names, None for the base classes."""
    return _KIND_OF_CLASS.get(getattr(env, "instance_class", None))


def reset_of(env, state, counters, rng_state, obs):  # noqa: ANN001, ANN201
    """:func:`env_reset` for the kind of ``env`` (an EnvState or VecEnvState,
    whose class names it; the base classes: its ``kind`` field, at run time) on
    one env's arrays. Called by kernels only."""
    raise TypeError("reset_of is dispatched inside compiled kernels only")


def step_of(env, state, counters, action, obs):  # noqa: ANN001, ANN201
    """:func:`env_step` for the kind of ``env`` (as :func:`reset_of`), with
    ``env.max_steps``; returns (reward, terminated, truncated). Called by kernels only."""
    raise TypeError("step_of is dispatched inside compiled kernels only")


def _resetter(reset: Callable) -> Callable:
    def impl(env, state, counters, rng_state, obs):  # noqa: ANN001, ANN202
        counters[0] = 0
        reset(state, rng_state, obs)

    return impl


def _stepper(step: Callable) -> Callable:
    def impl(env, state, counters, action, obs):  # noqa: ANN001, ANN202
        reward, terminated = step(state, action, obs)
        return reward, terminated, counted_step(counters, env.max_steps)

    return impl


# One implementation object per kind, made once: numba compiles an overload's
# implementation again for every new function object it is handed.
_RESETS = {CARTPOLE: _resetter(cartpole_reset), ACROBOT: _resetter(acrobot_reset),
           MOUNTAINCAR: _resetter(mountaincar_reset)}  # fmt: skip
_STEPS = {CARTPOLE: _stepper(cartpole_step), ACROBOT: _stepper(acrobot_step),
          MOUNTAINCAR: _stepper(mountaincar_step)}  # fmt: skip


def _reset_any(env, state, counters, rng_state, obs):  # noqa: ANN001, ANN202
    env_reset(env.kind, state, counters, rng_state, obs)


def _step_any(env, state, counters, action, obs):  # noqa: ANN001, ANN202
    return env_step(env.kind, state, counters, action, obs, env.max_steps)


@overload(reset_of, jit_options=_EXACT_OPTIONS, strict=False)
def _reset_of(env, state, counters, rng_state, obs):  # noqa: ANN001, ANN202
    kind = _kind_of_class(env)
    return _reset_any if kind is None else _RESETS[kind]


@overload(step_of, jit_options=_EXACT_OPTIONS, strict=False)
def _step_of(env, state, counters, action, obs):  # noqa: ANN001, ANN202
    kind = _kind_of_class(env)
    return _step_any if kind is None else _STEPS[kind]


# The kernels the fused loops and NativeEnv call (each compiled once per class,
# shared by the compiled and the Python callers).


@exact_kernel
def reset_env(env: EnvState, obs: np.ndarray) -> None:
    """Start an episode of ``env`` (an EnvState; :func:`env_reset`), its observation to ``obs``."""
    reset_of(env, env.state, env.counters, env.rng, obs)


@exact_kernel
def step_env(env: EnvState, action: int, obs: np.ndarray) -> tuple:
    """One step of ``env`` (an EnvState; :func:`env_step`): (reward, terminated, truncated)."""
    return step_of(env, env.state, env.counters, action, obs)


@exact_kernel
def reset_copy(env: VecEnvState, e: int, obs: np.ndarray) -> None:
    """:func:`reset_env` for copy ``e`` of ``env`` (a VecEnvState)."""
    reset_of(env, env.states[e], env.counters[e], env.rngs[e], obs)


@exact_kernel
def step_copy(env: VecEnvState, e: int, action: int, obs: np.ndarray) -> tuple:
    """:func:`step_env` for copy ``e`` of ``env`` (a VecEnvState)."""
    return step_of(env, env.states[e], env.counters[e], action, obs)
