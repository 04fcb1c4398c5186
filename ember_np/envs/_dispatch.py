"""How compiled code steps a native env: the dynamics picked by the env state's class.

Every kernel that steps a native env takes it as one value, an
:class:`EnvState` (one env) or a :class:`VecEnvState` (N copies), of a class
made for that env by :func:`state_classes` from the env's row of the native
env table (``ember_np.envs.native.NATIVE_ENV_TABLE``). numba types a
NamedTuple subclass by its class, so :func:`reset_of` / :func:`step_of` pick
the env's reset / step kernels when a kernel compiles: each kernel here and
each fused loop is compiled once per env class and contains that env's
dynamics alone (a CartPole run never compiles Acrobot's), and the loop is
optimised for that one env. There is no other dispatch: nothing picks an env
at run time.

The time limit lives here, as gymnasium's ``TimeLimit`` wrapper:
``counters[0]`` counts the steps of the episode and ``truncated`` is set once
it reaches ``max_steps`` (even on a terminal step, as ``TimeLimit`` does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from numba.core.errors import TypingError
from numba.extending import overload

from ember_np._jit import exact_kernel, inlined_exact_kernel
from ember_np.rng import next_below

if TYPE_CHECKING:
    from ember_np._jit import JitOptions

#: Length of every native env's ``state`` array (float64): room for any env's physics.
STATE_SIZE = 8


class EnvState(NamedTuple):
    """One native env as kernels see it (one value); the base of each env's class.

    kind : int, the env's row in ``NATIVE_ENV_TABLE`` (its class's ``KIND``):
        a label for people reading a state; no kernel reads it, the class
        names the env.
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


class VecEnvState(NamedTuple):
    """N copies of one native env as kernels see them (one value); the base of each
    env's class.

    kind : int, as :class:`EnvState`'s; states : float64 (N, STATE_SIZE);
    counters : int64 (N, 2); rngs : uint64 (N, 4), each copy's reset stream;
    max_steps : int (0: none).
    Row i is copy i's :class:`EnvState`.
    """

    kind: int
    states: np.ndarray
    counters: np.ndarray
    rngs: np.ndarray
    max_steps: int


class EnvStateClasses(NamedTuple):
    """The kernel-facing classes of one native env (made by :func:`state_classes`)."""

    single: type[EnvState]
    vector: type[VecEnvState]


@inlined_exact_kernel
def counted_step(counters: np.ndarray, max_steps: int) -> bool:
    """Count a step of the episode in ``counters[0]``; whether it reached the time
    limit ``max_steps`` (0: none), gymnasium's ``TimeLimit`` truncation."""
    counters[0] += 1
    return max_steps > 0 and counters[0] >= max_steps


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


#: EnvState / VecEnvState class -> (reset, step) implementation of its env. One
#: implementation object per env, made once: numba compiles an overload's
#: implementation again for every new function object it is handed.
_IMPLEMENTATIONS: dict[object, tuple[Callable, Callable]] = {}


def state_classes(name: str, module: str, reset: Any, step: Any) -> EnvStateClasses:
    """Make the EnvState and VecEnvState classes of one env and bind its dynamics.

    Parameters
    ----------
    name : str
        The env's name, e.g. ``"CartPole"``: the classes are ``<name>State`` and
        ``<name>VecState``.
    module : str
        The module that makes them; it must bind both names at its top level (numba's
        cache pickles a kernel's argument types, classes included, by reference).
    reset : kernel ``(state, rng_state, obs) -> None``
        Draws the initial state (float64 (STATE_SIZE,)) from ``rng_state`` (uint64 (4,),
        advanced) and writes its observation to ``obs`` (float32 (obs_size,)).
    step : kernel ``(state, action, obs) -> (reward, terminated)``
        Advances ``state`` by ``action`` (int) and writes the observation.
    """
    made = EnvStateClasses(
        type(f"{name}State", (EnvState,), {"__slots__": (), "__module__": module}),
        type(f"{name}VecState", (VecEnvState,), {"__slots__": (), "__module__": module}),
    )
    implementations = (_resetter(reset), _stepper(step))
    for cls, base in zip(made, ("EnvState", "VecEnvState")):
        cls.__doc__ = f"A {base} of native {name}: kernels taking it compile {name} alone."
        _IMPLEMENTATIONS[cls] = implementations
    return made


# reset_of / step_of: the dynamics chosen by the class of the env state when a
# kernel compiles. jit options as exact_kernel's.
_EXACT_OPTIONS: JitOptions = {"fastmath": False, "error_model": "numpy", "nogil": True}


def reset_of(env, state, counters, rng_state, obs):  # noqa: ANN001, ANN201
    """Start an episode of ``env``'s env (an EnvState or VecEnvState of an env's own
    class, which names the dynamics) on one env's arrays: ``counters[0] = 0``, the
    initial state drawn from ``rng_state``, its observation written to ``obs``.
    Called by kernels only."""
    raise TypeError("reset_of is dispatched inside compiled kernels only")


def step_of(env, state, counters, action, obs):  # noqa: ANN001, ANN201
    """One step of ``env``'s env (as :func:`reset_of`) on one env's arrays, with
    ``env.max_steps``; returns (reward, terminated, truncated). Called by kernels only."""
    raise TypeError("step_of is dispatched inside compiled kernels only")


def _implementations(env: Any) -> tuple[Callable, Callable]:
    found = _IMPLEMENTATIONS.get(getattr(env, "instance_class", None))
    if found is None:
        raise TypingError(
            f"expected the env state of a native env (its kernel_state), got {env}; "
            "the base EnvState / VecEnvState name no dynamics: make the state with "
            "the env's own class (NativeEnv.kernel_state does)"
        )
    return found


@overload(reset_of, jit_options=_EXACT_OPTIONS, strict=False)
def _reset_of(env, state, counters, rng_state, obs):  # noqa: ANN001, ANN202
    return _implementations(env)[0]


@overload(step_of, jit_options=_EXACT_OPTIONS, strict=False)
def _step_of(env, state, counters, action, obs):  # noqa: ANN001, ANN202
    return _implementations(env)[1]


# The same dispatch inlined into the loops below (the fused loops' calls stay
# as they are): a call per copy and step halves step_batch's speed.
def _reset_inlined(env, state, counters, rng_state, obs):  # noqa: ANN001, ANN202
    raise TypeError("dispatched inside compiled kernels only")


def _step_inlined(env, state, counters, action, obs):  # noqa: ANN001, ANN202
    raise TypeError("dispatched inside compiled kernels only")


@overload(_reset_inlined, jit_options=_EXACT_OPTIONS, strict=False, inline="always")
def _reset_inlined_impl(env, state, counters, rng_state, obs):  # noqa: ANN001, ANN202
    return _implementations(env)[0]


@overload(_step_inlined, jit_options=_EXACT_OPTIONS, strict=False, inline="always")
def _step_inlined_impl(env, state, counters, action, obs):  # noqa: ANN001, ANN202
    return _implementations(env)[1]


# The kernels the fused loops, NativeEnv and NativeVecEnv call (each compiled
# once per env class, shared by the compiled and the Python callers).


@exact_kernel
def reset_env(env: EnvState, obs: np.ndarray) -> None:
    """Start an episode of ``env`` (an EnvState; :func:`reset_of`), its observation to ``obs``."""
    reset_of(env, env.state, env.counters, env.rng, obs)


@exact_kernel
def step_env(env: EnvState, action: int, obs: np.ndarray) -> tuple:
    """One step of ``env`` (an EnvState; :func:`step_of`): (reward, terminated, truncated).

    action : int in [0, n_actions) (callers check); obs : float32 (obs_size,), written.
    """
    return step_of(env, env.state, env.counters, action, obs)


@exact_kernel
def reset_copy(env: VecEnvState, e: int, obs: np.ndarray) -> None:
    """:func:`reset_env` for copy ``e`` of ``env`` (a VecEnvState)."""
    reset_of(env, env.states[e], env.counters[e], env.rngs[e], obs)


@exact_kernel
def step_copy(env: VecEnvState, e: int, action: int, obs: np.ndarray) -> tuple:
    """:func:`step_env` for copy ``e`` of ``env`` (a VecEnvState)."""
    return step_of(env, env.states[e], env.counters[e], action, obs)


@exact_kernel
def reset_batch(env: VecEnvState, obs: np.ndarray) -> None:
    """Reset every copy of ``env`` (a VecEnvState); obs : float32 (N, obs_size), written."""
    for i in range(env.states.shape[0]):
        _reset_inlined(env, env.states[i], env.counters[i], env.rngs[i], obs[i])


@exact_kernel
def step_batch(
    env: VecEnvState,
    actions: np.ndarray,
    obs: np.ndarray,
    final_obs: np.ndarray,
    rewards: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
) -> None:
    """Step N copies; a copy whose episode ends is reset in the same call.

    env : VecEnvState of N copies (updated in place); actions : int64 (N,), each
    in [0, n_actions); obs, final_obs : float32 (N, obs_size); rewards : float64
    (N,); terminated, truncated : bool (N,). All but env and actions are written.

    For a finished copy ``obs[i]`` is the first observation of its next
    episode and ``final_obs[i]`` the last one of the episode that ended.
    """
    for i in range(env.states.shape[0]):
        r, term, trunc = _step_inlined(env, env.states[i], env.counters[i], actions[i], obs[i])
        rewards[i] = r
        terminated[i] = term
        truncated[i] = trunc
        if term or trunc:
            final_obs[i, :] = obs[i]
            _reset_inlined(env, env.states[i], env.counters[i], env.rngs[i], obs[i])


@exact_kernel
def random_rollout(env: EnvState, obs: np.ndarray, n_actions: int, n_steps: int) -> int:
    """``n_steps`` steps with uniformly random actions and automatic resets.

    env : EnvState of an env that has been reset (updated in place; the actions
    are drawn from ``env.rng`` too); obs : float32 (obs_size,), written;
    n_actions : int >= 1; n_steps : int >= 0.

    Returns the number of episodes finished (the speed benchmark's loop).
    """
    episodes = 0
    for _ in range(n_steps):
        action = next_below(env.rng, n_actions)
        _, term, trunc = _step_inlined(env, env.state, env.counters, action, obs)
        if term or trunc:
            episodes += 1
            _reset_inlined(env, env.state, env.counters, env.rng, obs)
    return episodes
