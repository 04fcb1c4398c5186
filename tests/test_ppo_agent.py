"""PPOAgent: the trainer drives it as a plain loop over PPO's pieces would, it learns
CartPole, it is deterministic, and its checkpoints restore it exactly."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from ember_np import DqnAgent, DqnTrainer
from ember_np.checkpoint import CheckpointError
from ember_np.encoding import IndexActionMapper, encoder_for_space
from ember_np.ppo.agent import PPOAgent
from ember_np.ppo.config import PPOConfig
from ember_np.ppo.network import ActorCritic
from ember_np.ppo.normalize import VecNormalizer
from ember_np.ppo.rollout import RolloutBuffer
from ember_np.ppo.update import Rollout, update, update_settings
from ember_np.rng import Rng

#: Small rollouts, both normalisations, linear schedules: every path of a rollout.
SMALL = PPOConfig(n_steps=16, batch_size=24, n_epochs=3, learning_rate=3e-3,
                  lr_schedule="linear", clip_schedule="linear", normalize_obs=True,
                  normalize_reward=True, ent_coef=0.01, schedule_steps=400)  # fmt: skip
#: The RL Zoo's CartPole-v1 row of ppo.yml (rl-baselines3-zoo hyperparams/ppo.yml).
ZOO_CARTPOLE = PPOConfig(n_steps=32, batch_size=256, n_epochs=20, gamma=0.98,
                         gae_lambda=0.8, ent_coef=0.0, learning_rate=1e-3, lr_schedule="linear",
                         clip_range=0.2, clip_schedule="linear", schedule_steps=100_000)  # fmt: skip


def vector_env(n: int, max_steps: int = 30) -> gym.vector.VectorEnv:
    """CartPole copies whose episodes are cut at ``max_steps`` (truncations happen)."""
    return gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=max_steps) for _ in range(n)]
    )


def make_agent(env, config=SMALL, seed=0):  # noqa: ANN001, ANN201
    obs_space = getattr(env, "single_observation_space", env.observation_space)
    act_space = getattr(env, "single_action_space", env.action_space)
    return PPOAgent(encoder_for_space(obs_space), IndexActionMapper.for_space(act_space),
                    config, seed=seed)  # fmt: skip


def reference_params(config: PPOConfig, seed: int, n_envs: int, steps: int) -> np.ndarray:
    """PPO on ``vector_env(n_envs)`` (next-step autoreset) written as a plain loop over
    the network, the rollout buffer, the normaliser and the update."""
    env = vector_env(n_envs)
    init_rng, act_rng, update_rng = Rng.streams(seed, 3)
    net = ActorCritic(4, 2, config, init_rng)
    buf = RolloutBuffer(config.n_steps, n_envs, 4, 0, config.gamma, config.gae_lambda, "next")
    norm = VecNormalizer(4, n_envs, True, True, gamma=config.gamma)
    obs, _ = env.reset(seed=seed)
    x = norm.normalize_obs(obs.astype(np.float32))
    actions, logp, values = net.act(x, act_rng)
    ended = np.zeros(n_envs, bool)  # the next step of these envs is a reset row
    total = 0
    while total < steps:
        obs, rewards, terminated, truncated, _ = env.step(actions)
        moved = ~ended
        terminated, truncated = terminated & moved, truncated & moved & ~terminated
        r = norm.normalize_reward(np.where(moved, rewards, 0.0), terminated, truncated,
                                  skip=~moved)  # fmt: skip
        final = np.zeros(n_envs, np.float32)
        if truncated.any():  # next-step autoreset: obs is the real last observation
            final = net.act(norm.apply_obs(obs.astype(np.float32)), act_rng, True)[2]
        buf.store(x, actions, values, logp, r, terminated, truncated, final)
        total += int(moved.sum())
        done = terminated | truncated
        x_next = norm.normalize_obs(obs.astype(np.float32), ~done)
        if buf.full:
            buf.compute_gae(net.act(x_next, act_rng, True)[2])
            progress = max(1.0 - total / 400, 0.0)
            settings = update_settings(config, config.learning_rate_at(progress),
                                       config.clip_range_at(progress))  # fmt: skip
            f = buf.flat()
            update(net, Rollout(f.obs, f.actions, f.log_probs, f.advantages, f.returns,
                                f.values, f.valid), settings, update_rng)  # fmt: skip
            buf.reset()
        new_actions, new_logp, new_values = net.act(x_next, act_rng)
        # a reset row acts on its first observation, a continuing one on its next; an
        # env that just ended ignores its action (its next step is its reset row)
        acting = ended | (moved & ~done)
        x = np.where(acting[:, None], x_next, x)
        logp, values = np.where(acting, new_logp, logp), np.where(acting, new_values, values)
        actions = np.where(acting, new_actions, 0)
        ended = moved & done
    return net.params.copy()


def test_the_trainer_drives_the_agent_as_the_plain_loop_does():
    """Over 3 envs with truncations and resets, both normalisations and linear
    schedules, the trainer's vector driver and the plain loop end with the same weights."""
    env = vector_env(3)
    agent = make_agent(env, seed=4)
    DqnTrainer(env, agent, seed=4).train(300)
    assert agent.n_updates > 0 and agent.total_steps >= 300
    expected = reference_params(SMALL, 4, 3, agent.total_steps)
    np.testing.assert_array_equal(agent.net.params, expected)


def test_the_same_seed_trains_the_same_weights_and_another_seed_others():
    runs = []
    for seed in (1, 1, 2):
        env = vector_env(2)
        agent = make_agent(env, seed=seed)
        DqnTrainer(env, agent, seed=seed).train(200)
        runs.append(agent.net.params.copy())
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])


def test_one_env_counts_rollouts_and_epochs_as_sb3():
    """The trainer's one-env path: an update after every n_steps transitions, each of
    n_epochs epochs (SB3's n_updates), truncated episodes included."""
    env = gym.make("CartPole-v1", max_episode_steps=25)
    agent = make_agent(env, SMALL.replace(normalize_obs=False, normalize_reward=False))
    DqnTrainer(env, agent, seed=0).train(5 * SMALL.n_steps + 3)
    assert agent.total_steps == 5 * SMALL.n_steps + 3
    assert agent.n_updates == 5 * SMALL.n_epochs
    assert np.isfinite(agent.last_loss) and set(agent.last_stats) >= {"approx_kl", "clip_fraction"}


def test_a_checkpoint_round_trip_continues_identically(tmp_path):
    """Saved mid-rollout and restored, an agent given the same steps as the original
    picks the same actions and ends with the same weights, Adam state and statistics."""
    env = vector_env(2)
    agent = make_agent(env)
    DqnTrainer(env, agent, seed=3).train(37)  # stops mid-rollout
    assert 0 < agent.buffer.pos < SMALL.n_steps
    path = agent.save(tmp_path / "ppo.npz")
    restored = PPOAgent.from_checkpoint(path)
    rng = np.random.default_rng(0)
    taken = np.zeros(2, np.int64)
    for _ in range(3 * SMALL.n_steps):  # the same steps to both
        steps = [a.new_vec_step(2) for a in (agent, restored)]
        obs = rng.standard_normal((2, 4)).astype(np.float32)
        codes = rng.choice([0, 0, 0, 1, 2], size=2)
        for a, s in zip((agent, restored), steps, strict=True):
            s.actions[:] = taken
            s.rewards[:] = 1.0
            s.next_obs[:] = obs
            s.act_obs[:] = obs
            s.statuses[:] = codes
            a.observe_vector(s)
        np.testing.assert_array_equal(steps[0].next_actions, steps[1].next_actions)
        taken = steps[0].next_actions.copy()
    assert agent.n_updates == restored.n_updates > 0
    np.testing.assert_array_equal(agent.net.params, restored.net.params)
    np.testing.assert_array_equal(agent.net.adam_v, restored.net.adam_v)
    for key, value in agent.normalizer.state_arrays().items():
        np.testing.assert_array_equal(value, restored.normalizer.state_arrays()[key])


def test_a_ppo_checkpoint_is_refused_as_dqn_naming_both(tmp_path):
    env = gym.make("CartPole-v1")
    path = make_agent(env).save(tmp_path / "ppo.npz")
    with pytest.raises(CheckpointError, match="ember_np.ppo"):
        DqnAgent.from_checkpoint(path)


def test_linear_schedules_need_the_run_length():
    with pytest.raises(ValueError, match="schedule_steps"):
        SMALL.replace(schedule_steps=None)
    for bad in (0, -5, 2.5, "100"):
        with pytest.raises(ValueError, match="schedule_steps"):
            SMALL.replace(schedule_steps=bad)
    constant = SMALL.replace(lr_schedule="constant", clip_schedule="constant", schedule_steps=None)
    assert constant.progress_remaining(10**9) == 1.0
    assert SMALL.progress_remaining(100) == 0.75 and SMALL.progress_remaining(800) == 0.0


def test_a_rollout_of_one_transition_is_refused_with_advantage_normalisation():
    env = gym.make("CartPole-v1")
    with pytest.raises(ValueError, match="n_steps=1 x 1 env"):
        make_agent(env, SMALL.replace(n_steps=1))
    make_agent(env, SMALL.replace(n_steps=1, normalize_advantage=False))


def test_the_zoo_preset_solves_cartpole_in_100k_steps():
    """The RL Zoo's CartPole-v1 settings (8 envs, 100k steps), one seed: the greedy
    policy's mean return over 20 episodes is at least 475 (500 is the cap)."""
    env = gym.make_vec("CartPole-v1", num_envs=8, vectorization_mode="sync")
    agent = make_agent(env, ZOO_CARTPOLE, seed=0)
    trainer = DqnTrainer(env, agent, seed=0, eval_env=gym.make("CartPole-v1"))
    trainer.train(100_000)
    report = trainer.eval(20)
    assert report.mean_reward >= 475, report


_PPO_ONLY = """
import sys
import gymnasium as gym
from numba.core.registry import CPUDispatcher
from ember_np import DqnTrainer
from ember_np.encoding import IndexActionMapper, encoder_for_space
from ember_np.ppo.agent import PPOAgent
from ember_np.ppo.config import PPOConfig

env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
agent = PPOAgent(encoder_for_space(env.single_observation_space),
                 IndexActionMapper.for_space(env.single_action_space),
                 PPOConfig(n_steps=16, batch_size=16, n_epochs=2), seed=0)
DqnTrainer(env, agent, seed=0).train(100)
used = sorted({f"{d.py_func.__module__}.{d.py_func.__qualname__}"  # where it is defined
               for name, module in list(sys.modules.items()) if name.startswith("ember_np.")
               for d in vars(module).values() if isinstance(d, CPUDispatcher) and d.overloads})
print(agent.n_updates, " ".join(used))
"""


def test_a_ppo_run_compiles_no_dqn_kernel():
    """A PPO run compiles (or loads) PPO's kernels and the shared network ones, and not
    one of DQN's (checked in a process of its own: every kernel it holds code for)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _PPO_ONLY], capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    updates, *used = out.stdout.strip().splitlines()[-1].split(" ")
    assert int(updates) > 0
    assert any(name.startswith("ember_np.ppo.") for name in used), used
    assert not [name for name in used if name.startswith("ember_np.dqn.")], used


def test_a_new_autoreset_mode_keeps_the_statistics_and_never_drops_a_rollout():
    """Switching the autoreset mode takes a new rollout buffer but keeps the normaliser's
    statistics; with steps stored it is refused (they would be lost), as is resizing."""
    env = vector_env(2)
    agent = make_agent(env)
    DqnTrainer(env, agent, seed=3).train(37)  # next-step autoreset, mid-rollout
    stats = agent.normalizer.state_arrays()
    with pytest.raises(ValueError, match="finish the rollout first"):
        agent.set_autoreset_mode("same")
    with pytest.raises(ValueError, match="finish the rollout first"):
        agent.set_num_envs(3)
    assert agent.buffer.pos > 0  # nothing was dropped
    agent.buffer.reset()
    agent.set_autoreset_mode("same")
    assert agent.buffer.arrays.next_step is False
    for key, value in stats.items():
        np.testing.assert_array_equal(agent.normalizer.state_arrays()[key], value)


# -- action masks ------------------------------------------------------------------------

MASKED = SMALL.replace(action_masks=True, normalize_obs=False, normalize_reward=False)


class LegalOnly(gym.Wrapper):
    """Taxi whose step fails on an action its last ``info["action_mask"]`` forbade."""

    def reset(self, **kwargs):  # noqa: ANN003, ANN201
        obs, info = self.env.reset(**kwargs)
        self.mask = info["action_mask"]
        return obs, info

    def step(self, action):  # noqa: ANN001, ANN201
        assert self.mask[action], f"illegal action {action} (mask {self.mask})"
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.mask = info["action_mask"]
        return obs, reward, terminated, truncated, info


def taxi(n: int | None = None) -> gym.Env:
    make = lambda: LegalOnly(gym.make("Taxi-v4", max_episode_steps=40))  # noqa: E731
    return make() if n is None else gym.vector.SyncVectorEnv([make] * n)


@pytest.mark.parametrize("n", [None, 3])
def test_with_masks_every_action_is_legal_and_the_update_sees_the_masks(n):
    env = taxi(n)
    agent = PPOAgent.for_env(env, MASKED, seed=1)
    assert agent.action_masks
    trainer = DqnTrainer(env, agent, seed=0, eval_env=taxi())
    trainer.train(300)  # the wrapper fails on any illegal action, greedy or sampled
    trainer.eval(2)
    assert agent.n_updates > 0
    buf = agent.buffer.arrays
    assert buf.masks.shape[2] == 6 and not buf.masks[: agent.buffer.pos].all()  # real masks
    # what the update would do without them differs: the masks reached it
    unmasked = PPOAgent.for_env(env, MASKED.replace(action_masks=False), seed=1)
    assert not unmasked.action_masks
    with pytest.raises(ValueError, match="action_masks=true"):
        unmasked.new_vec_step(2, masks=True)


def test_a_checkpoint_with_masks_continues_identically(tmp_path):
    env = taxi(2)
    agent = PPOAgent.for_env(env, MASKED, seed=2)
    DqnTrainer(env, agent, seed=3).train(37)
    assert 0 < agent.buffer.pos < MASKED.n_steps
    restored = PPOAgent.from_checkpoint(agent.save(tmp_path / "ppo.npz"))
    for a in (agent, restored):
        DqnTrainer(taxi(2), a, seed=9).train(3 * MASKED.n_steps * 2)
    np.testing.assert_array_equal(agent.net.params, restored.net.params)
    np.testing.assert_array_equal(agent.buffer.arrays.masks, restored.buffer.arrays.masks)


def test_the_policy_takes_the_argmax_over_the_legal_actions(tmp_path):
    from ember_np.ppo.policy import PPOPolicy

    env = taxi(2)
    agent = PPOAgent.for_env(env, MASKED, seed=4)
    DqnTrainer(env, agent, seed=0).train(200)
    policy = PPOPolicy.load(agent.save(tmp_path / "ppo.npz"))
    assert policy.action_masks
    obs = np.arange(0, 500, 7)
    masks = np.random.default_rng(0).random((obs.size, 6)) < 0.5
    masks[np.arange(obs.size), np.arange(obs.size) % 6] = True  # one legal action at least
    logits = policy.logits_batch(np.eye(500, dtype=np.float32)[obs])
    expected = np.argmax(np.where(masks, logits, -np.inf), axis=1)
    np.testing.assert_array_equal(policy.act_batch(obs, masks), expected)
    assert policy.act(int(obs[3]), masks[3]) == expected[3]
    with pytest.raises(ValueError, match="allows no action"):
        policy.act(0, np.zeros(6, np.int8))


def test_one_env_normalises_on_the_observations_it_acts_on_as_sb3():
    """SB3's VecNormalize updates its statistics with each observation the policy acts
    on: the first, each next one, each reset; never an episode's terminal one."""
    env = gym.make("CartPole-v1", max_episode_steps=30)
    agent = make_agent(env, SMALL.replace(normalize_reward=False))
    trainer = DqnTrainer(env, agent, seed=0)
    trainer.train(200)
    assert trainer.episode > 5  # episodes ended, each with a terminal observation
    obs_count = agent.normalizer.state_arrays()["counts"][0]
    assert obs_count == pytest.approx(1e-4 + agent.total_steps + 1, abs=1e-9)
