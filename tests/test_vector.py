"""Training on N envs stepped together (issue 25): gymnasium vector envs and NativeVecEnv.

The envs here encode where they are in their observations (env, episode,
step), so a transition that pairs the wrong observations, crosses an
episode end or mixes envs is visible in the replay buffer.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from helpers import files_of
from naive import naive_n_step_returns

from ember_np import Aggregator, CircularBuffer, DqnAgent, DqnTrainer, Rng, TrainingRun
from ember_np.dqn.config import DqnConfig
from ember_np.dqn.replay.prioritized import PrioritizedBuffer
from ember_np.envs import NativeVecEnv
from ember_np.training.loop import train_and_evaluate
from ember_np.training.setup import ASYNC_START_METHOD

SMALL = DqnConfig(hidden_sizes=(16,), batch_size=8, min_replay_size=20, buffer_capacity=3_000,
                  train_freq=2, target_update_freq=50, epsilon_decay_steps=300)  # fmt: skip


class CounterEnv(gym.Env):
    """obs = [env id, episode, step]; episode k lasts 3 + k % 3 steps, ending
    terminated for even k and truncated for odd k. Reward = 1 + step."""

    observation_space = spaces.Box(-1e6, 1e6, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, env_id: int = 0) -> None:
        self.env_id = env_id
        self.episode = -1
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.env_id, self.episode, self.t], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        assert self.t < 3 + self.episode % 3, "stepped past the end of an episode"
        self.t += 1
        done = self.t == 3 + self.episode % 3
        return (
            self._obs(),
            float(self.t),
            done and self.episode % 2 == 0,
            (done and self.episode % 2 == 1),
            {},
        )


def counter_vec(n: int, mode: AutoresetMode) -> SyncVectorEnv:
    return SyncVectorEnv([lambda i=i: CounterEnv(i) for i in range(n)], autoreset_mode=mode)


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_every_stored_transition_pairs_one_envs_consecutive_observations(mode):
    n = 3
    agent = DqnAgent.for_env(CounterEnv(), SMALL, seed=0)
    trainer = DqnTrainer(counter_vec(n, mode), agent, seed=0, eval_env=CounterEnv())
    trainer.train(150)
    buf = agent.buffer
    assert buf.num_envs == n and len(buf) == agent.total_steps == 150
    seen_ends = {"terminated": 0, "truncated": 0}
    for slot in buf.stored_slots():
        obs, _, reward, next_obs, status = buf.transition(int(slot))
        env, episode, t = obs
        # each env's transitions live in its own segment of the buffer
        assert env == int(slot) * n // buf.capacity
        # the next observation is the same env's, same episode, one step on
        np.testing.assert_array_equal(next_obs, [env, episode, t + 1])
        assert reward == t + 1
        length = 3 + episode % 3
        if t + 1 == length:  # the last step: real final observation, the episode's status
            assert status == (1 if episode % 2 == 0 else 2)
            seen_ends["terminated" if status == 1 else "truncated"] += 1
        else:
            assert status == 0
    assert min(seen_ends.values()) > 5
    assert trainer.episode == sum(seen_ends.values())  # every episode counted once


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_episode_log_rows_carry_the_env_and_its_episode(tmp_path, mode):
    agent = DqnAgent.for_env(CounterEnv(), SMALL, seed=0)
    run = TrainingRun.create("vec", "counter", root=tmp_path)
    trainer = DqnTrainer(counter_vec(2, mode), agent, seed=0, run=run, eval_env=CounterEnv(),
                         checkpoint_freq=50)  # fmt: skip
    trainer.train(100)
    rows = run.read_train_episodes()
    assert [r["episode"] for r in rows] == list(range(len(rows)))
    for env in (0, 1):
        mine = [r for r in rows if r["env"] == env]
        # env e's k-th episode lasts 3 + k % 3 steps, ends as the env says
        assert [r["length"] for r in mine] == [3 + k % 3 for k in range(len(mine))]
        assert [r["total_reward"] for r in mine] == [
            sum(range(1, 4 + k % 3)) for k in range(len(mine))
        ]
        assert [r["status"] for r in mine][:2] == ["TERMINATED", "TRUNCATED"]
    assert sorted(p.name for p in run.checkpoints_dir.glob("step_*.npz")) == [
        "step_100.npz",
        "step_50.npz",
    ]


def test_disabled_autoreset_is_refused():
    vec = counter_vec(2, AutoresetMode.DISABLED)
    agent = DqnAgent.for_env(CounterEnv(), SMALL, seed=0)
    with pytest.raises(ValueError, match="autoreset_mode.*NEXT_STEP.*SAME_STEP"):
        DqnTrainer(vec, agent, seed=0)


# -- the buffer's streams ---------------------------------------------------------------


def test_n_step_returns_never_cross_envs_even_with_identical_observations():
    """Two envs whose observations are bitwise identical, pushed interleaved and
    irregularly (as NEXT_STEP leaves gaps): each return is its own env's."""
    buf = CircularBuffer(200, 2, 2, n_step=3, gamma=0.5, num_envs=2)
    streams: dict[int, tuple[list[float], list[int]]] = {0: ([], []), 1: ([], [])}
    rng = np.random.default_rng(0)
    t = [0, 0]
    for _ in range(60):
        for env in (0, 1):
            if env == 1 and rng.random() < 0.3:
                continue  # env 1 skips a step
            status = 1 if t[env] == 4 else 0
            reward = 1.0 if env == 0 else 100.0 + t[env]
            buf.push(np.array([t[env], 0], np.float32), 0, reward,
                     np.array([t[env] + 1, 0], np.float32), status, env=env)  # fmt: skip
            streams[env][0].append(reward)
            streams[env][1].append(status)
            t[env] = 0 if status else t[env] + 1
    expected = {env: naive_n_step_returns(*streams[env], 3, 0.5) for env in (0, 1)}
    sizes = buf.state_dict()["segments"][:, 1]
    assert sizes.tolist() == [len(streams[0][0]), len(streams[1][0])]
    # the two segments' returns, slot by slot, through the kernel's own slot order
    for env, lo in ((0, 0), (1, 100)):
        got = [_slot_return(buf, lo + i) for i in range(sizes[env])]
        np.testing.assert_allclose(got, expected[env], rtol=1e-6)


def _slot_return(buf: CircularBuffer, slot: int) -> float:
    """The n-step return the buffer samples for ``slot`` (PER-free: draw it alone)."""
    from ember_np.dqn.replay.replay_kernels import gather_n_step

    batch = buf.empty_batch(1)
    gather_n_step(buf.kernel_state, np.array([slot], dtype=np.int64), batch)
    return float(batch.rewards[0])


@pytest.mark.parametrize("kind", [CircularBuffer, PrioritizedBuffer])
def test_stream_state_round_trips_and_samples_the_same(kind):
    buf = kind(11, 2, 3, num_envs=3, n_step=2)
    for i in range(40):
        env = i % 3 if i % 7 else 0
        buf.push(np.array([i, env], np.float32), i % 3, float(i),
                 np.array([i + 3, env], np.float32), int(i % 5 == 0), env=env)  # fmt: skip
    state = buf.state_dict()
    assert state["segments"].shape == (3, 2)
    other = kind(11, 2, 3, n_step=2)  # one stream: load_state_dict takes the state's three
    other.load_state_dict(state)
    assert other.num_envs == 3
    for key, value in other.state_dict().items():
        np.testing.assert_array_equal(value, state[key], err_msg=key)
    a, b = buf.sample(6, Rng(4)), other.sample(6, Rng(4))
    for name in ("obs", "actions", "rewards", "next_obs", "discounts"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    import copy

    twin = copy.deepcopy(buf)
    np.testing.assert_array_equal(twin.sample(6, Rng(4)).obs, a.obs)


def test_a_buffer_with_transitions_cannot_be_split():
    buf = CircularBuffer(10, 2, 2)
    buf.push(np.zeros(2, np.float32), 0, 0.0, np.ones(2, np.float32), 0)
    with pytest.raises(ValueError, match="only be split into 2 streams while empty"):
        buf.set_num_envs(2)
    with pytest.raises(ValueError, match="env must be in \\[0, 1\\), got 3"):
        buf.push(np.zeros(2, np.float32), 0, 0.0, np.ones(2, np.float32), 0, env=3)


# -- masks per env ----------------------------------------------------------------------


class MaskedEnv(gym.Env):
    """Four actions; in env e only actions e and e + 2 are legal (info["action_mask"])."""

    observation_space = spaces.Box(-10, 10, (2,), np.float32)
    action_space = spaces.Discrete(4)

    def __init__(self, env_id: int = 0) -> None:
        self.env_id = env_id
        self.t = 0

    def _info(self):
        mask = np.zeros(4, np.int8)
        mask[[self.env_id, self.env_id + 2]] = 1
        return {"action_mask": mask}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.env_id, 0], np.float32), self._info()

    def step(self, action):
        assert action in (self.env_id, self.env_id + 2), f"illegal action {action}"
        self.t += 1
        return np.array([self.env_id, self.t], np.float32), 1.0, self.t == 5, False, self._info()


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_each_env_acts_and_learns_under_its_own_mask(mode):
    config = DqnConfig(hidden_sizes=(8,), batch_size=4, min_replay_size=8, buffer_capacity=400,
                       action_masks=True, epsilon_decay_steps=100)  # fmt: skip
    agent = DqnAgent.for_env(MaskedEnv(), config, seed=0)
    vec = SyncVectorEnv([lambda i=i: MaskedEnv(i) for i in range(2)], autoreset_mode=mode)
    trainer = DqnTrainer(vec, agent, seed=0, eval_env=MaskedEnv())
    trainer.train(300)  # MaskedEnv asserts every action is legal, exploring and greedy
    buf = agent.buffer
    for slot in buf.stored_slots():
        env = int(buf.transition(int(slot))[0][0])
        legal = np.unpackbits(buf.next_action_masks[slot], count=4).astype(bool)
        assert legal.tolist() == [a in (env, env + 2) for a in range(4)]


# -- one env is a single env, byte for byte ----------------------------------------------


def train_run(
    env, root: Path, config: DqnConfig, steps: int, fused=None
) -> tuple[Path, DqnTrainer]:
    agent = DqnAgent.for_env(gym.make("ember_np/CartPole-v1"), config, seed=3)
    run = TrainingRun.create("one", "env", root=root)
    trainer = DqnTrainer(env, agent, seed=7, run=run, checkpoint_freq=400, keep_checkpoints=2,
                         fused=fused)  # fmt: skip
    train_and_evaluate(trainer, steps, 500, 2)
    return run.dir, trainer


CARTPOLE = DqnConfig(hidden_sizes=(32, 32), batch_size=16, min_replay_size=100,
                     buffer_capacity=5_000, train_freq=2, n_step=3, prioritized_replay=True,
                     target_update_freq=200, epsilon_decay_steps=800)  # fmt: skip


@pytest.mark.parametrize(
    "make_vec, make_single, fused",
    [
        (lambda: NativeVecEnv("CartPole-v1", 1), lambda: gym.make("ember_np/CartPole-v1"), True),
        (lambda: NativeVecEnv("CartPole-v1", 1), lambda: gym.make("ember_np/CartPole-v1"), False),
        (lambda: gym.make_vec("CartPole-v1", 1, vectorization_mode="sync"),
         lambda: gym.make("CartPole-v1"), None),
        (lambda: SyncVectorEnv([lambda: gym.make("CartPole-v1")],
                               autoreset_mode=AutoresetMode.SAME_STEP),
         lambda: gym.make("CartPole-v1"), None),
    ],
    ids=["native-fused", "native-python", "gymnasium-next-step", "gymnasium-same-step"],
)  # fmt: skip
def test_one_env_writes_the_files_of_the_single_env(tmp_path, make_vec, make_single, fused):
    vec_dir, vec_trainer = train_run(make_vec(), tmp_path / "vec", CARTPOLE, 1_300, fused)
    one_dir, one_trainer = train_run(make_single(), tmp_path / "one", CARTPOLE, 1_300, fused)
    assert (
        vec_trainer.fused
        == one_trainer.fused
        == (fused is not False and "native" in str(type(vec_trainer.env)))
    )
    vec_files, one_files = files_of(vec_dir), files_of(one_dir)
    assert "checkpoints/best.npz" in vec_files and "checkpoints/step_1200.npz" in vec_files
    assert sorted(vec_files) == sorted(one_files)
    different = [name for name in vec_files if vec_files[name] != one_files[name]]
    assert not different, f"files that differ: {different}"


def test_fused_and_python_loops_give_the_same_run_with_several_native_envs(tmp_path):
    fused_dir, fused = train_run(NativeVecEnv("CartPole-v1", 3), tmp_path / "f", CARTPOLE, 1_300)
    python_dir, python = train_run(NativeVecEnv("CartPole-v1", 3), tmp_path / "p", CARTPOLE,
                                   1_300, fused=False)  # fmt: skip
    assert fused.fused and not python.fused
    assert fused.agent.total_steps == python.agent.total_steps == 1_302  # whole vector steps
    a, b = files_of(fused_dir), files_of(python_dir)
    assert sorted(a) == sorted(b)
    assert [name for name in a if a[name] != b[name]] == []
    rows = [json.loads(line) for line in a["train_episodes.jsonl"].splitlines()]
    assert {r["env"] for r in rows} == {0, 1, 2}
    # checkpoints after the vector steps that reached 400, 800, 1200 (kept: the last 2)
    assert sorted(n for n in a if "step_" in n) == [
        "checkpoints/step_1200.npz",
        "checkpoints/step_801.npz",
    ]


def test_vector_training_is_deterministic_and_sync_equals_async():
    def train(vec):
        agent = DqnAgent.for_env(CounterEnv(), SMALL, seed=2)
        trainer = DqnTrainer(vec, agent, seed=4, eval_env=CounterEnv())
        trainer.train(200)
        vec.close()
        return agent

    make = [lambda i=i: CounterEnv(i) for i in range(3)]
    first = train(SyncVectorEnv(make))
    again = train(SyncVectorEnv(make))
    spread = train(AsyncVectorEnv(make, context=ASYNC_START_METHOD))  # as ember-np makes one
    for other in (again, spread):
        np.testing.assert_array_equal(first.online.params, other.online.params)
        np.testing.assert_array_equal(first.exploration_rng.state, other.exploration_rng.state)
        for key, value in first.buffer.state_dict().items():
            np.testing.assert_array_equal(value, other.buffer.state_dict()[key], err_msg=key)


def test_batched_acting_matches_one_observation_at_a_time():
    """act_batch is the greedy action of each row; with epsilon 1 the batch draws as
    N single draws from the one exploration stream."""
    env = gym.make("ember_np/CartPole-v1")
    agent = DqnAgent.for_env(env, SMALL, seed=5)
    obs = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)
    np.testing.assert_array_equal(agent.act_batch(obs), [agent.act(o) for o in obs])
    twin = DqnAgent.for_env(env, SMALL, seed=5)  # epsilon_start = 1 at step 0: all random
    batch = agent.act_epsilon_greedy_batch(obs)
    assert batch.tolist() == [twin.act_epsilon_greedy(o) for o in obs]


@pytest.mark.parametrize("head", [{}, {"dueling": True}, {"distributional": "c51"},
                                  {"distributional": "qr", "dueling": True}])  # fmt: skip
@pytest.mark.parametrize("masked", [False, True])
def test_batched_exploring_acting_is_one_observation_at_a_time(head, masked):
    """At epsilon 0.5 about half the rows draw a random legal action and the others go
    through the network together: each row gets what one observation at a time gives,
    drawn in the same order from the same stream. A row holding NaN raises."""
    env = gym.make("ember_np/Acrobot-v1")  # 3 actions: masks leave 1 or 2 legal
    config = SMALL.replace(epsilon_start=0.5, epsilon_end=0.5, **head)
    agent, twin = (DqnAgent.for_env(env, config, seed=9) for _ in range(2))
    rng = np.random.default_rng(3)
    obs = rng.normal(size=(40, 6)).astype(np.float32)
    masks = rng.random((40, 3)) < 0.6
    masks[np.arange(40), rng.integers(0, 3, 40)] = True  # at least one legal action
    if masked:
        batch = agent.act_epsilon_greedy_batch(obs, action_masks=masks)
        one_by_one = [twin.act_epsilon_greedy(o, action_mask=m) for o, m in zip(obs, masks)]
    else:
        batch = agent.act_epsilon_greedy_batch(obs)
        one_by_one = [twin.act_epsilon_greedy(o) for o in obs]
    assert batch.tolist() == one_by_one
    np.testing.assert_array_equal(agent.exploration_rng.state, twin.exploration_rng.state)
    greedy = [a for a, g in zip(batch.tolist(), agent.act_batch(obs).tolist()) if a == g]
    assert 10 < len(greedy) < 40  # both kinds of rows were there
    obs[25, 2] = np.nan
    with pytest.raises(ValueError, match="obs_batch"):
        agent.act_epsilon_greedy_batch(obs)


class Span(Aggregator):
    """The last value minus the first, and how many there were (keeps no list)."""

    def __init__(self) -> None:
        self.reset()

    def update(self, value: float) -> None:
        self.first = value if self.count == 0 else self.first
        self.last = value
        self.count += 1

    def value(self) -> float:
        return self.last - self.first

    def reset(self) -> None:
        self.count, self.first, self.last = 0, 0.0, 0.0


def test_fused_vector_training_keeps_no_python_object_per_finished_episode():
    """The episodes a compiled chunk of N native envs ends are folded into the stats
    one at a time: without a run nothing is kept per episode, so the Python memory
    blocks in use stay flat over the thousands of episodes of one chunk (objects
    kept per episode until the chunk's end cost memory and garbage-collector passes
    that grow with the episodes, in the Python between compiled calls)."""
    env = NativeVecEnv("CartPole-v1", 16)
    trainer = DqnTrainer(env, DqnAgent.for_env(env, SMALL, seed=0), seed=0)
    trainer.train(500)  # compiled and started
    blocks = Span()
    trainer.stats.add("blocks", lambda record: sys.getallocatedblocks(), blocks)
    trainer.train(30_000)  # one compiled chunk: no run, no checkpoint to end it early
    assert blocks.count > 1_000
    assert blocks.value() < blocks.count / 10, (blocks.value(), blocks.count)


class Folds(Aggregator):
    """A Mean that counts how it was fed: value by value or many at once."""

    def __init__(self) -> None:
        self.reset()

    def update(self, value: float) -> None:
        self.one_by_one += 1
        self.total += value
        self.count += 1

    def update_many(self, values) -> None:  # noqa: ANN001
        self.calls += 1
        for value in values:
            self.total += value
        self.count += len(values)

    def value(self) -> float:
        return self.total / self.count

    def reset(self) -> None:
        self.one_by_one, self.calls, self.total, self.count = 0, 0, 0.0, 0


def test_fused_vector_chunk_folds_its_episodes_without_a_record_each():
    """Without a run, and with statistics of rewards and lengths only, the episodes a
    compiled chunk of N native envs ends are folded into the stats as columns, one
    call per chunk (no EpisodeRecord, epsilon or stats pass per episode: that Python
    cost as much CPU per transition as acting on 16 observations); the statistics
    are those the Python vector loop's records give."""

    def train(fused: bool) -> tuple[DqnTrainer, Folds]:
        env = NativeVecEnv("CartPole-v1", 16)
        trainer = DqnTrainer(env, DqnAgent.for_env(env, SMALL, seed=0), seed=0, fused=fused)
        folds = Folds()
        trainer.stats.add("folds", "length", folds)
        trainer.train(30_000)  # one compiled chunk
        return trainer, folds

    (fused, folds), (python, one_by_one) = train(True), train(False)
    assert fused.stats.summary() == python.stats.summary()
    assert fused.episode == python.episode == one_by_one.one_by_one > 1_000
    assert (folds.one_by_one, folds.calls, folds.count) == (0, 1, fused.episode)
