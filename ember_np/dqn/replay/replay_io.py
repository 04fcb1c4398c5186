"""The replay buffer's streams and its state: where each env's segment is, which
slots hold transitions, and the stored transitions as plain arrays
(:meth:`CircularBuffer.state_dict <ember_np.dqn.replay.circular.CircularBuffer.state_dict>`)
and back.

A buffer of ``num_envs`` streams splits its slots into ``num_envs`` segments
of consecutive slots (:func:`~ember_np.dqn.replay.replay_kernels.segment_bounds`),
each a ring of its own with its own POS, SIZE and PENDING in the cursor (see
``replay_kernels.py``). With one stream the head of the cursor is that
stream's, exactly as before streams existed, and the state's format is
unchanged; with more, the state gains ``segments`` = [pos, size] per stream
and lists each stream's stored slots in turn.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ember_np.dqn.replay.replay_kernels import (
    CURSOR_LEN,
    PENDING,
    POS,
    ROWS,
    SEG_HI,
    SEG_LO,
    SIZE,
    segment_bounds,
)

__all__ = [
    "Segment",
    "check_segments",
    "check_transition_arrays",
    "clear_cursor",
    "load_segments",
    "new_cursor",
    "segments_of",
    "state_arrays",
    "stored_slots",
]


class Segment(NamedTuple):
    """One stream's slots: [lo, hi), the next slot to write and how many are stored."""

    lo: int
    hi: int
    pos: int
    size: int


def new_cursor(capacity: int, num_envs: int) -> np.ndarray:
    """An empty buffer's cursor (int64): the head, the free-row stack, and with
    ``num_envs`` > 1 each stream's block (POS at its first slot, SEG_LO, SEG_HI)."""
    blocks = CURSOR_LEN * num_envs if num_envs > 1 else 0
    cursor = np.zeros(CURSOR_LEN + capacity + blocks, dtype=np.int64)
    if num_envs > 1:
        for env in range(num_envs):
            lo, hi = segment_bounds(capacity, num_envs, env)
            b = CURSOR_LEN + capacity + CURSOR_LEN * env
            cursor[b + POS], cursor[b + SEG_LO], cursor[b + SEG_HI] = lo, lo, hi
    return cursor


def segments_of(cursor: np.ndarray, capacity: int, num_envs: int) -> list[Segment]:
    """Each stream's :class:`Segment`, read from ``cursor``."""
    if num_envs == 1:
        return [Segment(0, capacity, int(cursor[POS]), int(cursor[SIZE]))]
    out = []
    for env in range(num_envs):
        b = CURSOR_LEN + capacity + CURSOR_LEN * env
        out.append(Segment(int(cursor[b + SEG_LO]), int(cursor[b + SEG_HI]),
                           int(cursor[b + POS]), int(cursor[b + SIZE])))  # fmt: skip
    return out


def clear_cursor(cursor: np.ndarray, capacity: int, num_envs: int) -> None:
    """Forget every stored transition: each stream empty, writing from its first slot."""
    cursor[:CURSOR_LEN] = 0  # the free-row stack is empty; its old rows are unread
    for env, seg in enumerate(segments_of(cursor, capacity, num_envs)):
        if num_envs > 1:
            b = CURSOR_LEN + capacity + CURSOR_LEN * env
            cursor[b + POS], cursor[b + SIZE], cursor[b + PENDING] = seg.lo, 0, 0


def stored_slots(segments: list[Segment]) -> np.ndarray:
    """The stored slots, int64: each stream's from its first slot, streams in order
    (with one stream, 0 .. len - 1: the order of ``state_dict`` and ``priorities``)."""
    parts = [np.arange(s.lo, s.lo + s.size, dtype=np.int64) for s in segments]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def state_arrays(storage: np.ndarray, finals: np.ndarray, segments: list[Segment]) -> dict:
    """``obs``, ``action``, ``reward``, ``next_obs``, ``status`` of the stored
    slots (:func:`stored_slots` order), every next_obs written out."""
    parts = []
    for seg in segments:
        part = storage[seg.lo : seg.hi]
        n = seg.size
        s = part[:n]
        # Every slot's following obs in its ring (slot n is unused or, when
        # full, the first), then the rows that are not shared.
        after = part["obs"]
        last = n % (seg.hi - seg.lo)
        next_obs = np.concatenate([after[1:n], after[last : last + min(n, 1)]])
        own = np.flatnonzero(s["next_ref"] >= 0)
        next_obs[own] = finals[s["next_ref"][own]]
        parts.append((s, next_obs))
    return {
        "obs": np.concatenate([s["obs"] for s, _ in parts]),
        "action": np.concatenate([s["action"] for s, _ in parts]).astype(np.int32),
        "reward": np.concatenate([s["reward"] for s, _ in parts]),
        "next_obs": np.concatenate([nx for _, nx in parts]),
        "status": np.concatenate([s["status"] for s, _ in parts]),
    }


def check_segments(state: dict, capacity: int) -> list[Segment]:
    """The streams a state describes (ValueError unless consistent with ``capacity``).

    ``cursor`` = [position, size, capacity]; with streams, ``segments`` =
    int (num_envs, 2) of [position, size] per stream, position absolute.
    """
    cursor = np.asarray(state["cursor"])
    if cursor.shape != (3,) or cursor.dtype.kind not in "iu":
        raise ValueError(f"replay buffer 'cursor' must be 3 integers, found shape {cursor.shape}")
    pos, n, cap = (int(c) for c in cursor)
    if cap != capacity:
        raise ValueError(f"replay buffer capacity mismatch: expected {capacity}, found {cap}")
    if "segments" not in state:
        if not (0 <= n <= cap and 0 <= pos < cap and (n == cap or pos == n)):
            raise ValueError(
                f"replay buffer cursor is inconsistent: position {pos}, size {n}, capacity {cap}"
            )
        return [Segment(0, cap, pos, n)]
    table = np.asarray(state["segments"])
    if table.ndim != 2 or table.shape[1] != 2 or table.dtype.kind not in "iu":
        raise ValueError(
            f"replay buffer 'segments' must be integers of shape (num_envs, 2), found "
            f"{table.dtype} of shape {table.shape}"
        )
    num_envs = table.shape[0]
    if not 2 <= num_envs <= cap:
        raise ValueError(f"replay buffer 'segments' must have 2 to {cap} rows, found {num_envs}")
    out = []
    for env, (p, size) in enumerate(table.tolist()):
        lo, hi = segment_bounds(cap, num_envs, env)
        if not (0 <= size <= hi - lo and lo <= p < hi and (size == hi - lo or p == lo + size)):
            raise ValueError(
                f"replay buffer segment {env} is inconsistent: position {p}, size {size}, "
                f"slots [{lo}, {hi})"
            )
        out.append(Segment(lo, hi, int(p), int(size)))
    if sum(s.size for s in out) != n:
        raise ValueError(f"replay buffer 'segments' hold {sum(s.size for s in out)} "
                         f"transitions but 'cursor' says {n}")  # fmt: skip
    return out


def load_segments(
    storage: np.ndarray, finals: np.ndarray, cursor: np.ndarray, state: dict,
    segments: list[Segment],
) -> np.ndarray:  # fmt: skip
    """Write a checked state's transitions into the arrays and set ``cursor``.

    Within each stream, a slot whose next_obs has the bits of the following
    slot's obs shares it, as a push would have decided; each stream's newest
    slot keeps its own row until its next push. Returns the stored slots.
    """
    capacity = storage.shape[0]
    slots = stored_slots(segments)
    for key in ("obs", "action", "reward", "status"):
        storage[key][slots] = state[key]
    cursor[:] = new_cursor(capacity, len(segments)) if len(segments) > 1 else 0
    rows = 0
    start = 0
    for env, seg in enumerate(segments):
        n = seg.size
        b = 0 if len(segments) == 1 else CURSOR_LEN + capacity + CURSOR_LEN * env
        cursor[b + POS] = seg.pos
        if not n:
            continue
        obs = np.ascontiguousarray(state["obs"][start : start + n]).view(np.uint32)
        next_obs = np.ascontiguousarray(state["next_obs"][start : start + n])
        bits = next_obs.view(np.uint32)
        shared = np.empty(n, dtype=bool)  # next_obs[i] has the bits of obs[i + 1 (mod n)]
        shared[:-1] = (bits[:-1] == obs[1:]).all(axis=1)
        shared[-1] = (bits[-1] == obs[0]).all()
        shared[(seg.pos - seg.lo - 1) % n] = False  # the newest slot: its successor is not stored
        own = np.flatnonzero(~shared)
        refs = np.full(n, -1, dtype=np.int32)
        refs[own] = np.arange(rows, rows + own.size, dtype=np.int32)
        storage["next_ref"][seg.lo : seg.lo + n] = refs
        finals[rows : rows + own.size] = next_obs[own]
        rows += own.size
        cursor[b + SIZE], cursor[b + PENDING] = n, 1
        start += n
    cursor[SIZE], cursor[ROWS] = start, rows
    return slots


def check_transition_arrays(state: dict, n: int, obs_size: int, num_actions: int) -> None:
    """ValueError unless ``state`` holds ``n`` transitions of the right shapes, dtypes
    and values (actions in [0, num_actions), statuses in {0, 1, 2})."""
    expected = {
        "obs": ((n, obs_size), np.float32),
        "action": ((n,), np.int32),
        "reward": ((n,), np.float32),
        "next_obs": ((n, obs_size), np.float32),
        "status": ((n,), np.uint8),
    }
    for key, (shape, dtype) in expected.items():
        arr = np.asarray(state[key])
        if arr.shape != shape or arr.dtype != dtype:
            raise ValueError(
                f"replay buffer {key!r}: expected {np.dtype(dtype)} of shape {shape}, "
                f"found {arr.dtype} of shape {arr.shape}"
            )
    actions = np.asarray(state["action"])
    if n and (actions.min() < 0 or actions.max() >= num_actions):
        raise ValueError(f"replay buffer 'action' has values outside [0, {num_actions})")
    if n and np.asarray(state["status"]).max() > 2:
        raise ValueError("replay buffer 'status' has values outside {0, 1, 2}")
