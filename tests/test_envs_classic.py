"""Acrobot-v1 / MountainCar-v0 kernels against gymnasium, compared bit for bit.

Every comparison is exact: float32 observations with ``np.array_equal``, the float64
state with ``==``, rewards and termination flags. Both envs are chaotic enough (Acrobot
especially) that a one-ulp difference anywhere grows into a visible one within a few
dozen steps, so long trajectories check the whole arithmetic.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numba
import numpy as np
import pytest

from ember_np.envs._acrobot import acrobot_reset, acrobot_step
from ember_np.envs._mountaincar import mountaincar_reset, mountaincar_step
from ember_np.rng import Rng

KERNELS = {
    "Acrobot-v1": (acrobot_reset, acrobot_step, 4, 6),
    "MountainCar-v0": (mountaincar_reset, mountaincar_step, 2, 2),
}


def gym_state(env: gym.Env) -> np.ndarray:
    """gymnasium's raw state as float64 (Acrobot: float32 array after a reset,
    float64 after a step; MountainCar: a tuple whose velocity may be the int 0)."""
    return np.array(env.unwrapped.state, dtype=np.float64)


def heuristic_action(env_id: str, state: np.ndarray) -> int:
    """Pump energy into the swing: reaches the goal, unlike random actions."""
    if env_id == "Acrobot-v1":  # torque against the first link's rotation
        return 0 if state[2] >= 0.0 else 2
    return 2 if state[1] >= 0.0 else 0  # push the car along its velocity


class Pair:
    """A gymnasium env (with its TimeLimit) and the kernel version, side by side."""

    def __init__(self, env_id: str, seed: int) -> None:
        self.env_id = env_id
        self.reset_kernel, self.step_kernel, self.n_state, n_obs = KERNELS[env_id]
        self.env = gym.make(env_id)
        self.rng = Rng(seed)
        self.state = np.zeros(8, dtype=np.float64)
        self.obs = np.zeros(n_obs, dtype=np.float32)
        theirs, _ = self.env.reset(seed=seed)
        self.reset_kernel(self.state, self.rng.state, self.obs)
        self.check(theirs)

    def check(self, theirs: np.ndarray) -> None:
        assert theirs.dtype == np.float32
        assert np.array_equal(theirs, self.obs), (theirs, self.obs)
        assert np.array_equal(gym_state(self.env), self.state[: self.n_state])

    def step(self, action: int) -> tuple[bool, bool]:
        theirs, r1, term1, trunc1, _ = self.env.step(action)
        r2, term2 = self.step_kernel(self.state, action, self.obs)
        self.check(theirs)
        assert r1 == r2 and type(r2) is float
        assert term1 == term2
        return term1, trunc1

    def reset(self) -> None:
        theirs, _ = self.env.reset()  # no seed: both continue their stream
        self.reset_kernel(self.state, self.rng.state, self.obs)
        self.check(theirs)


@pytest.mark.parametrize("env_id", list(KERNELS))
@pytest.mark.parametrize("seed", [0, 1, 2024])
@pytest.mark.parametrize("policy", ["random", "heuristic"])
def test_trajectories_match_gymnasium_across_resets(env_id, seed, policy):
    pair = Pair(env_id, seed)
    actions = np.random.default_rng(seed + 100).integers(0, 3, 4_000)
    explore = np.random.default_rng(seed + 200).random(actions.size) < 0.2
    resets = terminations = 0
    for a, random_move in zip(actions, explore):
        if policy == "heuristic" and not random_move:
            a = heuristic_action(env_id, pair.state)
        terminated, truncated = pair.step(int(a))
        if terminated or truncated:
            resets += 1
            terminations += terminated
            pair.reset()
    assert resets >= 7  # episodes last at most 500 (Acrobot) / 200 (MountainCar) steps
    if policy == "heuristic":
        assert terminations >= 5  # the terminal branch ran, and resets after it


def test_left_wall_stops_the_car():
    """MountainCar's ``position == min_position and velocity < 0`` rule, reached by a run."""
    pair = Pair("MountainCar-v0", 3)
    hits = 0
    for _ in range(2_000):
        # swing right until moving left, then push left into the wall
        terminated, truncated = pair.step(0 if pair.state[1] < 0.0 else 2)
        hits += pair.state[0] == -1.2
        if terminated or truncated:
            pair.reset()
    assert hits >= 5


@pytest.mark.parametrize("env_id", list(KERNELS))
def test_first_observation_for_many_seeds(env_id):
    """Reset draws (and Acrobot's float32 np.cos / np.sin of them) for 300 seeds."""
    reset_kernel, _, n_state, n_obs = KERNELS[env_id]
    env = gym.make(env_id).unwrapped
    state = np.zeros(8, dtype=np.float64)
    obs = np.zeros(n_obs, dtype=np.float32)
    for seed in range(300):
        theirs, _ = env.reset(seed=seed)
        rng = Rng(seed)
        reset_kernel(state, rng.state, obs)
        assert np.array_equal(theirs, obs), seed
        assert np.array_equal(np.asarray(env.state, dtype=np.float64), state[:n_state])
        # gymnasium's generator and ours advanced by the same number of draws
        assert env.np_random.random() == rng.random()


@numba.njit
def _acrobot_resets(rng_state: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    state = np.zeros(8, dtype=np.float64)
    states = np.empty((n, 4), dtype=np.float64)
    observations = np.empty((n, 6), dtype=np.float32)
    for i in range(n):
        acrobot_reset(state, rng_state, observations[i])
        states[i] = state[:4]
    return states, observations


def test_acrobot_reset_observations_use_numpy_float32_trig():
    """500k resets against NumPy's recipe: catches cos/sin computed in float64 then
    rounded, which differs from NumPy's float32 loop about once per 100k values."""
    n = 500_000
    states, observations = _acrobot_resets(Rng(11).state, n)
    # gymnasium: 4 uniform draws per reset, cast to float32, then _get_ob
    s = np.random.default_rng(11).uniform(-0.1, 0.1, size=(n, 4)).astype(np.float32)
    expected = np.column_stack(
        [np.cos(s[:, 0]), np.sin(s[:, 0]), np.cos(s[:, 1]), np.sin(s[:, 1]), s[:, 2], s[:, 3]]
    )
    assert np.array_equal(states, s)
    assert np.array_equal(observations, expected)


def random_states(env_id: str, n: int, seed: int) -> np.ndarray:
    """States spread over the observation bounds, plus the edges the rules care about."""
    g = np.random.default_rng(seed)
    if env_id == "Acrobot-v1":
        high = np.array([math.pi, math.pi, 4 * math.pi, 9 * math.pi])
        states = g.uniform(-high, high, size=(n, 4))
        # at the velocity limits, and links pointing up (terminal region)
        states[: n // 8, 2:] = high[2:] * g.choice([-1.0, 1.0], size=(n // 8, 2))
        states[n // 8 : n // 4, 0] = g.uniform(2.5, math.pi, n // 8) * g.choice([-1, 1], n // 8)
        return states
    states = np.column_stack([g.uniform(-1.2, 0.6, n), g.uniform(-0.07, 0.07, n)])
    k = n // 8
    states[:k, 0] = -1.2 + g.uniform(0.0, 0.01, k)  # next to the left wall
    states[:k, 1] = -g.uniform(0.0, 0.07, k)
    states[k : 2 * k, 0] = g.uniform(0.45, 0.6, k)  # next to the goal
    states[2 * k : 3 * k, 1] = 0.07 * g.choice([-1.0, 1.0], k)  # at the speed limit
    return states


@pytest.mark.parametrize("env_id", list(KERNELS))
def test_one_step_from_arbitrary_states(env_id):
    _, step_kernel, n_state, n_obs = KERNELS[env_id]
    env = gym.make(env_id).unwrapped
    env.reset(seed=0)
    state = np.zeros(8, dtype=np.float64)
    obs = np.zeros(n_obs, dtype=np.float32)
    outcomes = set()
    for s in random_states(env_id, 1_000, seed=5):
        for action in range(3):
            env.state = s.copy() if env_id == "Acrobot-v1" else (float(s[0]), float(s[1]))
            state[:n_state] = s
            theirs, r1, term1, _, _ = env.step(action)
            r2, term2 = step_kernel(state, action, obs)
            assert np.array_equal(theirs, obs), (s, action)
            assert np.array_equal(gym_state(env), state[:n_state]), (s, action)
            assert r1 == r2 and term1 == term2, (s, action)
            outcomes.add(term1)
    assert outcomes == {False, True}
