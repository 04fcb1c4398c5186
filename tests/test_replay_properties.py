"""Property tests: CircularBuffer against a plain-Python model of the same buffer."""

from __future__ import annotations

import naive
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ember_np import CircularBuffer, Rng
from ember_np.dqn.replay.replay_kernels import N_FREE, ROWS

OBS_SIZE = 3
N_ACTIONS = 4

vector = st.lists(
    st.one_of(st.sampled_from([0.0, -0.0]), st.floats(-1e6, 1e6, width=32)),
    min_size=OBS_SIZE,
    max_size=OBS_SIZE,
)
# ("push", obs, action, reward, status, next_obs, continues): with ``continues``
# the obs is the previous push's next_obs, as in an episode, so the buffer
# shares it; without, a fresh obs (a reset, or another stream).
push = st.tuples(
    st.just("push"),
    vector,
    st.integers(0, N_ACTIONS - 1),
    st.floats(-1e6, 1e6, width=32),
    st.integers(0, 2),
    vector,
    st.booleans(),
)
sample = st.tuples(st.just("sample"), st.integers(1, 40))
bad_push = st.tuples(st.just("bad"), st.sampled_from(["action", "nan", "shape", "status"]))


def as_row(item) -> tuple:
    obs, action, reward, next_obs, status = item
    return (tuple(np.float32(obs).tolist()), action, float(np.float32(reward)),
            tuple(np.float32(next_obs).tolist()), status)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 12),
    ops=st.lists(st.one_of(push, sample, bad_push), max_size=80),
    seed=st.integers(0, 2**32),
)
def test_matches_a_list_model(capacity, ops, seed):
    buf = CircularBuffer(capacity, OBS_SIZE, N_ACTIONS)
    model = naive.ReplayModel(capacity)
    rng = Rng(seed)
    last_next_obs = None
    for op in ops:
        if op[0] == "push":
            _, obs, action, reward, status, next_obs, continues = op
            if continues and last_next_obs is not None:
                obs = last_next_obs
            item = (obs, action, reward, next_obs, status)
            buf.push(*item)
            model.push(as_row(item))
            last_next_obs = next_obs
        elif op[0] == "bad":
            args = {"obs": [0.0] * OBS_SIZE, "action": 0, "reward": 0.0,
                    "next_obs": [0.0] * OBS_SIZE, "status": 0}  # fmt: skip
            args.update({"action": {"action": N_ACTIONS}, "nan": {"reward": float("nan")},
                         "shape": {"obs": [0.0]}, "status": {"status": 3}}[op[1]])  # fmt: skip
            arrays = (buf.storage, buf.finals, buf.kernel_state.cursor)
            before = [a.tobytes() for a in arrays]
            try:
                buf.push(**args)
            except ValueError:
                pass
            else:
                raise AssertionError(f"a bad push was accepted: {op}")
            assert [a.tobytes() for a in arrays] == before
        else:
            n = op[1]
            if n > len(model.items):
                try:
                    buf.sample(n, rng)
                except ValueError:
                    continue
                raise AssertionError("sampling more than stored must fail")
            batch = buf.sample(n, rng)
            stored = set(model.items)
            for k in range(n):
                status = 1 if batch.masks[k] == 0.0 else None
                row = (tuple(batch.obs[k].tolist()), int(batch.actions[k]), float(batch.rewards[k]),
                       tuple(batch.next_obs[k].tolist()))  # fmt: skip
                matches = [r for r in stored if r[:4] == row]
                assert matches, f"sampled {row} is not stored"
                if status == 1:
                    assert any(r[4] == 1 for r in matches)  # only terminated stops bootstrapping
                else:
                    assert any(r[4] != 1 for r in matches)
        # invariants after every operation
        assert len(buf) == len(model.items)
        assert buf.is_full == (len(model.items) == capacity)
        assert buf.position == model.pos
        for slot, row in enumerate(model.items):
            assert as_row(buf.transition(slot)) == row
            # signed zeros too: the stored bits are the pushed bits
            assert buf.transition(slot)[3].tobytes() == np.float32(row[3]).tobytes()
        # finals rows: one per slot that does not share, plus released ones, never more
        shares = (buf.storage["next_ref"][: len(buf)] < 0).sum()
        cursor = buf.kernel_state.cursor
        assert cursor[ROWS] - cursor[N_FREE] == len(buf) - shares
        assert cursor[ROWS] <= capacity


@settings(max_examples=50, deadline=None)
@given(capacity=st.integers(1, 50), pushes=st.integers(0, 150), seed=st.integers(0, 1000))
def test_state_dict_round_trip_at_any_fill_level(capacity, pushes, seed):
    buf = CircularBuffer(capacity, OBS_SIZE, N_ACTIONS)
    data = np.random.default_rng(seed)
    obs = data.standard_normal(OBS_SIZE)
    for i in range(pushes):
        next_obs = data.standard_normal(OBS_SIZE)
        buf.push(obs, i % N_ACTIONS, float(i), next_obs, i % 3)
        obs = next_obs if data.random() < 0.8 else data.standard_normal(OBS_SIZE)
    other = CircularBuffer(capacity, OBS_SIZE, N_ACTIONS)
    other.load_state_dict(buf.state_dict())
    for key, value in buf.state_dict().items():
        assert other.state_dict()[key].tobytes() == value.tobytes(), key
    assert (other.position, len(other)) == (buf.position, len(buf))
    # the restored buffer shares exactly the next observations the original shares
    n = len(buf)
    np.testing.assert_array_equal(
        other.storage["next_ref"][:n] < 0, buf.storage["next_ref"][:n] < 0
    )
    # and goes on the same way: the same pushes, then the same samples
    for b in (buf, other):
        b.push(obs, 0, 0.0, obs + 1, 0)
        b.push(obs + 1, 1, 1.0, obs + 2, 0)
    if n:
        k = len(buf)
        a, b = buf.sample(k, Rng(seed)), other.sample(k, Rng(seed))
        for x, y in zip(a, b):
            assert x.tobytes() == y.tobytes()
