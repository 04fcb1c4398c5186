"""Native (compiled) classic-control environments, registered with gymnasium.

Importing this package registers ``ember_np/CartPole-v1``,
``ember_np/Acrobot-v1`` and ``ember_np/MountainCar-v0``::

    import gymnasium as gym
    import ember_np.envs  # noqa: F401  (``import ember_np`` does it too)
    env = gym.make("ember_np/CartPole-v1")
"""

from __future__ import annotations

from ember_np._registration import register_native_envs
from ember_np.envs.native import (
    AcrobotEnv,
    CartPoleEnv,
    MountainCarEnv,
    NativeEnv,
    NativeVecEnv,
    unwrap_native,
)

__all__ = [
    "AcrobotEnv",
    "CartPoleEnv",
    "MountainCarEnv",
    "NativeEnv",
    "NativeVecEnv",
    "unwrap_native",
]

# Also done when gymnasium is imported after ``import ember_np``; idempotent.
register_native_envs()
