"""Property tests: CircularBuffer against a plain-Python model of the same buffer."""

from __future__ import annotations

import naive
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ember_np import CircularBuffer, Rng

OBS_SIZE = 3
N_ACTIONS = 4

push = st.tuples(
    st.just("push"),
    st.lists(st.floats(-1e6, 1e6, width=32), min_size=OBS_SIZE, max_size=OBS_SIZE),
    st.integers(0, N_ACTIONS - 1),
    st.floats(-1e6, 1e6, width=32),
    st.integers(0, 2),
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
    for op in ops:
        if op[0] == "push":
            _, obs, action, reward, status = op
            next_obs = [v / 2 for v in obs]
            item = (obs, action, reward, next_obs, status)
            buf.push(*item)
            model.push(as_row(item))
        elif op[0] == "bad":
            args = {"obs": [0.0] * OBS_SIZE, "action": 0, "reward": 0.0,
                    "next_obs": [0.0] * OBS_SIZE, "status": 0}  # fmt: skip
            args.update({"action": {"action": N_ACTIONS}, "nan": {"reward": float("nan")},
                         "shape": {"obs": [0.0]}, "status": {"status": 3}}[op[1]])  # fmt: skip
            before = buf.storage.tobytes()
            try:
                buf.push(**args)
            except ValueError:
                pass
            else:
                raise AssertionError(f"a bad push was accepted: {op}")
            assert buf.storage.tobytes() == before
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
            rec = buf.storage[slot]
            assert as_row((rec["obs"], int(rec["action"]), rec["reward"], rec["next_obs"],
                           int(rec["status"]))) == row  # fmt: skip


@settings(max_examples=50, deadline=None)
@given(capacity=st.integers(1, 50), pushes=st.integers(0, 150), seed=st.integers(0, 1000))
def test_state_dict_round_trip_at_any_fill_level(capacity, pushes, seed):
    buf = CircularBuffer(capacity, OBS_SIZE, N_ACTIONS)
    data = np.random.default_rng(seed)
    for i in range(pushes):
        obs = data.standard_normal(OBS_SIZE)
        buf.push(obs, i % N_ACTIONS, float(i), obs, i % 3)
    other = CircularBuffer(capacity, OBS_SIZE, N_ACTIONS)
    other.load_state_dict(buf.state_dict())
    n = len(buf)
    assert other.storage[:n].tobytes() == buf.storage[:n].tobytes()
    assert (other.position, len(other)) == (buf.position, len(buf))
