"""Native environments and fused training: speed against the Python path.

Run with ``pytest bench -k native``. Steps/s are in each benchmark's
extra_info (``steps_per_s_median``); medians of the rounds.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from settings import S1

import ember_np.envs  # noqa: F401
from ember_np import DqnAgent, DqnTrainer
from ember_np.envs import NativeVecEnv, unwrap_native
from ember_np.envs import _dispatch as d


def _per_second(benchmark, steps: int) -> None:
    benchmark.extra_info["steps_per_round"] = steps
    benchmark.extra_info["steps_per_s_median"] = steps / benchmark.stats.stats.median


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "MountainCar-v0"])
def test_native_random_rollout(benchmark, env_id):
    """One native env, random actions, auto-reset, all in one compiled loop."""
    env = unwrap_native(gym.make(f"ember_np/{env_id}"))
    env.reset(seed=0)
    n = 2_000_000 if env_id != "Acrobot-v1" else 200_000
    args = (env.kernel_state, np.zeros(env.obs_size, np.float32), env.n_actions)
    d.random_rollout(*args, 10)
    benchmark.pedantic(d.random_rollout, args=(*args, n), rounds=5, iterations=1)
    _per_second(benchmark, n)


@pytest.mark.parametrize("kind", ["gymnasium", "native"])
def test_env_step_through_gym_api(benchmark, kind):
    """Per-step Python calls: gym.make('CartPole-v1') vs gym.make('ember_np/CartPole-v1')."""
    env = gym.make("CartPole-v1" if kind == "gymnasium" else "ember_np/CartPole-v1")
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, 10_000).tolist()

    def run() -> None:
        for a in actions:
            _, _, term, trunc, _ = env.step(a)
            if term or trunc:
                env.reset()

    benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    _per_second(benchmark, len(actions))


def test_native_step_batch(benchmark):
    """64 CartPole copies per compiled call."""
    vec = NativeVecEnv("CartPole-v1", 64, seed=0)
    vec.reset()
    actions = np.random.default_rng(0).integers(0, 2, (200, 64))

    def run() -> None:
        for row in actions:
            vec.step(row)

    benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    _per_second(benchmark, actions.size)


@pytest.mark.parametrize("train_freq", [1, 4], ids=["S1", "S1-train_freq4"])
@pytest.mark.parametrize("path", ["gymnasium", "native-python", "fused"])
def test_training_paths(benchmark, path, train_freq):
    """DqnTrainer.train at S1: gymnasium env, native env via Python, native env fused."""
    config = S1.replace(train_freq=train_freq)
    env = gym.make("CartPole-v1" if path == "gymnasium" else "ember_np/CartPole-v1")
    trainer = DqnTrainer(env, DqnAgent.for_env(env, config, seed=0), seed=0,
                         fused=None if path == "fused" else False)  # fmt: skip
    assert trainer.fused == (path == "fused")
    trainer.train(config.learning_starts)
    n = 10_000
    benchmark.pedantic(trainer.train, args=(n,), rounds=5, iterations=1, warmup_rounds=1)
    _per_second(benchmark, n)
