"""Compiled replay: the transition dtype, the buffer's arrays as one
:class:`ReplayState`, and the push / sample / priority kernels (numba, public to
the package). The storage layout, the n-step walk and the action-mask layout are
described in ``ember_np/dqn/replay/__init__.py``'s docstring; the Python classes that
check their inputs and call these kernels are :class:`~ember_np.dqn.replay.circular.CircularBuffer`
and :class:`~ember_np.dqn.replay.prioritized.PrioritizedBuffer`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ember_np._jit import inlined_kernel, kernel
from ember_np.dqn.replay.sumtree import clamp_priority, sample_stratified, set_one
from ember_np.rng import next_below
from ember_np.types import Batch, EpisodeStatus

F32 = np.dtype(np.float32)
F32_MAX = float(np.finfo(np.float32).max)
TERMINATED = int(EpisodeStatus.TERMINATED)
NO_F64 = np.empty(0, dtype=np.float64)
MAX_PRIORITY = 0  # tree[0]: the largest priority so far (the sum tree's unused node)


def transition_dtype(obs_size: int, num_actions: int) -> np.dtype:
    """The packed structured dtype of one stored transition.

    The action index is a uint8 for up to 256 actions (nearly every env),
    else an int32.
    """
    return np.dtype(
        [
            ("obs", np.float32, (obs_size,)),
            ("action", np.uint8 if num_actions <= 256 else np.int32),
            ("reward", np.float32),
            ("status", np.uint8),
            ("next_ref", np.int32),
        ]
    )


# Push error codes (0 = stored).
BAD_ACTION, BAD_REWARD, BAD_OBS, BAD_NEXT_OBS, BAD_STATUS, BAD_ENV = 1, 2, 3, 4, 5, 6

# cursor[]: int64 (CURSOR_LEN + capacity,), the buffer's mutable state besides
# storage and finals (one array: each array argument costs ~55 ns per push call).
#   POS      slot the next push writes to
#   SIZE     number of transitions stored
#   ROWS     finals rows ever used (rows [0, ROWS) have been written)
#   N_FREE   released rows, stacked in cursor[CURSOR_LEN : CURSOR_LEN + N_FREE]
#   PENDING  1 when the newest slot's next_obs is still in its own finals row,
#            waiting for the next push to show whether it continues
POS, SIZE, ROWS, N_FREE, PENDING = range(5)
CURSOR_LEN = 5
# A buffer of num_envs > 1 streams (segments) has, after the free-row stack,
# one block of CURSOR_LEN per stream with the head's layout: POS, SIZE and
# PENDING of that stream's segment, and in the places of ROWS and N_FREE the
# segment's first slot and the slot past its last (SEG_LO, SEG_HI). The head's
# SIZE then counts every stored transition, and its POS and PENDING are unused.
SEG_LO, SEG_HI = ROWS, N_FREE


class ReplayState(NamedTuple):
    """The buffer's arrays, passed to kernels as one value.

    storage : ndarray of :func:`transition_dtype`, shape (capacity,)
    finals : ndarray of float32, shape (capacity, obs_size)
    cursor : ndarray of int64, shape (CURSOR_LEN + capacity,), or
        (CURSOR_LEN * (1 + num_envs) + capacity,) when num_envs > 1
        ``POS, SIZE, ROWS, N_FREE, PENDING``, then the stack of free finals
        rows, then (num_envs > 1) each stream's block (:func:`segment_base`).
    num_actions : int
        Actions are indices in ``[0, num_actions)``.
    n_step : int >= 1
        Steps of the returns :func:`sample_into` computes (1: one-step transitions).
    gamma : float in [0, 1]
        The discount: sampled batches carry ``gamma * mask`` (one-step) or
        ``gamma^m * mask`` (m-step) per transition. The buffer is its one owner.
    tree : ndarray of float64, shape (2 * leaves,) or (0,)
        Prioritized replay's sum tree (:mod:`ember_np.dqn.replay.sumtree`: leaf
        ``leaves + i`` is slot i's priority); length 0 for uniform sampling.
        ``tree[0]``, which the sum tree leaves unused, holds the largest
        priority so far, given to each new transition (one array fewer to
        pass at every push).
    alpha, eps : float
        PER's priority p = (|td| + eps)^alpha (unused when ``tree`` is empty).
    next_action_masks : ndarray of uint8, shape (capacity, ceil(num_actions / 8)), or no rows
        Each slot's next-state legal actions as packed bits (``np.packbits``
        layout), in a buffer built with ``action_masks=True``; else 0 rows and
        no memory.
    num_envs : int >= 1
        Streams the slots are split into (``ember_np/dqn/replay/__init__.py``: one
        segment of consecutive slots per env of a vectorised env, each with
        its own cursor, so that continuation and n-step walks stay inside one
        env's stream). 1: one stream over every slot, the head's cursor.
    """

    storage: np.ndarray
    finals: np.ndarray
    cursor: np.ndarray
    num_actions: int
    n_step: int
    gamma: float
    tree: np.ndarray
    alpha: float
    eps: float
    next_action_masks: np.ndarray
    num_envs: int


def segment_bounds(capacity: int, num_envs: int, env: int) -> tuple[int, int]:
    """Slots [lo, hi) of stream ``env`` of ``num_envs`` over ``capacity`` slots.

    The first ``capacity % num_envs`` streams get one slot more than the
    others; precondition ``capacity >= num_envs`` (every stream has a slot).
    (Plain Python and compiled alike: the buffer's one home of the split.)
    """
    q, r = divmod(capacity, num_envs)
    lo = env * q + min(env, r)
    return lo, lo + q + (1 if env < r else 0)


@kernel
def segment_base(buf: ReplayState, env: int) -> int:
    """Where stream ``env``'s POS, SIZE and PENDING are in ``buf.cursor`` (0: the head)."""
    if buf.num_envs == 1:
        return 0
    return CURSOR_LEN + buf.storage.shape[0] + CURSOR_LEN * env


@kernel
def segment_of(buf: ReplayState, slot: int) -> int:
    """The stream whose segment holds ``slot`` (int in [0, capacity)); see segment_bounds."""
    q, r = divmod(buf.storage.shape[0], buf.num_envs)
    wide = r * (q + 1)  # the first r segments have q + 1 slots
    return slot // (q + 1) if slot < wide else r + (slot - wide) // q


@kernel
def following_slot(buf: ReplayState, slot: int) -> int:
    """The slot after ``slot`` in its stream's ring (the whole buffer when num_envs == 1)."""
    capacity = buf.storage.shape[0]
    if buf.num_envs == 1:
        return slot + 1 if slot + 1 < capacity else 0
    b = segment_base(buf, segment_of(buf, slot))
    return slot + 1 if slot + 1 < buf.cursor[b + SEG_HI] else buf.cursor[b + SEG_LO]


@kernel
def newest_slot(buf: ReplayState, slot: int) -> int:
    """The newest stored slot of ``slot``'s stream (the one its POS wrote last)."""
    b = 0 if buf.num_envs == 1 else segment_base(buf, segment_of(buf, slot))
    lo = 0 if b == 0 else buf.cursor[b + SEG_LO]
    hi = buf.storage.shape[0] if b == 0 else buf.cursor[b + SEG_HI]
    pos = buf.cursor[b + POS]
    return pos - 1 if pos > lo else hi - 1


@kernel
def stored_slot(buf: ReplayState, k: int) -> int:
    """The slot of the k-th stored transition (k in [0, len)): streams in order,
    each stream's slots from its first; with one stream, slot k."""
    if buf.num_envs == 1:
        return k
    cursor = buf.cursor
    for env in range(buf.num_envs):
        b = segment_base(buf, env)
        size = cursor[b + SIZE]
        if k < size:
            return cursor[b + SEG_LO] + k
        k -= size
    return -1  # unreachable for k < len


@kernel
def release_row(cursor: np.ndarray, row: int) -> None:
    """Push finals row ``row`` (int, in use until now) onto the free stack in
    ``cursor`` (int64 (CURSOR_LEN + capacity,), updated in place)."""
    cursor[CURSOR_LEN + cursor[N_FREE]] = row
    cursor[N_FREE] += 1


@inlined_kernel
def push_transition(
    buf: ReplayState,
    env: int,
    obs: np.ndarray,
    action: int,
    reward: float,
    next_obs: np.ndarray,
    status: int,
    next_mask: np.ndarray,
) -> int:
    """Validate one transition, then write it at its stream's POS and advance.

    Every value is checked here, so callers need not pre-validate.

    Parameters
    ----------
    buf : ReplayState
        storage, finals and cursor (and next_action_masks) are updated in place.
    env : int in [0, buf.num_envs)
        The stream (env of a vectorised env) the transition belongs to: it is
        written in that stream's segment, and only that stream's previous
        transition can continue into it.
    obs, next_obs : ndarray of float32, shape (obs_size,)
        C-contiguous (the bits of ``obs`` are compared with the previous
        transition's parked ``next_obs``).
    action : int
    reward : float
    status : int
        An EpisodeStatus value.
    next_mask : ndarray of bool, shape (num_actions,) or (0,)
        The next state's legal actions (at least one True, checked by callers),
        or length 0 for all legal; packed into ``buf.next_action_masks`` when it
        has rows (ignored otherwise).

    Returns
    -------
    int
        0, or an error code (BAD_ACTION ... BAD_STATUS) with nothing written.
    """
    storage = buf.storage
    finals = buf.finals
    cursor = buf.cursor
    if action < 0 or action >= buf.num_actions:
        return BAD_ACTION
    if not np.isfinite(np.float32(reward)):  # as stored: 1e39 is finite, its float32 is not
        return BAD_REWARD
    for j in range(obs.shape[0]):
        if not np.isfinite(obs[j]):
            return BAD_OBS
        if not np.isfinite(next_obs[j]):
            return BAD_NEXT_OBS
    if status < 0 or status > 2:
        return BAD_STATUS
    if env < 0 or env >= buf.num_envs:
        return BAD_ENV
    b = segment_base(buf, env)  # 0 for one stream: the head's POS, SIZE, PENDING
    lo = 0 if b == 0 else cursor[b + SEG_LO]
    hi = storage.shape[0] if b == 0 else cursor[b + SEG_HI]
    capacity = hi - lo
    i = cursor[b + POS]
    if cursor[b + SIZE] == capacity and storage[i].next_ref >= 0:
        release_row(cursor, storage[i].next_ref)  # the overwritten transition's row
    if cursor[b + PENDING] != 0 and capacity > 1:
        # Does the previous transition continue into this one? Compare bits, so
        # that -0.0 and 0.0 stay apart and the stored next_obs is exact.
        prev = storage[i - 1 if i > lo else hi - 1]
        row = prev.next_ref
        parked, incoming = finals[row].view(np.uint32), obs.view(np.uint32)
        j = 0
        while j < obs.shape[0] and parked[j] == incoming[j]:
            j += 1
        if j == obs.shape[0]:
            prev.next_ref = -1
            release_row(cursor, row)
    if cursor[N_FREE] > 0:
        cursor[N_FREE] -= 1
        row = cursor[CURSOR_LEN + cursor[N_FREE]]
    else:
        row = cursor[ROWS]
        cursor[ROWS] = row + 1
    rec = storage[i]
    for j in range(obs.shape[0]):
        rec.obs[j] = obs[j]
        finals[row, j] = next_obs[j]
    rec.action = action
    rec.reward = reward
    rec.status = status
    rec.next_ref = row
    if buf.next_action_masks.shape[0] > 0:
        pack_mask(next_mask, buf.num_actions, buf.next_action_masks[i])
    cursor[b + PENDING] = 1
    cursor[b + POS] = i + 1 if i + 1 < hi else lo
    if cursor[b + SIZE] < capacity:
        cursor[b + SIZE] += 1
        if b != 0:
            cursor[SIZE] += 1  # the head counts every stream's transitions
    if buf.tree.shape[0] > 0:  # prioritized: a new transition gets the largest priority
        set_one(buf.tree, i, buf.tree[MAX_PRIORITY])
    return 0


@kernel
def pack_mask(legal: np.ndarray, n_actions: int, bits: np.ndarray) -> None:
    """``np.packbits(legal)`` into ``bits``; a ``legal`` of length 0 packs all ``n_actions`` set.

    legal : bool (n_actions,) or (0,); bits : uint8 (ceil(n_actions / 8),), written.
    Action j is bit ``7 - j % 8`` of byte ``j // 8``; padding bits are 0.
    """
    all_legal = legal.shape[0] == 0
    for b in range(bits.shape[0]):
        v = 0
        for k in range(8):
            j = 8 * b + k
            if j < n_actions and (all_legal or legal[j]):
                v |= 1 << (7 - k)
        bits[b] = v


@kernel
def sample_into(buf: ReplayState, rng_state: np.ndarray, out: Batch, beta: float) -> None:
    """Gather ``len(out.actions)`` transitions drawn from the stored ones.

    Draw every slot first (uniformly with replacement, or by priority), then
    gather: the kind of draw and of gather is chosen once per call, never per row.

    Parameters
    ----------
    buf : ReplayState
        Holding at least one transition (read only).
    rng_state : ndarray of uint64, shape (4,)
        A PCG64 state advanced in place (one draw per row).
    out : Batch
        B rows, written: obs/next_obs float32 (B, obs_size), actions int64
        (B,), rewards float32 (B,), masks float32 (B,) (0 where terminated),
        discounts (B,) (gamma * mask; gamma^m * mask for n-step returns, see
        the module docstring; their dtype, float64 for one-step batches and
        float32 for n-step ones, sets the TD target's precision); with a sum
        tree also indices (B,) and weights (B,) (see :func:`draw_prioritized`);
        next_action_masks uint8 (B, n_bytes) from a masked buffer (else not read).
    beta : float in [0, 1]
        PER's importance-sampling exponent (else unused).
    """
    batch_size = out.actions.shape[0]
    if buf.tree.shape[0] > 0:
        slots = out.indices
        draw_prioritized(buf, rng_state, beta, slots, out.weights)
    elif buf.n_step == 1:  # the plain path: one pass, each row drawn as it is copied
        gather_one_step(buf, out.actions, out, rng_state, True)
        return
    else:
        # The slots go into out.actions (int64 (B,)): each row's gather reads
        # its slot before writing its action over it, and no allocation is needed.
        slots = out.actions
        size = buf.cursor[SIZE]
        for k in range(batch_size):
            slots[k] = stored_slot(buf, next_below(rng_state, size))
    if buf.n_step > 1:
        gather_n_step(buf, slots, out)
    else:
        gather_one_step(buf, slots, out, rng_state, False)


@kernel
def gather_one_step(
    buf: ReplayState, slots: np.ndarray, out: Batch, rng_state: np.ndarray, draw: bool
) -> None:
    """Copy the transitions in ``slots`` (int64 (B,); may be ``out.actions``:
    row k reads slots[k] before it writes actions[k]) into ``out`` (all but
    weights and indices; discounts (B,) get gamma * mask;
    next_action_masks from a masked buffer).

    With ``draw`` each row's slot is instead drawn uniformly from
    ``rng_state`` (uint64 (4,), advanced) as the row is copied, and ``slots``
    is not read: the plain path's one pass, in which the draw's arithmetic
    overlaps the copy's loads.

    The copy is written out here rather than in a helper: a helper call per
    transition costs more than the gather itself.
    """
    size = buf.cursor[SIZE]
    storage = buf.storage
    finals = buf.finals
    obs = out.obs
    actions = out.actions
    rewards = out.rewards
    next_obs = out.next_obs
    masks = out.masks
    discounts = out.discounts
    gamma = buf.gamma
    n = obs.shape[1]
    capacity = storage.shape[0]
    legal = buf.next_action_masks
    masked = legal.shape[0] > 0
    legal_out = out.next_action_masks
    one = buf.num_envs == 1
    for k in range(slots.shape[0]):
        i = stored_slot(buf, next_below(rng_state, size)) if draw else slots[k]
        rec = storage[i]
        for j in range(n):
            obs[k, j] = rec.obs[j]
        row = rec.next_ref
        if row < 0:
            after = (i + 1 if i + 1 < capacity else 0) if one else following_slot(buf, i)
            following = storage[after]
            for j in range(n):
                next_obs[k, j] = following.obs[j]
        else:
            for j in range(n):
                next_obs[k, j] = finals[row, j]
        actions[k] = rec.action
        rewards[k] = rec.reward
        mask = 0.0 if rec.status == TERMINATED else 1.0
        masks[k] = mask
        discounts[k] = gamma * mask
        if masked:
            for j in range(legal.shape[1]):
                legal_out[k, j] = legal[i, j]


@kernel
def gather_n_step(buf: ReplayState, slots: np.ndarray, out: Batch) -> None:
    """The n-step gather (``buf.n_step > 1``): m-step returns (module docstring).

    slots : int64 (B,) (may be ``out.actions``, as for :func:`gather_one_step`).
    Writes every field of ``out`` but weights and indices; ``out.discounts``
    (B,) gets gamma^m * mask; a masked buffer's ``out.next_action_masks`` gets
    slot t+m-1's next-state mask (that of the state the return bootstraps from).
    """
    storage = buf.storage
    legal = buf.next_action_masks
    masked = legal.shape[0] > 0
    finals = buf.finals
    newest = buf.cursor[POS] - 1 if buf.cursor[POS] > 0 else storage.shape[0] - 1
    capacity = storage.shape[0]
    gamma = buf.gamma
    n_step = buf.n_step
    n = out.obs.shape[1]
    one = buf.num_envs == 1
    for k in range(slots.shape[0]):
        i = slots[k]
        rec = storage[i]
        for j in range(n):
            out.obs[k, j] = rec.obs[j]
        out.actions[k] = rec.action
        if not one:  # the walk stays in slot i's stream
            newest = newest_slot(buf, i)
        # Walk t, t+1, ... while the transition continues into the next slot.
        last = i
        total = 0.0
        discount = 1.0
        for m in range(n_step):
            step = storage[last]
            total += discount * step.reward
            discount *= gamma
            if m + 1 == n_step or step.status != 0 or step.next_ref >= 0 or last == newest:
                break
            last = (last + 1 if last + 1 < capacity else 0) if one else following_slot(buf, last)
        step = storage[last]
        row = step.next_ref
        if row < 0:
            after = (last + 1 if last + 1 < capacity else 0) if one else following_slot(buf, last)
            following = storage[after]
            for j in range(n):
                out.next_obs[k, j] = following.obs[j]
        else:
            for j in range(n):
                out.next_obs[k, j] = finals[row, j]
        if masked:
            for j in range(legal.shape[1]):
                out.next_action_masks[k, j] = legal[last, j]
        mask = 0.0 if step.status == TERMINATED else 1.0
        out.rewards[k] = total
        out.masks[k] = mask
        out.discounts[k] = discount * mask


@kernel
def draw_prioritized(buf: ReplayState, rng_state: np.ndarray, beta: float, indices: np.ndarray,
                      weights: np.ndarray) -> None:  # fmt: skip
    """Draw ``len(indices)`` slots in proportion to their priorities, with IS weights.

    Stratified (Schaul et al. 2016, appendix B.2.1): the total priority is cut
    into B equal segments and one slot drawn in each (``sample_stratified``
    of :mod:`ember_np.dqn.replay.sumtree`), so each draw has P(i) = p_i / sum_j p_j.

    indices : int64 (B,), written; weights : float32 (B,), written with
    w_i = (N * P(i))^(-beta) / max_j (N * P(j))^(-beta) over the batch,
    N = the number of stored transitions. rng_state: B draws.
    """
    tree = buf.tree
    sample_stratified(tree, rng_state, indices)
    leaves = tree.shape[0] // 2
    # w_i / max_j w_j = (p_i / p_min)^(-beta), p_min the batch's smallest
    # priority (N and the total cancel); the smallest gets exactly 1.
    smallest = tree[leaves + indices[0]]
    for k in range(indices.shape[0]):
        smallest = min(smallest, tree[leaves + indices[k]])
    for k in range(indices.shape[0]):
        p = tree[leaves + indices[k]]
        weights[k] = 1.0 if p == smallest else (p / smallest) ** (-beta)


@kernel
def update_priorities(buf: ReplayState, indices: np.ndarray, td_errors: np.ndarray) -> None:
    """Set p_i = (|td_i| + eps)^alpha for each sampled slot; track the largest priority.

    Each p_i is clamped to [MIN_PRIORITY, max_priority(leaves)] (sumtree.py's
    :func:`clamp_priority`), so the tree's total stays finite and positive. A
    slot sampled twice in the batch keeps its last priority.

    Parameters
    ----------
    buf : ReplayState
        With a sum tree (updated in place, the largest priority in tree[0] too).
    indices : ndarray of int64, shape (B,)
        Precondition: each in ``[0, capacity)``.
    td_errors : ndarray of float32, shape (B,)
        Precondition: finite.
    """
    tree = buf.tree
    leaves = tree.shape[0] // 2
    for k in range(indices.shape[0]):
        # clamped: (|td| + eps)^alpha may overflow (alpha 1000) or underflow (eps 1e-300)
        p = clamp_priority((abs(td_errors[k]) + buf.eps) ** buf.alpha, leaves)
        set_one(tree, indices[k], p)
        if p > tree[MAX_PRIORITY]:
            tree[MAX_PRIORITY] = p
