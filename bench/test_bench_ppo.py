"""PPO's whole update on one rollout (the RL Zoo's CartPole-v1 preset), ember_np against
torch, side by side; ``extra_info["flops"]`` is the update's floor FLOPs (``ppo_update.py``
says what both sides do and what the floor counts). And PPO's training loops on 8 native
CartPole envs with that preset: the compiled loop and the Python one, four rollouts a
round (``extra_info["env_steps"]``: divide by the time for env steps/s).

Run with ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m pytest bench -k ppo``
beside ``-k sgemm`` (the floor's unit); torch's side is skipped without torch.
"""

from __future__ import annotations

import pytest
from ppo_update import N_ACTIONS, OBS_SIZE, ZOO_CARTPOLE, ember_update, rollout_flops, torch_update

from ember_np import DqnTrainer
from ember_np.encoding import IndexActionMapper, encoder_for_space
from ember_np.envs import NativeVecEnv
from ember_np.ppo.agent import PPOAgent

#: Envs stepped together, and transitions per benchmark round (four rollouts of 32 steps).
N_ENVS = 8
ROUND = 4 * ZOO_CARTPOLE.n_steps * N_ENVS


@pytest.mark.parametrize("library", ["ember_np", "torch"])
def test_ppo_update_vs_torch(benchmark, library):
    """20 epochs of one 256-row minibatch: shuffle, forward, loss, backward, clip, Adam."""
    if library == "torch":
        pytest.importorskip("torch")
        update = torch_update(ZOO_CARTPOLE, OBS_SIZE, N_ACTIONS)
    else:
        update = ember_update(ZOO_CARTPOLE, OBS_SIZE, N_ACTIONS)
    assert update is not None
    update()  # compile / load, and torch's first-call costs, outside the timed region
    benchmark.extra_info.update(library=library,
                                flops=rollout_flops(ZOO_CARTPOLE, OBS_SIZE, N_ACTIONS))  # fmt: skip
    benchmark(update)


@pytest.mark.parametrize("loop", ["fused", "python"])
def test_ppo_training_loop(benchmark, loop):
    """Training on 8 native CartPole copies: env steps, rollout storage, GAE and every
    epoch of the update, in the compiled loop or through Python (warm: two rollouts
    first, outside the timed region)."""
    env = NativeVecEnv("CartPole-v1", N_ENVS)
    mapper = IndexActionMapper.for_space(env.action_space)
    agent = PPOAgent(encoder_for_space(env.observation_space), mapper, ZOO_CARTPOLE, seed=0)
    trainer = DqnTrainer(env, agent, seed=0, fused=loop == "fused")
    assert trainer.fused == (loop == "fused")
    trainer.train(2 * ZOO_CARTPOLE.n_steps * N_ENVS)  # compile / load
    benchmark.extra_info.update(loop=loop, env_steps=ROUND)
    benchmark(trainer.train, ROUND)
