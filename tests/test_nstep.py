"""n-step returns: the buffer's sampled returns against a plain-Python reference,
and an n-step agent on the fused and the Python path, resumed exactly."""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest
from helpers import weights_rngs_and_counts
from naive import naive_n_step

import ember_np.envs  # noqa: F401
from ember_np import CircularBuffer, DqnAgent, DqnConfig, DqnTrainer, Rng
from ember_np.dqn.replay import PrioritizedBuffer
from ember_np.types import EpisodeStatus

CONTINUING, TERMINATED, TRUNCATED = (int(s) for s in EpisodeStatus)


def episode_stream(rng, n_pushes, p_end=0.15, p_jump=0.05, tag=0.0, size=3):
    """Transitions (obs, action, reward, next_obs, status) of random episodes.

    obs[0] numbers each step of the stream, obs[1] is ``tag`` (so two streams
    stay apart); within an episode next_obs is the next step's obs; an
    episode ends terminated or truncated (next_obs a final observation no
    obs ever has), and with probability p_jump the stream jumps without
    ending (next_obs is not the next obs).
    """
    out = []
    for t in range(n_pushes):
        obs = np.array([t, tag, *rng.standard_normal(size - 2)], np.float32)
        u = rng.random()
        status = CONTINUING
        if u < p_end:
            status = TERMINATED if rng.random() < 0.5 else TRUNCATED
        jump = status == CONTINUING and u > 1.0 - p_jump
        out.append([obs, int(rng.integers(3)), float(rng.standard_normal()), None, status, jump])
    for t, item in enumerate(out):
        if item[4] != CONTINUING or item[5] or t + 1 == len(out):
            item[3] = np.array([-1.0 - t, tag, *[7.0] * (size - 2)], np.float32)  # a final obs
        else:
            item[3] = out[t + 1][0].copy()
    return [tuple(item[:5]) for item in out]


def check_batch(batch, expected, key_of_obs, gamma, n_step):
    """Every row of ``batch`` against the reference of the push it holds."""
    for k in range(len(batch.actions)):
        reward, next_obs, mask, discount, m = expected[key_of_obs(batch.obs[k])]
        assert batch.rewards[k] == pytest.approx(reward, rel=1e-5, abs=1e-6)
        assert np.array_equal(batch.next_obs[k], next_obs)
        assert batch.masks[k] == mask
        if n_step == 1:  # the buffer owns gamma: gamma * mask, in float64
            assert batch.discounts.dtype == np.float64 and batch.discounts[k] == gamma * mask
        else:
            assert batch.discounts[k] == pytest.approx(discount, rel=1e-6)


@pytest.mark.parametrize(
    ("capacity", "n_pushes", "n_step", "gamma"),
    [(64, 40, 3, 0.9), (17, 150, 3, 0.99), (5, 23, 4, 0.5), (1, 6, 3, 0.9), (30, 200, 1, 0.99),
     (300, 250, 8, 0.97)],
)  # fmt: skip
@pytest.mark.parametrize("prioritized", [False, True])
def test_n_step_returns_match_the_reference(capacity, n_pushes, n_step, gamma, prioritized):
    """Random episodes with terminations, truncations and jumps, wrap-around
    (capacity < pushes) and the write cursor (the newest steps use what is stored)."""
    rng = np.random.default_rng(capacity * 1000 + n_pushes)
    pushes = episode_stream(rng, n_pushes)
    kind = PrioritizedBuffer if prioritized else CircularBuffer
    buf = kind(capacity, 3, 3, n_step=n_step, gamma=gamma)
    sampler = Rng(3)
    seen = set()
    for t, transition in enumerate(pushes):
        buf.push(*transition)
        if t % 7 == 6 or t == n_pushes - 1:  # recomputed at every sample as steps arrive
            expected = naive_n_step(pushes[: t + 1], capacity, n_step, gamma)
            batch = buf.sample(min(len(buf), 64), sampler)
            check_batch(batch, expected, lambda o: int(o[0]), gamma, n_step)
            seen.update(int(o[0]) for o in batch.obs)
    # the walk really went past one step, up to n, and stopped early at ends
    ms = {v[4] for v in naive_n_step(pushes, capacity, n_step, gamma).values()}
    if capacity >= 17:
        assert max(ms) == n_step and (n_step == 1 or 1 in ms)
    assert len(seen) >= min(capacity, n_pushes) // 2


def test_interleaved_streams_never_mix():
    """Two streams pushed alternately: no transition continues into the other
    stream's slot, so every return is the 1-step one (the documented rule)."""
    rng = np.random.default_rng(5)
    a = episode_stream(rng, 60, tag=1.0)
    b = episode_stream(rng, 60, tag=2.0)
    pushes = [x for pair in zip(a, b) for x in pair]
    buf = CircularBuffer(50, 3, 3, n_step=3, gamma=0.9)
    for transition in pushes:
        buf.push(*transition)
    expected = naive_n_step(pushes, 50, 3, 0.9)
    assert {v[4] for v in expected.values()} == {1}
    key = {(float(p[0][0]), float(p[0][1])): i for i, p in enumerate(pushes)}
    for seed in range(4):
        batch = buf.sample(50, Rng(seed))
        check_batch(batch, expected, lambda o: key[(float(o[0]), float(o[1]))], 0.9, 3)
        assert np.allclose(batch.discounts, 0.9 * batch.masks)
        assert set(batch.obs[:, 1].tolist()) == {1.0, 2.0}


def test_one_step_sampling_is_unchanged():
    """n_step=1 draws the same slots (one draw per row, as before) and gathers
    the plain transitions; the n-step code path is not taken."""
    rng = np.random.default_rng(9)
    pushes = episode_stream(rng, 90)
    buf = CircularBuffer(64, 3, 3)
    other = CircularBuffer(64, 3, 3, n_step=1, gamma=0.5)
    for transition in pushes:
        buf.push(*transition)
        other.push(*transition)
    batch = buf.sample(60, Rng(4))
    slots = Rng(4).integers(64, 60)
    for k, slot in enumerate(slots):
        obs, action, reward, next_obs, status = buf.transition(int(slot))
        assert np.array_equal(batch.obs[k], obs) and np.array_equal(batch.next_obs[k], next_obs)
        assert (batch.actions[k], batch.rewards[k]) == (action, np.float32(reward))
        assert batch.masks[k] == (0.0 if status == TERMINATED else 1.0)
    theirs = other.sample(60, Rng(4))
    for name in batch._fields:  # the same draws and transitions; each buffer's own gamma
        if name != "discounts":
            assert np.array_equal(getattr(theirs, name), getattr(batch, name)), name
    assert np.array_equal(theirs.discounts, 0.5 * batch.masks.astype(np.float64))
    assert np.array_equal(batch.discounts, 0.99 * batch.masks.astype(np.float64))
    assert batch.weights.shape == batch.indices.shape == (0,)
    assert np.array_equal(batch.discounts, buf.gamma * batch.masks.astype(np.float64))


def test_buffer_rejects_bad_n_step_and_gamma():
    with pytest.raises(ValueError, match="n_step"):
        CircularBuffer(10, 3, 2, n_step=0)
    with pytest.raises(ValueError, match="gamma must be a number in"):
        CircularBuffer(10, 3, 2, n_step=3, gamma=1.5)
    with pytest.raises(ValueError, match="n_step must be a positive integer"):
        DqnConfig(n_step=0)


def test_state_dict_and_copies_keep_the_n_step_returns():
    rng = np.random.default_rng(2)
    buf = CircularBuffer(20, 3, 3, n_step=3, gamma=0.8)
    for transition in episode_stream(rng, 47):
        buf.push(*transition)
    other = CircularBuffer(20, 3, 3, n_step=3, gamma=0.8)
    other.load_state_dict(buf.state_dict())
    import copy
    import pickle

    for twin in (other, copy.deepcopy(buf), pickle.loads(pickle.dumps(buf))):
        assert (twin.n_step, twin.gamma) == (3, 0.8)
        for got, want in zip(twin.sample(20, Rng(8)), buf.sample(20, Rng(8))):
            assert np.array_equal(got, want)


CONFIG = DqnConfig(
    hidden_sizes=(32, 32), learning_rate=1e-3, batch_size=32, buffer_capacity=3_000,
    min_replay_size=100, target_update_freq=50, epsilon_end=0.05, epsilon_decay_steps=2_000,
    max_grad_norm=10.0, n_step=3,
)  # fmt: skip


def trainer(config, fused=None, seed=0):
    env = gym.make("ember_np/CartPole-v1")
    return DqnTrainer(env, DqnAgent.for_env(env, config, seed=seed), seed=seed, fused=fused)


@pytest.mark.parametrize("config", [CONFIG, CONFIG.replace(prioritized_replay=True, dueling=True)],
                         ids=["n_step", "n_step+per+dueling"])  # fmt: skip
def test_n_step_agent_trains_on_the_fused_path_like_the_python_path(config):
    fused = trainer(config)
    assert fused.fused
    fused.train(1_500)
    python = trainer(config, fused=False)
    list(itertools.islice(python.steps(), 1_500))
    assert fused.agent.n_updates > 1_000
    assert np.isfinite(fused.agent.last_loss)
    assert weights_rngs_and_counts(fused.agent) == weights_rngs_and_counts(python.agent)
    if config.prioritized_replay:
        assert np.array_equal(fused.agent.buffer.priorities(), python.agent.buffer.priorities())
        assert len(np.unique(fused.agent.buffer.priorities())) > 100  # written from TD errors


@pytest.mark.parametrize("prioritized", [False, True])
def test_exact_resume_with_n_step(tmp_path, prioritized):
    """Save mid-run with the buffer, rebuild from the file: the resumed agent
    picks the same actions and ends with the same state as the uninterrupted one
    (n-step; then n-step + PER + dueling + LayerNorm + an annealed learning rate)."""
    config = DqnConfig(hidden_sizes=(16,), batch_size=16, buffer_capacity=200, min_replay_size=50,
                       target_update_freq=30, epsilon_decay_steps=300, learning_rate=1e-3,
                       n_step=3, gamma=0.95, prioritized_replay=prioritized, dueling=prioritized,
                       per_beta_steps=500)  # fmt: skip
    if prioritized:  # every feature on: 14b's LayerNorm and learning-rate annealing too
        config = config.replace(layer_norm=True, learning_rate_end=1e-4,
                                learning_rate_decay_steps=600)  # fmt: skip
    transitions = episode_stream(np.random.default_rng(4), 700, p_end=0.05, size=4)
    transitions = [(o, a % 2, r, nx, s) for o, a, r, nx, s in transitions]
    whole = DqnAgent.for_env(gym.make("CartPole-v1"), config, seed=3)
    first = DqnAgent.for_env(gym.make("CartPole-v1"), config, seed=3)
    acts_whole = [whole.observe_encoded(*t, True) for t in transitions]
    acts = [first.observe_encoded(*t, True) for t in transitions[:333]]
    path = first.save(tmp_path / "mid", include_buffer=True)
    resumed = DqnAgent.from_checkpoint(path)
    assert type(resumed.buffer) is type(whole.buffer)
    acts += [resumed.observe_encoded(*t, True) for t in transitions[333:]]
    assert acts == acts_whole
    assert (weights_rngs_and_counts(resumed, include_buffer=False)
            == weights_rngs_and_counts(whole, include_buffer=False))  # fmt: skip
    for key, value in whole.buffer.state_dict().items():  # finals rows are renumbered on load
        assert np.array_equal(resumed.buffer.state_dict()[key], value), key
    if prioritized:
        assert resumed.buffer.max_priority == whole.buffer.max_priority
        assert np.array_equal(resumed.buffer.priorities(), whole.buffer.priorities())


def test_cli_sets_n_step_and_prioritized_replay(tmp_path):
    from ember_np.cli import main

    code = main(["train", "CartPole-v1", "--steps", "600", "--eval-every", "600",
                 "--eval-episodes", "1", "--root", str(tmp_path), "--preset", "ember", "--quiet",
                 "--set", "min_replay_size=200", "hidden_sizes=[16]", "n_step=3",
                 "prioritized_replay=true", "per_alpha=0.5", "per_beta_steps=1000"])  # fmt: skip
    assert code == 0
    (run_dir,) = (tmp_path / "CartPole-v1" / "ember").iterdir()
    agent = DqnAgent.from_checkpoint(run_dir / "checkpoints" / "latest.npz")
    assert (agent.config.n_step, agent.config.prioritized_replay) == (3, True)
    assert (agent.buffer.n_step, agent.buffer.alpha) == (3, 0.5)
    assert isinstance(agent.buffer, PrioritizedBuffer) and agent.n_updates > 0
