"""CircularBuffer: storage layout, wrap-around, sampling, errors, state."""

from __future__ import annotations

import naive
import numpy as np
import pytest

from ember_np import CircularBuffer, EpisodeStatus, PrioritizedBuffer, Rng
from ember_np.dqn import replay
from ember_np.dqn.replay.replay_kernels import ROWS


def transition(i: int, obs_size: int = 3, n_actions: int = 4, status: int = 0):
    """A transition whose every field encodes ``i`` so it can be recognised later."""
    obs = np.arange(obs_size, dtype=np.float32) + 10.0 * i
    return obs, i % n_actions, float(i), obs + 0.5, status


def test_storage_is_one_packed_structured_array():
    buf = CircularBuffer(10, 4, 2)
    assert buf.storage.dtype.names == ("obs", "action", "reward", "status", "next_ref")
    f = buf.storage.dtype.fields
    assert f["obs"][0] == np.dtype((np.float32, (4,)))
    assert f["action"][0] == np.uint8 and f["reward"][0] == np.float32
    assert f["status"][0] == np.uint8 and f["next_ref"][0] == np.int32
    assert buf.storage.dtype.itemsize == 4 * 4 + 1 + 4 + 1 + 4 == 26
    assert buf.nbytes_per_transition == 26.0  # no finals row used yet
    assert buf.storage.shape == (10,)


def test_more_than_256_actions_are_stored_as_int32_and_saved_alike():
    small, large = CircularBuffer(4, 2, 256), CircularBuffer(4, 2, 257)
    assert small.storage.dtype["action"] == np.uint8
    assert large.storage.dtype["action"] == np.int32
    obs = np.zeros(2, np.float32)
    small.push(obs, 255, 0.0, obs, 0)
    large.push(obs, 256, 0.0, obs, 0)
    assert small.sample(1, Rng(0)).actions[0] == 255
    assert large.sample(1, Rng(0)).actions[0] == 256
    for buf in (small, large):  # the checkpoint format is the same for both
        assert buf.state_dict()["action"].dtype == np.int32
    with pytest.raises(ValueError, match=r"action must be in \[0, 256\), got 256"):
        small.push(obs, 256, 0.0, obs, 0)


def episodes(n: int, length: int, obs_size: int = 4):
    """``n`` transitions in episodes of ``length`` steps: next_obs is the next obs within one."""
    data = np.random.default_rng(0)
    obs = data.standard_normal(obs_size).astype(np.float32)
    for i in range(n):
        next_obs = data.standard_normal(obs_size).astype(np.float32)
        end = (i + 1) % length == 0
        yield obs, i % 2, 1.0, next_obs, int(end)
        obs = data.standard_normal(obs_size).astype(np.float32) if end else next_obs


def test_next_obs_is_stored_once_except_at_episode_ends():
    buf = CircularBuffer(1_000, 4, 2)
    pushed = list(episodes(2_520, length=50))  # the newest transition is mid-episode
    for t in pushed:
        buf.push(*t)
    refs = buf.storage["next_ref"]
    # shared: every step but the last of each episode, and but the newest transition
    assert (refs >= 0).sum() == 1_000 // 50 + 1
    # finals rows are recycled: never more in use than the buffer needs at once
    rows = buf.kernel_state.cursor[ROWS]  # finals rows ever taken
    assert rows <= 1_000 // 50 + 2
    assert buf.nbytes_per_transition == 26 + rows * (16 + 8) / 1_000 <= 26 + 0.53
    for slot in range(1_000):  # every slot still gives back exactly what was pushed
        obs, action, reward, next_obs, status = pushed[1_520 + (slot - 520) % 1_000]
        got = buf.transition(slot)
        np.testing.assert_array_equal(got[0], obs)
        np.testing.assert_array_equal(got[3], next_obs)
        assert got[4] == status


def test_push_len_full_and_wrap_around_overwrites_oldest():
    buf = CircularBuffer(5, 3, 4)
    model = naive.ReplayModel(5)
    assert len(buf) == 0 and not buf.is_full and not buf.ready_for(1)
    for i in range(13):
        t = transition(i, status=i % 3)
        buf.push(*t)
        model.push(t)
        assert len(buf) == min(i + 1, 5)
        assert buf.position == (i + 1) % 5
    assert buf.is_full and buf.ready_for(5) and not buf.ready_for(6)
    for slot, (obs, action, reward, next_obs, status) in enumerate(model.items):
        got_obs, got_action, got_reward, got_next_obs, got_status = buf.transition(slot)
        np.testing.assert_array_equal(got_obs, obs)
        np.testing.assert_array_equal(got_next_obs, next_obs)
        assert (got_action, got_reward, got_status) == (action, reward, status)
    # the oldest surviving transition is 8 (13 pushed, capacity 5)
    assert sorted(buf.storage["reward"].tolist()) == [8.0, 9.0, 10.0, 11.0, 12.0]


def test_sample_shapes_dtypes_and_masks():
    buf = CircularBuffer(100, 3, 4)
    statuses = [EpisodeStatus.CONTINUING, EpisodeStatus.TERMINATED, EpisodeStatus.TRUNCATED]
    for i in range(100):
        buf.push(*transition(i, status=statuses[i % 3]))
    batch = buf.sample(64, Rng(0))
    assert batch.obs.shape == (64, 3) and batch.obs.dtype == np.float32
    assert batch.next_obs.shape == (64, 3) and batch.next_obs.dtype == np.float32
    assert batch.actions.shape == (64,) and batch.actions.dtype == np.int64
    assert batch.rewards.shape == (64,) and batch.rewards.dtype == np.float32
    assert batch.masks.shape == (64,) and batch.masks.dtype == np.float32
    for k in range(64):
        i = int(batch.rewards[k])  # the reward identifies the transition
        obs, action, _, next_obs, _ = transition(i)
        np.testing.assert_array_equal(batch.obs[k], obs)
        np.testing.assert_array_equal(batch.next_obs[k], next_obs)
        assert batch.actions[k] == action
        # only TERMINATED stops the bootstrap; TRUNCATED (time limit) keeps it
        assert batch.masks[k] == (0.0 if i % 3 == 1 else 1.0)
    assert set(np.unique(batch.masks)) == {0.0, 1.0}


def test_sample_only_returns_stored_transitions_after_wrap():
    buf = CircularBuffer(8, 3, 4)
    for i in range(21):
        buf.push(*transition(i))
    rng = Rng(1)
    rewards = np.concatenate([buf.sample(8, rng).rewards for _ in range(100)])
    assert set(rewards.tolist()) == set(range(13, 21))


def test_sampling_is_uniform_chi_square():
    n = 50
    buf = CircularBuffer(n, 3, 4)
    for i in range(n):
        buf.push(*transition(i))
    rng = Rng(123)
    counts = np.zeros(n)
    for _ in range(1000):
        counts += np.bincount(buf.sample(50, rng).rewards.astype(int), minlength=n)
    pvalue = naive.chi_square_pvalue(counts)
    assert pvalue > 1e-3, (pvalue, counts)


def test_sample_into_preallocated_batch_and_determinism():
    buf = CircularBuffer(100, 3, 4)
    for i in range(100):
        buf.push(*transition(i))
    out = buf.empty_batch(32)
    got = buf.sample(32, Rng(5), out=out)
    assert got.obs is out.obs
    again = buf.sample(32, Rng(5))
    for a, b in zip(got, again):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="out holds batches of 32, but batch_size is 16"):
        buf.sample(16, Rng(5), out=out)


@pytest.mark.parametrize(
    "kind, options, filled",
    [
        ("plain", {}, {"discounts"}),  # every buffer hands over gamma * mask
        ("plain", {"n_step": 3}, {"discounts"}),
        ("plain", {"action_masks": True}, {"discounts", "next_action_masks"}),
        ("prioritized", {}, {"discounts", "weights", "indices"}),
        ("prioritized", {"n_step": 2, "action_masks": True},
         {"discounts", "weights", "indices", "next_action_masks"}),
    ],
)  # fmt: skip
def test_batches_fill_exactly_the_fields_the_buffer_has(kind, options, filled):
    cls = CircularBuffer if kind == "plain" else PrioritizedBuffer
    buf = cls(20, 3, 4, **options)
    masks = {"next_action_mask": np.ones(4, bool)} if options.get("action_masks") else {}
    for i in range(20):
        buf.push(*transition(i), **masks)
    for batch in (buf.empty_batch(8), buf.sample(8, Rng(2))):
        optional = set(batch._fields[5:])
        got = {name for name in optional if getattr(batch, name).shape[0] == 8}
        assert got == filled
        assert all(getattr(batch, name).size == 0 for name in optional - filled)


def test_sample_advances_only_the_given_stream():
    buf = CircularBuffer(10, 3, 4)
    for i in range(10):
        buf.push(*transition(i))
    rng = Rng(3)
    before = rng.state.copy()
    buf.sample(4, rng)
    assert not np.array_equal(before, rng.state)


def test_push_coerces_lists_and_float64_without_new_specialization():
    buf = CircularBuffer(10, 3, 4)
    buf.push(np.zeros(3, np.float32), 0, 0.0, np.zeros(3, np.float32), 0)
    n = len(replay.push_transition.signatures)
    buf.push([1.0, 2.0, 3.0], np.int64(1), np.float64(2.0), np.ones(3), EpisodeStatus.TRUNCATED)
    buf.push(np.zeros((3, 2))[:, 0], np.int32(2), 1, np.zeros(3, np.float16), np.uint8(1))
    assert len(replay.push_transition.signatures) == n
    assert buf.storage[1]["status"] == 2 and buf.storage[2]["action"] == 2


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity must be a positive integer, got 0"):
        CircularBuffer(0, 3, 2)
    with pytest.raises(ValueError, match="capacity must be a positive integer, got -5"):
        CircularBuffer(-5, 3, 2)
    with pytest.raises(ValueError, match="capacity must be a positive integer, got 2.5"):
        CircularBuffer(2.5, 3, 2)


def test_cannot_sample_more_than_stored():
    buf = CircularBuffer(100, 3, 4)
    for i in range(10):
        buf.push(*transition(i))
    with pytest.raises(ValueError, match="cannot sample 64 transitions from a buffer holding 10"):
        buf.sample(64, Rng(0))
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        buf.sample(0, Rng(0))
    with pytest.raises(ValueError, match="rng must be an ember_np.Rng"):
        buf.sample(4, np.random.default_rng(0))


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(obs=np.zeros(2)), r"expected obs of shape \(3,\), got \(2,\)"),
        (dict(next_obs=np.zeros((3, 1))), r"expected next_obs of shape \(3,\), got \(3, 1\)"),
        (dict(obs="abc"), "expected obs as 3 numbers convertible to float32"),
        (dict(action=4), r"action must be in \[0, 4\), got 4"),
        (dict(action=-1), r"action must be in \[0, 4\), got -1"),
        (dict(action=1.5), "action must be an integer, got 1.5"),
        (dict(reward=float("nan")), "reward must be finite, got nan"),
        (dict(reward="x"), "reward must be a number"),
        (dict(obs=[0.0, np.inf, 0.0]), "obs must be finite"),
        (dict(next_obs=[0.0, np.nan, 0.0]), "next_obs must be finite"),
        (dict(status=7), "status must be an EpisodeStatus"),
    ],
)
def test_rejected_push_changes_nothing(change, message):
    buf = CircularBuffer(4, 3, 4)
    for i in range(6):  # wrapped: position 2
        buf.push(*transition(i))
    arrays = (buf.storage, buf.finals, buf.kernel_state.cursor)
    before = [a.tobytes() for a in arrays]
    args = dict(zip(("obs", "action", "reward", "next_obs", "status"), transition(99)))
    args.update(change)
    with pytest.raises(ValueError, match=message):
        buf.push(**args)
    assert [a.tobytes() for a in arrays] == before


def test_state_dict_round_trip_is_exact():
    buf = CircularBuffer(6, 3, 4)
    for i in range(9):
        buf.push(*transition(i, status=i % 3))
    state = buf.state_dict()
    other = CircularBuffer(6, 3, 4)
    other.load_state_dict(state)

    def same_state():
        for key, value in buf.state_dict().items():
            assert other.state_dict()[key].tobytes() == value.tobytes(), key

    same_state()
    assert (other.position, len(other)) == (buf.position, len(buf))
    a, b = buf.sample(6, Rng(2)), other.sample(6, Rng(2))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    buf.push(*transition(50))
    other.push(*transition(50))
    same_state()


def test_state_dict_partial_buffer_and_mismatch_errors():
    buf = CircularBuffer(10, 3, 4)
    for i in range(4):
        buf.push(*transition(i))
    state = buf.state_dict()
    assert state["obs"].shape == (4, 3)
    with pytest.raises(ValueError, match="capacity mismatch: expected 20, found 10"):
        CircularBuffer(20, 3, 4).load_state_dict(state)
    with pytest.raises(ValueError, match=r"'obs': expected float32 of shape \(4, 5\)"):
        CircularBuffer(10, 5, 4).load_state_dict(state)
    target = CircularBuffer(10, 3, 2)
    with pytest.raises(ValueError, match=r"'action' has values outside \[0, 2\)"):
        target.load_state_dict(state)
    assert len(target) == 0
