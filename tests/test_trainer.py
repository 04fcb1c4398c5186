"""DqnTrainer: step iterator, train/eval, run bookkeeping, fixed defects, learning."""

from __future__ import annotations

import itertools
import json

import gymnasium as gym
import numpy as np
import pytest

from ember_np import (
    DqnAgent,
    DqnPolicy,
    DqnTrainer,
    EpisodeStatus,
    RollingMean,
    StatsTracker,
    StepMetrics,
    TrainingRun,
)
from ember_np.presets import get_preset

#: ember-rl's CartPole config (S1 of the speed comparisons; checked in test_presets.py).
S1 = get_preset("ember").config

FAST = S1.replace(hidden_sizes=(16,), min_replay_size=64, batch_size=16, epsilon_decay_steps=500)


def make_trainer(seed=0, config=FAST, **kw):
    env = gym.make("CartPole-v1")
    agent = DqnAgent.for_env(env, config, seed=seed)
    return DqnTrainer(env, agent, seed=seed, **kw)


def test_steps_yields_metrics_with_episode_bookkeeping():
    trainer = make_trainer()
    metrics = list(itertools.islice(trainer.steps(), 300))
    assert all(isinstance(m, StepMetrics) for m in metrics)
    assert [m.total_steps for m in metrics] == list(range(1, 301))
    episode, step, reward = 0, 0, 0.0
    for m in metrics:
        step += 1
        reward += m.reward
        assert (m.episode, m.episode_step, m.episode_reward) == (episode, step, reward)
        assert m.epsilon == FAST.epsilon_at(m.total_steps - 1)
        assert m.episode_done == (m.episode_status is not EpisodeStatus.CONTINUING)
        if m.episode_done:
            episode, step, reward = episode + 1, 0, 0.0
    assert episode >= 5  # random CartPole episodes are short
    assert not metrics[62].did_update and metrics[63].did_update  # learning starts at 64
    assert trainer.stats.summary()["episode_length"] > 0


def test_same_seeds_give_identical_metric_streams():
    a = list(itertools.islice(make_trainer(seed=7).steps(), 1500))
    b = list(itertools.islice(make_trainer(seed=7).steps(), 1500))
    c = list(itertools.islice(make_trainer(seed=8).steps(), 1500))
    assert a == b
    assert a != c
    assert sum(m.did_update for m in a) > 1000


class WithoutLastLoss(DqnAgent):
    """An agent without ``last_loss``, which LearningAgent names."""

    @property
    def last_loss(self):
        raise AttributeError("last_loss")


class NoLoss(DqnAgent):
    """An agent with no loss to report (``last_loss`` NaN)."""

    @property
    def last_loss(self):
        return float("nan")


def test_the_trainer_reads_the_loss_through_learning_agent(tmp_path):
    """The trainer uses an agent through LearningAgent only, which names ``last_loss``:
    an agent without it is refused, naming it; a NaN loss leaves ``loss`` out of the
    episodes' log rows."""
    env = gym.make("CartPole-v1")
    with pytest.raises(ValueError, match=r"implement LearningAgent.*'last_loss'"):
        DqnTrainer(env, WithoutLastLoss.for_env(env, FAST), seed=0)
    agent = NoLoss.for_env(env, FAST)
    trainer = DqnTrainer(env, agent, seed=0, run=TrainingRun.create("r", "v", root=tmp_path))
    metrics = list(itertools.islice(trainer.steps(), 300))
    assert sum(m.episode_done for m in metrics) >= 5 and agent.n_updates > 0
    rows = trainer.run.read_train_episodes()
    assert len(rows) >= 5 and all(set(r["extras"]) == {"epsilon"} for r in rows)


class RecordingEnv(gym.Wrapper):
    def __init__(self, env):
        super().__init__(env)
        self.reset_seeds = []

    def reset(self, *, seed=None, options=None):
        self.reset_seeds.append(seed)
        return self.env.reset(seed=seed, options=options)


def test_first_reset_uses_the_trainer_seed_not_zero():
    env = RecordingEnv(gym.make("CartPole-v1"))
    trainer = DqnTrainer(env, DqnAgent.for_env(env, FAST), seed=1234)
    trainer.train(200)
    assert env.reset_seeds[0] == 1234
    assert all(s is None for s in env.reset_seeds[1:]) and len(env.reset_seeds) > 2
    first_obs, _ = gym.make("CartPole-v1").reset(seed=1234)
    trainer2 = make_trainer(seed=1234)
    m = next(trainer2.steps())
    assert m.total_steps == 1
    np.testing.assert_array_equal(trainer2.agent.buffer.storage[0]["obs"], first_obs)


def test_eval_runs_on_a_separate_env_and_leaves_training_unaffected():
    a, b = make_trainer(seed=3), make_trainer(seed=3)
    a_metrics = list(itertools.islice(a.steps(), 400))
    report = a.eval(3)
    assert report.n_episodes == 3 and report.total_steps == 400
    assert a.agent.total_steps == 400
    a_metrics += list(itertools.islice(a.steps(), 400))
    b_metrics = list(itertools.islice(b.steps(), 800))
    assert a_metrics == b_metrics
    assert np.array_equal(a.agent.online.params, b.agent.online.params)


def test_eval_env_defaults_to_spec_and_needs_one_otherwise():
    trainer = make_trainer()
    trainer.eval(1)
    assert trainer.eval_env is not trainer.env
    assert trainer.eval_env.spec.id == "CartPole-v1"
    env = gym.make("CartPole-v1").unwrapped  # no spec
    env.spec = None
    bare = DqnTrainer(env, DqnAgent.for_env(env, FAST))
    with pytest.raises(ValueError, match="pass DqnTrainer\\(..., eval_env=...\\)"):
        bare.eval(1)


def test_eval_is_greedy_and_reproducible():
    a, b = make_trainer(seed=5), make_trainer(seed=5)
    a.train(500)
    b.train(500)
    assert a.eval(3) == b.eval(3)


def test_run_bookkeeping_checkpoints_logs_metadata(tmp_path):
    run = TrainingRun.create("cartpole", "v1", root=tmp_path)
    trainer = make_trainer(run=run, checkpoint_freq=100, keep_checkpoints=3)
    trainer.train(750)
    steps = [s for s, _ in run.step_checkpoints()]
    assert steps == [500, 600, 700]
    assert run.latest_checkpoint_path().exists()
    meta = json.loads((run.dir / "metadata.json").read_text())
    assert meta["total_steps"] == 750 and meta["total_episodes"] == trainer.episode
    rows = run.read_train_episodes()
    assert len(rows) == trainer.episode
    assert [r["episode"] for r in rows] == list(range(trainer.episode))
    assert sum(r["length"] for r in rows) == rows[-1]["total_steps"] <= 750
    # train() ended between checkpoints: latest.npz is brought up to date
    latest = DqnAgent.from_checkpoint(run.latest_checkpoint_path())
    assert latest.total_steps == 750 and len(latest.buffer) == 750


def test_iterator_does_the_same_bookkeeping_as_train(tmp_path):
    run_a = TrainingRun.create("a", "v1", root=tmp_path)
    run_b = TrainingRun.create("b", "v1", root=tmp_path)
    ta = make_trainer(run=run_a, checkpoint_freq=100, keep_checkpoints=2)
    tb = make_trainer(run=run_b, checkpoint_freq=100, keep_checkpoints=2)
    ta.train(450)
    for _ in itertools.islice(tb.steps(), 450):
        pass
    assert (
        [s for s, _ in run_a.step_checkpoints()]
        == [s for s, _ in run_b.step_checkpoints()]
        == [300, 400]
    )
    assert run_a.read_train_episodes() == run_b.read_train_episodes()
    assert ta.stats.summary() == tb.stats.summary()


def set_policy(agent, kind):
    """Hand-set the 4-16-2 network: "left" always pushes left; "balance" pushes
    towards the pole's fall (right iff angle + angular velocity > 0)."""
    net = agent.online
    for w, b in zip(net.weights, net.biases):
        w[...] = 0.0
        b[...] = 0.0
    if kind == "left":
        net.biases[1][:] = [1.0, 0.0]
    else:
        net.weights[0][2:, 0] = 1.0  # h0 = relu(angle + angular velocity)
        net.weights[0][2:, 1] = -1.0  # h1 = relu(-(angle + angular velocity))
        net.weights[1][0, 1] = 1.0  # Q(right) = h0
        net.weights[1][1, 0] = 1.0  # Q(left) = h1


def test_eval_logs_and_saves_best_only_on_improvement(tmp_path):
    run = TrainingRun.create("a", "v1", root=tmp_path)
    trainer = make_trainer(run=run)
    trainer.train(200)
    best = run.best_checkpoint_path()
    set_policy(trainer.agent, "left")
    bad = trainer.eval(2)
    assert best.exists() and trainer.best_eval_reward == bad.mean_reward
    set_policy(trainer.agent, "balance")
    good = trainer.eval(2)
    assert good.mean_reward > 3 * bad.mean_reward
    saved = best.read_bytes()
    assert DqnPolicy.load(best).act(np.array([0, 0, 0.1, 0.1])) == 1
    set_policy(trainer.agent, "left")
    trainer.eval(2)
    assert best.read_bytes() == saved  # not overwritten by a worse policy
    rows = run.read_eval_episodes()
    assert len(rows) == 6 and {r["total_steps_at_eval"] for r in rows} == {200}
    meta = json.loads((run.dir / "metadata.json").read_text())
    assert meta["best_eval_reward"] == good.mean_reward == trainer.best_eval_reward


def test_resuming_a_run_continues_steps_episodes_and_epsilon(tmp_path):
    run = TrainingRun.create("a", "v1", root=tmp_path)
    trainer = make_trainer(run=run, checkpoint_freq=250)
    trainer.train(500)
    episodes = trainer.episode
    resumed_run = TrainingRun.resume(run.dir)
    agent = DqnAgent.from_checkpoint(resumed_run.latest_checkpoint_path())
    resumed = DqnTrainer(
        gym.make("CartPole-v1"), agent, seed=1, run=resumed_run, checkpoint_freq=250
    )
    m = next(resumed.steps())
    assert m.total_steps == 501 and m.episode == episodes
    assert m.epsilon == FAST.epsilon_at(500)
    resumed.train(249)
    assert [s for s, _ in resumed_run.step_checkpoints()] == [250, 500, 750]
    rows = resumed_run.read_train_episodes()
    assert [r["episode"] for r in rows] == list(range(len(rows)))


def test_custom_stats_tracker():
    stats = StatsTracker().add("recent", "reward", RollingMean(5))
    trainer = make_trainer(stats=stats)
    trainer.train(300)
    assert trainer.stats is stats and np.isfinite(stats.summary()["recent"])


def test_constructor_validation():
    env = gym.make("CartPole-v1")
    agent = DqnAgent.for_env(env, FAST)
    with pytest.raises(ValueError, match="checkpoint_freq must be a positive integer, got 0"):
        DqnTrainer(env, agent, checkpoint_freq=0)
    with pytest.raises(ValueError, match="agent must be a DqnAgent"):
        DqnTrainer(env, object())
    with pytest.raises(ValueError, match="gymnasium's Env API"):
        DqnTrainer(object(), agent)
    with pytest.raises(ValueError, match="checkpoint\\(\\) needs a TrainingRun"):
        DqnTrainer(env, agent).checkpoint()


def test_into_agent_and_accessors():
    trainer = make_trainer()
    assert trainer.into_agent() is trainer.agent and trainer.env.spec.id == "CartPole-v1"


def test_learns_cartpole_with_ember_rl_config(tmp_path):
    """S1 (ember-rl's CartPole config): greedy eval far above a random policy's ~22.

    DQN with this config oscillates (a 500 one eval, 100 the next), so the
    test keeps the best periodic evaluation, as ``best.npz`` does.
    """
    run = TrainingRun.create("cartpole", "s1", root=tmp_path)
    trainer = make_trainer(seed=0, config=S1, run=run, checkpoint_freq=10_000)
    for _ in range(5):
        trainer.train(10_000)
        trainer.eval(10)
    assert trainer.best_eval_reward >= 200
    # best.npz holds that policy: re-evaluating it on the same episodes agrees
    policy = DqnPolicy.load(run.best_checkpoint_path())
    env = gym.make("CartPole-v1")
    returns = []
    for episode in range(10):
        obs, _ = env.reset(seed=100 + episode)
        total, done = 0.0, False
        while not done:
            obs, r, term, trunc, _ = env.step(policy.act(obs))
            total += r
            done = term or trunc
        returns.append(total)
    assert np.mean(returns) >= 150, returns
    # and the latest checkpoint acts exactly like the agent
    latest = DqnPolicy.load(run.latest_checkpoint_path())
    xs = np.random.default_rng(0).uniform(-0.2, 0.2, (100, 4))
    assert [latest.act(x) for x in xs] == [trainer.agent.act(x) for x in xs]
