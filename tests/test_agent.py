"""DqnAgent: acting, observe semantics, streams, custom parts, checkpoints."""

from __future__ import annotations

from functools import partial

import gymnasium as gym
import helpers
import naive
import numpy as np
import pytest
from gymnasium import spaces

from ember_np import (
    Batch,
    CheckpointError,
    DqnAgent,
    DqnConfig,
    DqnPolicy,
    EpisodeStatus,
    Experience,
    IndexActionMapper,
    Rng,
    VecEncoder,
)

SMALL = helpers.TWO_LAYER


make_agent = partial(helpers.make_agent, config=SMALL)


def feed(agent, n, seed=0, start=0):
    """Observe ``n`` synthetic transitions; returns the did_update flags."""
    data = np.random.default_rng(seed)
    flags = []
    for i in range(start, start + n):
        obs = data.standard_normal(3).astype(np.float32)
        status = EpisodeStatus.TERMINATED if i % 7 == 6 else EpisodeStatus.CONTINUING
        exp = Experience(
            obs, int(data.integers(2)), float(data.standard_normal()), obs * 0.9, status
        )
        flags.append(agent.observe(exp))
    return flags


def test_for_env_builds_network_from_spaces():
    agent = DqnAgent.for_env(gym.make("CartPole-v1"), DqnConfig(hidden_sizes=(32,)), seed=3)
    assert agent.online.layer_sizes == (4, 32, 2)
    assert agent.buffer.capacity == 100_000
    assert np.array_equal(agent.online.params, agent.target.params)


def test_act_is_greedy_argmax():
    agent = make_agent()
    for x in np.random.default_rng(0).standard_normal((20, 3)):
        assert agent.act(x) == int(np.argmax(agent.online.forward(x)))


def test_epsilon_greedy_extremes_and_uniformity():
    agent = make_agent(config=DqnConfig(**{**SMALL.to_dict(), "epsilon_start": 1.0, "epsilon_end": 1.0,
                                    "hidden_sizes": (16, 16)}))  # fmt: skip
    x = np.zeros(3, np.float32)
    draws = [agent.act_epsilon_greedy(x) for _ in range(4000)]
    assert naive.chi_square_pvalue(np.bincount(draws, minlength=2)) > 1e-3
    greedy = make_agent(config=SMALL.replace(epsilon_start=0.0, epsilon_end=0.0))
    assert all(greedy.act_epsilon_greedy(x) == greedy.act(x) for _ in range(50))


def test_epsilon_greedy_with_explicit_rng_is_reproducible():
    agent = make_agent()
    x = np.zeros(3, np.float32)
    a = [agent.act_epsilon_greedy(x, Rng(5)) for _ in range(20)]
    b = [agent.act_epsilon_greedy(x, Rng(5)) for _ in range(20)]
    assert a == b
    before = agent.exploration_rng.state.copy()
    agent.act_epsilon_greedy(x, Rng(1))
    assert np.array_equal(before, agent.exploration_rng.state)  # own stream untouched


def test_epsilon_follows_schedule_with_total_steps():
    agent = make_agent()
    assert agent.epsilon == SMALL.epsilon_at(0) == 1.0
    feed(agent, 50)
    assert agent.total_steps == 50 and agent.epsilon == pytest.approx(SMALL.epsilon_at(50))
    agent.set_total_steps(1000)
    assert agent.epsilon == SMALL.epsilon_end
    with pytest.raises(ValueError, match="total_steps must be an integer >= 0"):
        agent.set_total_steps(-1)


def test_training_starts_at_learning_starts_and_syncs_target_on_schedule():
    agent = make_agent()
    target_changes = []
    previous = agent.target.params.copy()
    flags = []
    for step in range(1, 61):
        flags += feed(agent, 1, seed=step, start=step)
        if not np.array_equal(previous, agent.target.params):
            target_changes.append(step)
            previous = agent.target.params.copy()
    # learning_starts = max(batch 8, min_replay 20): first update at step 20
    assert flags.index(True) == 19 and all(flags[19:])
    assert agent.n_updates == 41
    # the target moves only at multiples of target_update_freq; at step 20 the sync
    # happens before the first update (SB3's order), so it copies unchanged weights
    assert target_changes == [30, 40, 50, 60]


@pytest.mark.parametrize(
    "train_freq, gradient_steps, expected", [(4, 1, 10), (4, 3, 30), (4, -1, 40), (5, -1, 40)]
)
def test_train_freq_and_gradient_steps(train_freq, gradient_steps, expected):
    config = SMALL.replace(train_freq=train_freq, gradient_steps=gradient_steps, min_replay_size=8)
    agent = make_agent(config=config)
    flags = feed(agent, 47)  # training possible from step 8; steps 8..47
    assert sum(flags) == len([t for t in range(8, 48) if t % train_freq == 0])
    assert agent.n_updates == expected


def test_soft_target_update():
    agent = make_agent(config=SMALL.replace(tau=0.25, target_update_freq=30))
    feed(agent, 29)
    old_target = agent.target.params.astype(np.float64)
    online = agent.online.params.astype(np.float64)
    feed(agent, 1, start=29)  # step 30: sync first, then train
    # the online net trained after the sync, so compare with the pre-step online weights
    np.testing.assert_allclose(
        agent.target.params, 0.25 * online + 0.75 * old_target, rtol=1e-5, atol=1e-6
    )


def test_exploration_does_not_disturb_replay_stream():
    a, b = make_agent(seed=4), make_agent(seed=4)
    x = np.zeros(3, np.float32)
    for _ in range(37):
        b.act_epsilon_greedy(x)
    feed(a, 60)
    feed(b, 60)
    assert np.array_equal(a.online.params, b.online.params)


def test_same_seed_same_weights_different_seed_different():
    a, b, c = make_agent(seed=1), make_agent(seed=1), make_agent(seed=2)
    for agent in (a, b, c):
        feed(agent, 80)
    assert np.array_equal(a.online.params, b.online.params)
    assert not np.array_equal(a.online.params, c.online.params)


def test_observe_rejects_bad_input_and_stores_nothing():
    agent = make_agent()
    feed(agent, 5)
    with pytest.raises(ValueError, match=r"expected an observation of shape \(3,\), got \(4,\)"):
        agent.observe(Experience(np.zeros(4), 0, 0.0, np.zeros(3), EpisodeStatus.CONTINUING))
    with pytest.raises(ValueError, match=r"action must be in \[0, 2\), got 2"):
        agent.observe(Experience(np.zeros(3), 2, 0.0, np.zeros(3), EpisodeStatus.CONTINUING))
    with pytest.raises(ValueError, match="reward must be finite"):
        agent.observe(
            Experience(np.zeros(3), 1, float("inf"), np.zeros(3), EpisodeStatus.CONTINUING)
        )
    with pytest.raises(ValueError, match="obs must be finite"):
        agent.observe(Experience(np.full(3, np.nan), 1, 0.0, np.zeros(3), EpisodeStatus.CONTINUING))
    assert len(agent.buffer) == 5 and agent.total_steps == 5


class ListBuffer:
    """A minimal custom ReplayBuffer: a Python list, uniform sampling with an Rng."""

    def __init__(self, capacity):
        self._capacity = capacity
        self.items = []
        self.pushes = 0

    def __len__(self):
        return len(self.items)

    @property
    def capacity(self):
        return self._capacity

    def ready_for(self, batch_size):
        return len(self.items) >= batch_size

    def push(self, obs, action, reward, next_obs, status):
        self.pushes += 1
        self.items.append((obs.copy(), action, reward, next_obs.copy(), status))
        del self.items[: -self._capacity]

    def sample(self, batch_size, rng):
        idx = rng.integers(len(self.items), batch_size)
        rows = [self.items[i] for i in idx]
        return Batch(
            np.stack([r[0] for r in rows]),
            np.array([r[1] for r in rows]),
            np.array([r[2] for r in rows], np.float32),
            np.stack([r[3] for r in rows]),
            np.array([0.0 if r[4] == EpisodeStatus.TERMINATED else 1.0 for r in rows], np.float32),
        )


def test_custom_buffer_plugs_in():
    buf = ListBuffer(100)
    agent = make_agent(buffer=buf)
    flags = feed(agent, 40)
    assert buf.pushes == 40 and agent.buffer is buf
    assert sum(flags) == 21 and agent.n_updates == 21
    assert np.isfinite(agent.last_loss)
    with pytest.raises(ValueError, match="has no state_dict"):
        agent.save("unused.npz", include_buffer=True)


class TwiceEncoder:
    """A custom encoder: observations are scalars, encoded as (x, 2x, x^2)."""

    obs_size = 3

    def encode(self, obs):
        x = float(obs)
        return np.array([x, 2 * x, x * x], np.float32)

    def encode_batch(self, obs_batch):
        return np.stack([self.encode(o) for o in obs_batch])


def test_custom_encoder_and_mapper_with_offset_actions():
    agent = DqnAgent(TwiceEncoder(), IndexActionMapper(3, start=10), SMALL, seed=0)
    assert agent.act(0.5) in (10, 11, 12)
    for i in range(30):
        agent.observe(Experience(i * 0.1, 10 + i % 3, 1.0, i * 0.1 + 0.1, EpisodeStatus.CONTINUING))
    assert agent.n_updates == 11
    assert set(agent.buffer.storage["action"][:30].tolist()) == {0, 1, 2}


# -- checkpoints ---------------------------------------------------------------------


def test_save_writes_documented_keys_without_pickle(tmp_path):
    agent = make_agent()
    feed(agent, 40)
    path = agent.save(tmp_path / "agent")
    assert path.name == "agent.npz"
    with np.load(path, allow_pickle=False) as z:
        keys = set(z.files)
        assert all(z[k].dtype != object for k in keys)
    expected = {"format", "format_version", "config", "encoder", "action_mapper", "seed",
                "counters", "rng/explore", "rng/replay", "online/layer_sizes", "online/w0",
                "online/b2", "online/adam_m", "online/adam_v", "online/adam_t", "target/w0",
                "target/b2"}  # fmt: skip
    assert expected <= keys
    assert not any(k.startswith("buffer/") for k in keys)
    agent.save(tmp_path / "with_buffer.npz", include_buffer=True)
    with np.load(tmp_path / "with_buffer.npz", allow_pickle=False) as z:
        assert {"buffer/obs", "buffer/action", "buffer/cursor"} <= set(z.files)


def assert_same_agent(a, b, buffers=True):
    assert np.array_equal(a.online.params, b.online.params)
    assert np.array_equal(a.target.params, b.target.params)
    sa, sb = a.online.state_dict(), b.online.state_dict()
    assert np.array_equal(sa["adam_m"], sb["adam_m"])
    assert np.array_equal(sa["adam_v"], sb["adam_v"])
    assert a.online.adam_step == b.online.adam_step
    assert (a.total_steps, a.n_updates) == (b.total_steps, b.n_updates)
    assert np.array_equal(a.exploration_rng.state, b.exploration_rng.state)
    assert np.array_equal(a.replay_rng.state, b.replay_rng.state)
    if buffers:
        assert a.buffer.storage.tobytes() == b.buffer.storage.tobytes()
        assert (len(a.buffer), a.buffer.position) == (len(b.buffer), b.buffer.position)


def test_load_and_from_checkpoint_restore_everything(tmp_path):
    agent = make_agent(seed=3)
    feed(agent, 250)  # wraps the 200-slot buffer
    path = agent.save(tmp_path / "a.npz", include_buffer=True)
    loaded = make_agent(seed=99).load(path)
    assert_same_agent(agent, loaded)
    rebuilt = DqnAgent.from_checkpoint(path)
    assert rebuilt.config == agent.config
    assert_same_agent(agent, rebuilt)
    # and they keep going identically
    for other in (loaded, rebuilt):
        feed(other, 30, seed=9, start=250)
    feed(agent, 30, seed=9, start=250)
    assert_same_agent(agent, loaded)
    assert_same_agent(agent, rebuilt)


def test_load_without_buffer_keeps_current_buffer(tmp_path):
    agent = make_agent()
    feed(agent, 30)
    path = agent.save(tmp_path / "a.npz")
    other = make_agent(seed=5)
    feed(other, 3)
    other.load(path)
    assert len(other.buffer) == 3
    assert_same_agent(agent, other, buffers=False)


def test_architecture_mismatch_names_shapes_and_changes_nothing(tmp_path):
    path = make_agent().save(tmp_path / "a.npz")
    other = DqnAgent(VecEncoder(3), IndexActionMapper(2), SMALL.replace(hidden_sizes=(16, 8)), 0)
    before = other.online.params.copy()
    message = (
        r"a.npz: architecture mismatch: this agent has "
        r"layer_sizes \(3, 16, 8, 2\), the checkpoint has \(3, 16, 16, 2\)"
    )
    with pytest.raises(CheckpointError, match=message):
        other.load(path)
    assert np.array_equal(before, other.online.params)


def test_policy_from_agent_and_from_checkpoint_act_identically(tmp_path):
    agent = make_agent()
    feed(agent, 100)
    policy = agent.into_policy()
    loaded = DqnPolicy.load(agent.save(tmp_path / "a.npz"))
    xs = np.random.default_rng(1).standard_normal((50, 3)).astype(np.float32)
    expected = [agent.act(x) for x in xs]
    assert [policy.act(x) for x in xs] == expected == [loaded.act(x) for x in xs]
    assert loaded.act_batch(xs).tolist() == expected
    np.testing.assert_array_equal(loaded.q_values(xs[0]), agent.online.forward(xs[0]))
    np.testing.assert_array_equal(loaded.q_values_batch(xs), agent.online.forward(xs))
    # the policy is a copy: training the agent further does not change it
    feed(agent, 50, start=100)
    assert [policy.act(x) for x in xs] == expected
    assert not hasattr(policy, "buffer") and not hasattr(policy, "_adam_m")


class OffsetEnv(gym.Env):
    """Box observation of shape (2, 2) and Discrete(3, start=5) actions."""

    observation_space = spaces.Box(-1.0, 1.0, shape=(2, 2), dtype=np.float32)
    action_space = spaces.Discrete(3, start=5)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, (2, 2)).astype(np.float32), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.t += 1
        obs = self.np_random.uniform(-1, 1, (2, 2)).astype(np.float32)
        return obs, float(action == 6), False, self.t >= 10, {}


def test_env_with_matrix_observations_and_offset_actions(tmp_path):
    from ember_np import DqnTrainer

    env = OffsetEnv()
    agent = DqnAgent.for_env(env, SMALL, seed=0)
    assert agent.online.layer_sizes == (4, 16, 16, 3)
    trainer = DqnTrainer(env, agent, seed=0, eval_env=OffsetEnv())
    trainer.train(100)
    assert agent.n_updates > 0
    report = trainer.eval(2)
    assert report.stats["episode_length"] == 10
    policy = DqnPolicy.load(agent.save(tmp_path / "a.npz"))
    assert policy.act(env.reset()[0]) in (5, 6, 7)
