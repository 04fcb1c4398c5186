"""Helper environments for the benchmarks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class NullEnv(gym.Env):
    """CartPole-shaped env that does no work: isolates the trainer's own cost.

    Returns the same float32 observation every step and ends an episode every
    ``episode_length`` steps.
    """

    observation_space = spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, episode_length: int = 200) -> None:
        self._obs = np.array([0.01, -0.02, 0.03, 0.04], dtype=np.float32)
        self._episode_length = episode_length
        self._t = 0

    def reset(self, *, seed=None, options=None):
        self._t = 0
        return self._obs, {}

    def step(self, action):
        self._t += 1
        return self._obs, 1.0, self._t >= self._episode_length, False, {}
