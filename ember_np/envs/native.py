"""Native classic-control environments: gymnasium envs whose dynamics are compiled.

``CartPoleEnv``, ``AcrobotEnv`` and ``MountainCarEnv`` reproduce gymnasium's
CartPole-v1, Acrobot-v1 and MountainCar-v0 exactly (dynamics, rewards,
termination, the time limit as truncation, and the reset draws: the same seed
gives the same episodes). They are ordinary ``gymnasium.Env`` subclasses,
registered as ``ember_np/CartPole-v1``, ``ember_np/Acrobot-v1`` and
``ember_np/MountainCar-v0``, so they work wherever a gymnasium env does. Their
state lives in NumPy arrays that compiled code can step directly: the
vectorised :class:`NativeVecEnv` and ``DqnTrainer``'s fused training loop.

Each env is one row of :data:`NATIVE_ENV_TABLE` (a :class:`NativeEnvSpec`):
its class's attributes, the state classes kernels take and ``NATIVE_ENVS``
are made from the rows.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any, ClassVar, NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ember_np._arrays import as_i64
from ember_np._jit import entry_point
from ember_np._validate import check_int
from ember_np.envs import _dispatch as d
from ember_np.envs._acrobot import acrobot_reset, acrobot_step
from ember_np.envs._cartpole import cartpole_reset, cartpole_step
from ember_np.envs._mountaincar import mountaincar_reset, mountaincar_step
from ember_np.rng import Rng

__all__ = [
    "NATIVE_ENV_TABLE",
    "AcrobotEnv",
    "CartPoleEnv",
    "MountainCarEnv",
    "NativeEnv",
    "NativeEnvSpec",
    "NativeVecEnv",
    "unwrap_native",
]


class NativeEnv(gym.Env):
    """Base class: a gymnasium env over compiled reset/step kernels.

    Parameters
    ----------
    max_steps : int, optional
        Episode length after which ``truncated`` is set (gymnasium's
        ``max_episode_steps``); the env's default when omitted, 0 for none.

    Attributes
    ----------
    state : ndarray of float64, shape (8,)
        The physical state (layout per env; see the kernel modules).
    counters : ndarray of int64, shape (2,)
        Steps taken in the current episode, then a spare slot.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # an instance attribute in gym.Env
    observation_space: spaces.Box
    action_space: spaces.Discrete
    # Set on each env's class from its row of NATIVE_ENV_TABLE:
    SPEC: ClassVar[NativeEnvSpec]
    STATES: ClassVar[d.EnvStateClasses]  # its EnvState and VecEnvState classes
    KIND: ClassVar[int]  # its row in NATIVE_ENV_TABLE (nothing dispatches on it)
    MAX_STEPS: ClassVar[int]
    GYMNASIUM_ID: ClassVar[str]

    def __init__(self, max_steps: int | None = None, render_mode: str | None = None) -> None:
        if render_mode is not None:
            raise ValueError(
                f"{type(self).__name__} does not render (got render_mode={render_mode!r})"
            )
        steps = self.MAX_STEPS if max_steps is None else max_steps
        self.max_steps = check_int("max_steps", steps, minimum=0, hint=" (0: no limit)")
        self.state = np.zeros(d.STATE_SIZE, dtype=np.float64)
        self.counters = np.zeros(2, dtype=np.int64)
        self.obs_size = int(self.observation_space.shape[0])
        self.n_actions = int(self.action_space.n)
        self._obs = np.zeros(self.obs_size, dtype=np.float32)
        self._rng = Rng(np.random.SeedSequence())  # unseeded until reset(seed=...)
        self._has_reset = False
        self._step: Any = None  # step_env's entry point, resolved on the first step

    @property
    def kernel_state(self) -> d.EnvState:
        """This env's live arrays as one :class:`~ember_np.envs._dispatch.EnvState`."""
        return self.STATES.single(self.KIND, self.state, self.counters, self._rng.state,
                                  int(self.max_steps))  # fmt: skip

    @property
    def rng(self) -> Rng:
        """The stream the resets draw from (gymnasium's ``np_random``, bit for bit)."""
        return self._rng

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self._rng.state = Rng(seed).state  # same stream as gymnasium's np_random
        d.reset_env(self.kernel_state, self._obs)
        self._has_reset = True
        return self._obs.copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        try:
            a = operator.index(action)
        except TypeError:
            raise ValueError(
                f"action must be an integer in [0, {self.n_actions}), got {action!r}"
            ) from None
        if not 0 <= a < self.n_actions:
            raise ValueError(f"action must be an integer in [0, {self.n_actions}), got {action!r}")
        if not self._has_reset:
            raise ValueError("call reset() before step()")
        state = self.kernel_state
        if self._step is None:  # the same types every call: resolved once (entry_point)
            self._step = entry_point(d.step_env, state, a, self._obs)
        reward, terminated, truncated = self._step(state, a, self._obs)
        return self._obs.copy(), float(reward), bool(terminated), bool(truncated), {}


class CartPoleEnv(NativeEnv):
    """gymnasium's CartPole-v1, compiled (500-step episodes)."""


class AcrobotEnv(NativeEnv):
    """gymnasium's Acrobot-v1, compiled (500-step episodes)."""


class MountainCarEnv(NativeEnv):
    """gymnasium's MountainCar-v0, compiled (200-step episodes)."""


class NativeEnvSpec(NamedTuple):
    """One native env, whole: its row of :data:`NATIVE_ENV_TABLE`.

    env_class : the NativeEnv subclass (its attributes are set from this row).
    gymnasium_id : str, the id of the gymnasium env it reproduces (``"CartPole-v1"``);
        it is registered as ``"ember_np/" + gymnasium_id``.
    max_steps : int, the default time limit (gymnasium's ``max_episode_steps``).
    reset : kernel ``(state, rng_state, obs) -> None``; step : kernel
        ``(state, action, obs) -> (reward, terminated)``: the dynamics, on a
        float64 (STATE_SIZE,) state (see ``ember_np.envs._dispatch.state_classes``).
    observation_space : float32 Box; action_space : Discrete starting at 0.
    """

    env_class: type[NativeEnv]
    gymnasium_id: str
    max_steps: int
    reset: Any
    step: Any
    observation_space: spaces.Box
    action_space: spaces.Discrete

    @property
    def id(self) -> str:
        """The id it is registered with gymnasium under (``ember_np/<gymnasium_id>``)."""
        return f"ember_np/{self.gymnasium_id}"


def _box(high: list[float]) -> spaces.Box:
    h = np.array(high, dtype=np.float32)
    return spaces.Box(-h, h, dtype=np.float32)


_F32_MAX = float(np.finfo(np.float32).max)

#: Every native env, one row each. Adding an env: its dynamics kernels (a module
#: like ``_cartpole.py``), its class above, its row here and its id in
#: ``ember_np._registration.NATIVE_ENV_ENTRY_POINTS`` (which cannot import this).
NATIVE_ENV_TABLE: tuple[NativeEnvSpec, ...] = (
    NativeEnvSpec(
        CartPoleEnv, "CartPole-v1", 500, cartpole_reset, cartpole_step,
        _box([4.8, _F32_MAX, 12 * 2 * math.pi / 360 * 2, _F32_MAX]), spaces.Discrete(2),
    ),
    NativeEnvSpec(
        AcrobotEnv, "Acrobot-v1", 500, acrobot_reset, acrobot_step,
        _box([1.0, 1.0, 1.0, 1.0, 4 * math.pi, 9 * math.pi]), spaces.Discrete(3),
    ),
    NativeEnvSpec(
        MountainCarEnv, "MountainCar-v0", 200, mountaincar_reset, mountaincar_step,
        spaces.Box(np.array([-1.2, -0.07], dtype=np.float32),
                   np.array([0.6, 0.07], dtype=np.float32), dtype=np.float32),
        spaces.Discrete(3),
    ),
)  # fmt: skip


def _install(row: NativeEnvSpec) -> None:
    """Give ``row.env_class`` its row's attributes and kernel-facing state classes."""
    cls = row.env_class
    name = cls.__name__.removesuffix("Env")
    states = d.state_classes(name, __name__, row.reset, row.step)
    for made in states:
        globals()[made.__name__] = made  # numba's cache pickles them by reference
    cls.SPEC = row
    cls.KIND = NATIVE_ENV_TABLE.index(row)
    cls.STATES = states
    cls.GYMNASIUM_ID = row.gymnasium_id
    cls.MAX_STEPS = row.max_steps
    cls.observation_space = row.observation_space
    cls.action_space = row.action_space


for _row in NATIVE_ENV_TABLE:
    _install(_row)

#: gymnasium id -> class of every native env.
NATIVE_ENVS: dict[str, type[NativeEnv]] = {row.id: row.env_class for row in NATIVE_ENV_TABLE}


def unwrap_native(env: Any) -> NativeEnv | None:
    """The native env under gymnasium's bookkeeping wrappers, or None.

    Only wrappers that change nothing about steps (``OrderEnforcing``,
    ``PassiveEnvChecker``) are looked through: behind any other wrapper the
    compiled loop would skip the wrapper's effect, so None is returned.
    """
    from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker

    while isinstance(env, (OrderEnforcing, PassiveEnvChecker)):
        env = env.env
    return env if isinstance(env, NativeEnv) else None


class NativeVecEnv:
    """N copies of a native env, stepped together in one compiled call.

    Parameters
    ----------
    env_id : str
        ``"CartPole-v1"``, ``"Acrobot-v1"`` or ``"MountainCar-v0"`` (with or
        without the ``ember_np/`` prefix).
    num_envs : int
    seed : int
        Each copy gets its own reset stream, spawned from this seed.
    max_steps : int, optional
        Per-copy time limit (the env's default when omitted).

    Notes
    -----
    ``step(actions)`` resets finished copies in the same call: their ``obs``
    row is the first observation of the new episode, and ``final_obs`` holds
    the last observation of the one that ended.
    """

    def __init__(self, env_id: str, num_envs: int, seed: int = 0, max_steps: int | None = None):
        key = env_id if env_id.startswith("ember_np/") else f"ember_np/{env_id}"
        if key not in NATIVE_ENVS:
            raise ValueError(f"no native env {env_id!r}; native envs: {sorted(NATIVE_ENVS)}")
        cls = NATIVE_ENVS[key]
        check_int("num_envs", num_envs)
        self.single = cls(max_steps=max_steps)
        self.kind = cls.KIND
        self.max_steps = self.single.max_steps
        self.num_envs = int(num_envs)
        n, k = self.num_envs, self.single.obs_size
        self.states = np.zeros((n, d.STATE_SIZE), dtype=np.float64)
        self.counters = np.zeros((n, 2), dtype=np.int64)
        self.rng_states = np.stack([r.state for r in Rng.streams(seed, n)])
        self.obs = np.zeros((n, k), dtype=np.float32)
        self.final_obs = np.zeros((n, k), dtype=np.float32)
        self.rewards = np.zeros(n, dtype=np.float64)
        self.terminated = np.zeros(n, dtype=np.bool_)
        self.truncated = np.zeros(n, dtype=np.bool_)
        self._step_batch: Any = None  # step_batch's entry point, resolved on the first step
        self.observation_space = self.single.observation_space
        self.action_space = self.single.action_space

    @property
    def kernel_state(self) -> d.VecEnvState:
        """The copies' live arrays as one :class:`~ember_np.envs._dispatch.VecEnvState`."""
        return self.single.STATES.vector(self.kind, self.states, self.counters, self.rng_states,
                                         int(self.max_steps))  # fmt: skip

    @property
    def spec(self) -> Any:
        """The gymnasium spec of one copy (``ember_np/<id>``): what evaluation makes."""
        spec = gym.spec(f"ember_np/{self.single.GYMNASIUM_ID}")
        if self.max_steps == self.single.MAX_STEPS:
            return spec
        return dataclasses.replace(spec, kwargs={**spec.kwargs, "max_steps": self.max_steps})

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every copy; returns the observations, float32 (num_envs, obs_size).

        With ``seed``, copy i's reset stream restarts from ``seed + i``, as
        gymnasium's vector envs seed their copies (so copy 0 plays the
        episodes of a single env reset with ``seed``); without, each copy
        continues its stream.
        """
        if seed is not None:
            check_int("seed", seed, minimum=0, maximum=None)
            for i in range(self.num_envs):
                self.rng_states[i] = Rng(seed + i).state
        d.reset_batch(self.kernel_state, self.obs)
        return self.obs.copy()

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step every copy: (obs, rewards, terminated, truncated), each a new array."""
        a = as_i64(actions, "actions")
        if a.shape != (self.num_envs,):
            raise ValueError(f"expected actions of shape ({self.num_envs},), got {a.shape}")
        if a.size and (a.min() < 0 or a.max() >= self.single.n_actions):
            raise ValueError(f"actions must be in [0, {self.single.n_actions})")
        args = (self.kernel_state, a, self.obs, self.final_obs, self.rewards, self.terminated,
                self.truncated)  # fmt: skip
        if self._step_batch is None:  # the same types every call: resolved once (entry_point)
            self._step_batch = entry_point(d.step_batch, *args)
        self._step_batch(*args)
        return self.obs.copy(), self.rewards.copy(), self.terminated.copy(), self.truncated.copy()

    def close(self) -> None:
        """Release nothing (the copies are arrays): here so that every env a trainer
        drives, this one or gymnasium's, is closed the same way when training ends."""
