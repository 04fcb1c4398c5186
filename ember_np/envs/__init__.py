"""Native (compiled) classic-control environments, registered with gymnasium.

Importing this package registers ``ember_np/CartPole-v1``,
``ember_np/Acrobot-v1`` and ``ember_np/MountainCar-v0``::

    import gymnasium as gym
    import ember_np.envs  # noqa: F401  (``import ember_np`` does it too)
    env = gym.make("ember_np/CartPole-v1")
"""

from __future__ import annotations

import gymnasium as gym

from ember_np.envs.native import (
    NATIVE_ENVS,
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

for _env_id, _cls in NATIVE_ENVS.items():
    if _env_id not in gym.registry:
        # The time limit is the env's own (max_steps), so no TimeLimit wrapper.
        gym.register(id=_env_id, entry_point=f"{_cls.__module__}:{_cls.__name__}")
