"""CircularBuffer: a fixed-capacity replay buffer in one structured NumPy array.

Each stored transition is one record of :func:`transition_dtype`::

    obs       float32 (obs_size,)
    action    uint8 (int32 for more than 256 actions)
    reward    float32
    status    uint8   (EpisodeStatus: 0 continuing, 1 terminated, 2 truncated)
    next_ref  int32   where next_obs is: -1 = the next slot's obs, else a row of ``finals``

The next observation of a transition is, almost always, the observation of
the transition pushed right after it, so it is stored once: in the next
slot. Only where it is not (an episode's last step, terminated or truncated,
or a stream that jumps) does it go to a row of a separate ``finals`` array.
A push writes its ``next_obs`` to a finals row; the next push, if its ``obs``
has the same bits, releases that row and marks the previous slot
``next_ref = -1``. Rows are recycled through a free list, so ``finals`` only
ever holds (in memory that is touched) the rows in use at once: about one per
episode in the buffer. A CartPole transition costs 26 bytes (41 with
``next_obs`` in every record and an int32 action; SB3's ``ReplayBuffer``
52). Unlike SB3's ``optimize_memory_usage``, a truncated transition keeps
its true final observation.

Push and sample are ``@njit`` kernels that take the arrays themselves; numba
compiles one version per observation size, cached on disk like every kernel.
Sampling is uniform with replacement over the stored transitions, drawn from
an explicit :class:`~ember_np.rng.Rng` (:class:`PrioritizedBuffer`: in
proportion to priorities, from a sum tree).

n-step returns (``n_step > 1``) are computed at sample time from this layout,
so nothing is stored twice. A transition in slot t *continues* into slot t+1
when its status is CONTINUING and its next_obs is slot t+1's obs (``next_ref
== -1``, the rule above: bitwise equal); that is what an episode stream is
here. With two streams pushed alternately (vectorised envs), no transition
continues into the next slot, and every return is a 1-step one: the buffer
never mixes streams. For slot t, the walk takes m = 1 + the number of
continuing links from t, at most n, stopping at a terminated or truncated
transition, at a jump, and at the newest stored transition (the write
cursor). Then

    reward    = sum_{k<m} gamma^k r_{t+k}
    next_obs  = the next observation of slot t+m-1
    discount  = gamma^m * (0 if slot t+m-1 terminated else 1)

A transition whose n steps are not all stored yet (the newest n-1 of a
running episode) uses what is stored, with its smaller m; as returns are
computed at every sample, a later sample sees the longer return.

A buffer built with ``action_masks=True`` also keeps each transition's
next-state action mask in ``next_action_masks``, ceil(num_actions / 8) bytes
of packed bits per slot (Taxi-v3: 1 byte), and sampled batches carry them to
the TD target; otherwise that array has no rows and push and sample skip it.
An n-step return's mask is that of the state it bootstraps from: the next
state of slot t+m-1.
"""

from __future__ import annotations

import operator
from typing import Any, NamedTuple, NoReturn

import numpy as np

from ember_np._arrays import as_f32
from ember_np._jit import entry_point, kernel
from ember_np._masks import ALL_LEGAL, check_action_mask, packed_mask_bytes
from ember_np._validate import check_int
from ember_np.dqn.sumtree import _sample_stratified, _set_one, clamp_priority, max_priority
from ember_np.rng import Rng, next_below
from ember_np.types import Batch, EpisodeStatus

__all__ = ["Batch", "CircularBuffer", "PrioritizedBuffer", "transition_dtype"]

_F32 = np.dtype(np.float32)
_F32_MAX = float(np.finfo(np.float32).max)
_ND = np.ndarray
_TERMINATED = int(EpisodeStatus.TERMINATED)
_NO_F64 = np.empty(0, dtype=np.float64)
_MAX_PRIORITY = 0  # tree[0]: the largest priority so far (the sum tree's unused node)


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
_BAD_ACTION, _BAD_REWARD, _BAD_OBS, _BAD_NEXT_OBS, _BAD_STATUS = 1, 2, 3, 4, 5

# cursor[]: int64 (CURSOR_LEN + capacity,), the buffer's mutable state besides
# storage and finals (one array: each array argument costs ~55 ns per push call).
#   POS      slot the next push writes to
#   SIZE     number of transitions stored
#   ROWS     finals rows ever used (rows [0, ROWS) have been written)
#   N_FREE   released rows, stacked in cursor[CURSOR_LEN : CURSOR_LEN + N_FREE]
#   PENDING  1 when the newest slot's next_obs is still in its own finals row,
#            waiting for the next push to show whether it continues
_POS, _SIZE, _ROWS, _N_FREE, _PENDING = range(5)
CURSOR_LEN = 5


class ReplayState(NamedTuple):
    """The buffer's arrays, passed to kernels as one value.

    storage : ndarray of :func:`transition_dtype`, shape (capacity,)
    finals : ndarray of float32, shape (capacity, obs_size)
    cursor : ndarray of int64, shape (CURSOR_LEN + capacity,)
        ``POS, SIZE, ROWS, N_FREE, PENDING``, then the stack of free finals rows.
    num_actions : int
        Actions are indices in ``[0, num_actions)``.
    n_step : int >= 1
        Steps of the returns :func:`_sample` computes (1: one-step transitions).
    gamma : float in [0, 1]
        Discount of those returns (read only when ``n_step > 1``).
    tree : ndarray of float64, shape (2 * leaves,) or (0,)
        Prioritized replay's sum tree (:mod:`ember_np.dqn.sumtree`: leaf
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


@kernel
def _release(cursor: np.ndarray, row: int) -> None:
    """Push finals row ``row`` (int, in use until now) onto the free stack in
    ``cursor`` (int64 (CURSOR_LEN + capacity,), updated in place)."""
    cursor[CURSOR_LEN + cursor[_N_FREE]] = row
    cursor[_N_FREE] += 1


@kernel
def _push(
    buf: ReplayState,
    obs: np.ndarray,
    action: int,
    reward: float,
    next_obs: np.ndarray,
    status: int,
    next_mask: np.ndarray,
) -> int:
    """Validate one transition, then write it at ``cursor[POS]`` and advance.

    buf : ReplayState; storage, finals and cursor are updated in place.
    obs, next_obs : float32 (obs_size,), C-contiguous (the bits of ``obs`` are
        compared with the previous transition's parked ``next_obs``).
    action : int; reward : float; status : int (EpisodeStatus value).
    next_mask : bool (num_actions,) with at least one True (checked by callers),
        or (0,) for all legal: the next state's legal actions, packed into
        ``buf.next_action_masks`` when it has rows (ignored otherwise).

    Returns 0, or an error code (_BAD_ACTION ... _BAD_STATUS) with nothing
    written: every value is checked here, so callers need not pre-validate.
    """
    storage = buf.storage
    finals = buf.finals
    cursor = buf.cursor
    if action < 0 or action >= buf.num_actions:
        return _BAD_ACTION
    if not np.isfinite(np.float32(reward)):  # as stored: 1e39 is finite, its float32 is not
        return _BAD_REWARD
    for j in range(obs.shape[0]):
        if not np.isfinite(obs[j]):
            return _BAD_OBS
        if not np.isfinite(next_obs[j]):
            return _BAD_NEXT_OBS
    if status < 0 or status > 2:
        return _BAD_STATUS
    capacity = storage.shape[0]
    i = cursor[_POS]
    if cursor[_SIZE] == capacity and storage[i].next_ref >= 0:
        _release(cursor, storage[i].next_ref)  # the overwritten transition's row
    if cursor[_PENDING] != 0 and capacity > 1:
        # Does the previous transition continue into this one? Compare bits, so
        # that -0.0 and 0.0 stay apart and the stored next_obs is exact.
        prev = storage[i - 1 if i > 0 else capacity - 1]
        row = prev.next_ref
        parked, incoming = finals[row].view(np.uint32), obs.view(np.uint32)
        j = 0
        while j < obs.shape[0] and parked[j] == incoming[j]:
            j += 1
        if j == obs.shape[0]:
            prev.next_ref = -1
            _release(cursor, row)
    if cursor[_N_FREE] > 0:
        cursor[_N_FREE] -= 1
        row = cursor[CURSOR_LEN + cursor[_N_FREE]]
    else:
        row = cursor[_ROWS]
        cursor[_ROWS] = row + 1
    rec = storage[i]
    for j in range(obs.shape[0]):
        rec.obs[j] = obs[j]
        finals[row, j] = next_obs[j]
    rec.action = action
    rec.reward = reward
    rec.status = status
    rec.next_ref = row
    if buf.next_action_masks.shape[0] > 0:
        _pack_mask(next_mask, buf.num_actions, buf.next_action_masks[i])
    cursor[_PENDING] = 1
    cursor[_POS] = i + 1 if i + 1 < capacity else 0
    if cursor[_SIZE] < capacity:
        cursor[_SIZE] += 1
    if buf.tree.shape[0] > 0:  # prioritized: a new transition gets the largest priority
        _set_one(buf.tree, i, buf.tree[_MAX_PRIORITY])
    return 0


@kernel
def _pack_mask(legal: np.ndarray, n_actions: int, bits: np.ndarray) -> None:
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
def _sample(buf: ReplayState, rng_state: np.ndarray, out: Batch, beta: float) -> None:
    """Gather ``len(out.actions)`` transitions drawn from the stored ones.

    buf : ReplayState holding at least one transition (read only).
    rng_state : uint64 (4,), a PCG64 state advanced in place (one draw per row).
    out : Batch of B rows, written: obs/next_obs float32 (B, obs_size),
        actions int64 (B,), rewards float32 (B,), masks float32 (B,) (0 where
        terminated); with ``buf.n_step > 1`` also discounts (B,) (n-step
        returns, see the module docstring); with a sum tree also indices (B,)
        and weights (B,) (see :func:`_draw_prioritized`); next_action_masks
        uint8 (B, n_bytes) from a masked buffer (else not read).
    beta : float in [0, 1], PER's importance-sampling exponent (else unused).

    Draw every slot first (uniformly with replacement, or by priority), then
    gather: the kind of draw and of gather is chosen once per call, never per row.
    """
    batch_size = out.actions.shape[0]
    if buf.tree.shape[0] > 0:
        slots = out.indices
        _draw_prioritized(buf, rng_state, beta, slots, out.weights)
    elif buf.n_step == 1:  # the plain path: one pass, each row drawn as it is copied
        _gather_one_step(buf, out.actions, out, rng_state, True)
        return
    else:
        # The slots go into out.actions (int64 (B,)): each row's gather reads
        # its slot before writing its action over it, and no allocation is needed.
        slots = out.actions
        size = buf.cursor[_SIZE]
        for k in range(batch_size):
            slots[k] = next_below(rng_state, size)
    if buf.n_step > 1:
        _gather_n_step(buf, slots, out)
    else:
        _gather_one_step(buf, slots, out, rng_state, False)


@kernel
def _gather_one_step(
    buf: ReplayState, slots: np.ndarray, out: Batch, rng_state: np.ndarray, draw: bool
) -> None:
    """Copy the transitions in ``slots`` (int64 (B,); may be ``out.actions``:
    row k reads slots[k] before it writes actions[k]) into ``out`` (all but
    discounts, weights and indices; next_action_masks from a masked buffer).

    With ``draw`` each row's slot is instead drawn uniformly from
    ``rng_state`` (uint64 (4,), advanced) as the row is copied, and ``slots``
    is not read: the plain path's one pass, in which the draw's arithmetic
    overlaps the copy's loads.

    The copy is written out here rather than in a helper: a helper call per
    transition costs more than the gather itself.
    """
    size = buf.cursor[_SIZE]
    storage = buf.storage
    finals = buf.finals
    obs = out.obs
    actions = out.actions
    rewards = out.rewards
    next_obs = out.next_obs
    masks = out.masks
    n = obs.shape[1]
    capacity = storage.shape[0]
    legal = buf.next_action_masks
    masked = legal.shape[0] > 0
    legal_out = out.next_action_masks
    for k in range(slots.shape[0]):
        i = next_below(rng_state, size) if draw else slots[k]
        rec = storage[i]
        for j in range(n):
            obs[k, j] = rec.obs[j]
        row = rec.next_ref
        if row < 0:
            following = storage[i + 1 if i + 1 < capacity else 0]
            for j in range(n):
                next_obs[k, j] = following.obs[j]
        else:
            for j in range(n):
                next_obs[k, j] = finals[row, j]
        actions[k] = rec.action
        rewards[k] = rec.reward
        masks[k] = 0.0 if rec.status == _TERMINATED else 1.0
        if masked:
            for j in range(legal.shape[1]):
                legal_out[k, j] = legal[i, j]


@kernel
def _gather_n_step(buf: ReplayState, slots: np.ndarray, out: Batch) -> None:
    """The n-step gather (``buf.n_step > 1``): m-step returns (module docstring).

    slots : int64 (B,) (may be ``out.actions``, as for :func:`_gather_one_step`).
    Writes every field of ``out`` but weights and indices; ``out.discounts``
    (B,) gets gamma^m * mask; a masked buffer's ``out.next_action_masks`` gets
    slot t+m-1's next-state mask (that of the state the return bootstraps from).
    """
    storage = buf.storage
    legal = buf.next_action_masks
    masked = legal.shape[0] > 0
    finals = buf.finals
    newest = buf.cursor[_POS] - 1 if buf.cursor[_POS] > 0 else storage.shape[0] - 1
    capacity = storage.shape[0]
    gamma = buf.gamma
    n_step = buf.n_step
    n = out.obs.shape[1]
    for k in range(slots.shape[0]):
        i = slots[k]
        rec = storage[i]
        for j in range(n):
            out.obs[k, j] = rec.obs[j]
        out.actions[k] = rec.action
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
            last = last + 1 if last + 1 < capacity else 0
        step = storage[last]
        row = step.next_ref
        if row < 0:
            following = storage[last + 1 if last + 1 < capacity else 0]
            for j in range(n):
                out.next_obs[k, j] = following.obs[j]
        else:
            for j in range(n):
                out.next_obs[k, j] = finals[row, j]
        if masked:
            for j in range(legal.shape[1]):
                out.next_action_masks[k, j] = legal[last, j]
        mask = 0.0 if step.status == _TERMINATED else 1.0
        out.rewards[k] = total
        out.masks[k] = mask
        out.discounts[k] = discount * mask


@kernel
def _draw_prioritized(buf: ReplayState, rng_state: np.ndarray, beta: float, indices: np.ndarray,
                      weights: np.ndarray) -> None:  # fmt: skip
    """Draw ``len(indices)`` slots in proportion to their priorities, with IS weights.

    Stratified (Schaul et al. 2016, appendix B.2.1): the total priority is cut
    into B equal segments and one slot drawn in each (``_sample_stratified``
    of :mod:`ember_np.dqn.sumtree`), so each draw has P(i) = p_i / sum_j p_j.

    indices : int64 (B,), written; weights : float32 (B,), written with
    w_i = (N * P(i))^(-beta) / max_j (N * P(j))^(-beta) over the batch,
    N = the number of stored transitions. rng_state: B draws.
    """
    tree = buf.tree
    _sample_stratified(tree, rng_state, indices)
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
def _update_priorities(buf: ReplayState, indices: np.ndarray, td_errors: np.ndarray) -> None:
    """Set p_i = (|td_i| + eps)^alpha for each sampled slot; track the largest priority.

    Each p_i is clamped to [MIN_PRIORITY, max_priority(leaves)] (sumtree.py's
    :func:`clamp_priority`), so the tree's total stays finite and positive.

    buf : ReplayState with a sum tree (updated in place, the largest priority
        in tree[0] too). indices : int64 (B,) in [0, capacity); td_errors :
        float32 (B,), finite. A slot sampled twice in the batch keeps its last priority.
    """
    tree = buf.tree
    leaves = tree.shape[0] // 2
    for k in range(indices.shape[0]):
        # clamped: (|td| + eps)^alpha may overflow (alpha 1000) or underflow (eps 1e-300)
        p = clamp_priority((abs(td_errors[k]) + buf.eps) ** buf.alpha, leaves)
        _set_one(tree, indices[k], p)
        if p > tree[_MAX_PRIORITY]:
            tree[_MAX_PRIORITY] = p


def _as_obs(x: Any, obs_size: int, name: str) -> np.ndarray:
    """``x`` as a C-contiguous float32 vector of length ``obs_size`` (no copy if it is one)."""
    try:
        arr = as_f32(x, name)
    except ValueError:
        raise ValueError(
            f"expected {name} as {obs_size} numbers convertible to float32, got {x!r}"
        ) from None
    if arr.shape != (obs_size,):
        raise ValueError(f"expected {name} of shape ({obs_size},), got {arr.shape}")
    return arr


class CircularBuffer:
    """Fixed-capacity FIFO replay buffer; the oldest transition is overwritten first.

    Parameters
    ----------
    capacity : int > 0
        Maximum number of transitions kept.
    obs_size : int > 0
        Length of the (flattened) observation vector.
    num_actions : int > 0
        Actions are indices in ``[0, num_actions)``.
    n_step : int >= 1, keyword
        Sample n-step returns (see the module docstring); default 1.
    gamma : float in [0, 1], keyword
        Their discount; default 0.99 (unused for ``n_step=1``: the batch's
        ``discounts`` are then of length 0, meaning ``gamma * mask``).
    action_masks : bool, keyword
        Also keep each transition's next-state action mask, as packed bits
        (ceil(num_actions / 8) bytes per slot); sampled batches then carry
        them in ``next_action_masks``. Default False (no memory, no cost).

    Attributes
    ----------
    storage : ndarray of :func:`transition_dtype`, shape (capacity,)
        All slots; only the first ``len(self)`` hold data until the buffer is full.
    finals : ndarray of float32, shape (capacity, obs_size)
        Next observations that are not the following slot's obs (see the
        module docstring); only rows in use are ever touched.
    """

    def __init__(
        self, capacity: int, obs_size: int, num_actions: int, *, n_step: int = 1,
        gamma: float = 0.99, action_masks: bool = False,
    ) -> None:  # fmt: skip
        self._capacity = check_int("capacity", capacity)
        self._obs_size = check_int("obs_size", obs_size)
        self._num_actions = check_int("num_actions", num_actions)
        self._n_step = check_int("n_step", n_step)
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.floating)):
            raise ValueError(f"gamma must be a number in [0, 1], got {gamma!r}")
        if not 0.0 <= float(gamma) <= 1.0:
            raise ValueError(f"gamma must be a number in [0, 1], got {gamma!r}")
        self._gamma = float(gamma)
        # np.zeros maps pages lazily: memory is committed as the buffer fills.
        dtype = transition_dtype(self._obs_size, self._num_actions)
        self.storage = np.zeros(self._capacity, dtype=dtype)
        self.finals = np.zeros((self._capacity, self._obs_size), dtype=np.float32)
        # The counters _POS ... _PENDING, then the stack of released finals rows.
        self._cursor = np.zeros(CURSOR_LEN + self._capacity, dtype=np.int64)
        self._obs_shape = (self._obs_size,)
        if not isinstance(action_masks, (bool, np.bool_)):
            raise ValueError(f"action_masks must be True or False, got {action_masks!r}")
        self._action_masks = bool(action_masks)
        n_bytes = packed_mask_bytes(self._num_actions)
        self.next_action_masks = np.zeros(
            (self._capacity if action_masks else 0, n_bytes), dtype=np.uint8
        )
        self._set_kernel_state(_NO_F64, 0.0, 0.0)
        # Compiled entry points of _push and _sample, resolved at the first call.
        self._push_entry: Any = None
        self._sample_entry: Any = None

    def _set_kernel_state(self, tree: np.ndarray, alpha: float, eps: float) -> None:
        """The one place a ReplayState is built (fixed Python types: one compiled version).

        A non-empty ``tree`` makes the buffer prioritized. Also sets
        ``_fills_optional``: whether sampled batches have fields beyond Batch's
        first five (discounts, weights and indices, next_action_masks), the
        early exit of ``sample``'s plain path.
        """
        self._state = ReplayState(
            self.storage, self.finals, self._cursor, int(self._num_actions), int(self._n_step),
            float(self._gamma), tree, float(alpha), float(eps), self.next_action_masks,
        )  # fmt: skip
        self._fills_optional = self._n_step > 1 or self._action_masks or tree.shape[0] > 0

    def _options(self) -> dict[str, Any]:
        """The keyword arguments of ``__init__`` (for copies)."""
        return {"n_step": self._n_step, "gamma": self._gamma, "action_masks": self._action_masks}

    @property
    def n_step(self) -> int:
        """Steps of the sampled returns (1: one-step transitions)."""
        return self._n_step

    @property
    def gamma(self) -> float:
        """Discount of the n-step returns."""
        return self._gamma

    @property
    def kernel_state(self) -> ReplayState:
        """The buffer's live arrays as one :class:`ReplayState` (kernels update it in place)."""
        return self._state

    @property
    def capacity(self) -> int:
        """Maximum number of transitions kept."""
        return self._capacity

    @property
    def obs_size(self) -> int:
        return self._obs_size

    @property
    def num_actions(self) -> int:
        return self._num_actions

    @property
    def action_masks(self) -> bool:
        """Whether the buffer keeps next-state action masks."""
        return self._action_masks

    @property
    def position(self) -> int:
        """Slot the next push writes to."""
        return int(self._cursor[0])

    def __len__(self) -> int:
        return int(self._cursor[1])

    @property
    def is_full(self) -> bool:
        """True once ``capacity`` transitions have been pushed (pushes then overwrite)."""
        return int(self._cursor[1]) == self._capacity

    def ready_for(self, batch_size: int) -> bool:
        """True when at least ``batch_size`` transitions are stored."""
        return int(self._cursor[1]) >= batch_size

    @property
    def nbytes(self) -> int:
        """Bytes of memory the buffer holds: every slot, and the finals rows used so far.

        Each finals row used also has its slot in the free-row stack (8 bytes).
        """
        rows = int(self._cursor[_ROWS])
        return int(self.storage.nbytes + rows * (self.finals.itemsize * self._obs_size + 8)
                   + self.next_action_masks.nbytes)  # fmt: skip

    @property
    def nbytes_per_transition(self) -> float:
        """:attr:`nbytes` per slot (the record size plus the finals rows' share)."""
        return self.nbytes / self._capacity

    def transition(self, slot: int) -> tuple[np.ndarray, int, float, np.ndarray, int]:
        """The transition stored in ``slot``: (obs, action, reward, next_obs, status).

        Slots count from 0 in storage order; ``slot`` must be below ``len(self)``.
        """
        size = len(self)
        if not 0 <= slot < size:
            raise ValueError(f"slot must be in [0, {size}), got {slot}")
        rec = self.storage[slot]
        row = int(rec["next_ref"])
        if row < 0:  # as in _sample: the following slot holds it
            next_obs = self.storage[(slot + 1) % self._capacity]["obs"].copy()
        else:
            next_obs = self.finals[row].copy()
        return (
            rec["obs"].copy(),
            int(rec["action"]),
            float(rec["reward"]),
            next_obs,
            int(rec["status"]),
        )

    def push(
        self,
        obs: Any,
        action: int,
        reward: float,
        next_obs: Any,
        status: int | EpisodeStatus = EpisodeStatus.CONTINUING,
        next_action_mask: Any = None,
    ) -> None:
        """Store one transition, overwriting the oldest when full.

        Parameters
        ----------
        obs, next_obs : array_like of float32, shape (obs_size,)
        action : int in [0, num_actions)
        reward : float, finite as a float32 (what is stored)
        status : EpisodeStatus or int in {0, 1, 2}
        next_action_mask : array_like of bool, shape (num_actions,), optional
            The legal actions in ``next_obs`` (a buffer built with
            ``action_masks=True``); default: all legal.

        Raises
        ------
        ValueError
            On a wrong shape, an action out of range, a non-finite value or an
            unknown status. Nothing stored is changed.
        """
        # The fast path (float32 vectors, int action) costs ~0.4 us of Python.
        try:
            # as_f32 with its no-copy test inlined (a call costs ~0.1 us, 10% of a push)
            o, no = obs, next_obs
            if not (type(o) is _ND and o.dtype is _F32 and o.flags.carray):
                o = as_f32(o, "obs")
            if not (type(no) is _ND and no.dtype is _F32 and no.flags.carray):
                no = as_f32(no, "next_obs")
            a = operator.index(action)
            s = operator.index(status)
            r = float(reward)
        except (TypeError, ValueError):
            self._raise_conversion_error(obs, action, reward, next_obs, status)
        if o.shape != self._obs_shape or no.shape != self._obs_shape:
            _as_obs(obs, self._obs_size, "obs")
            _as_obs(next_obs, self._obs_size, "next_obs")
        legal = self.check_next_mask(next_action_mask)
        push = self._push_entry
        if push is None:  # same argument types every time: skip numba's dispatch
            push = self._push_entry = entry_point(_push, self._state, o, a, r, no, s, legal)
        code = push(self._state, o, a, r, no, s, legal)
        if code:
            self.raise_push_error(code, a, r, o, no, s)

    def check_next_mask(self, mask: Any) -> np.ndarray:
        """``mask`` as the bool (num_actions,) array :func:`_push` takes (None: all legal).

        ValueError for a mask given to a buffer built without action masks,
        or one that is not a valid mask (see ``ember_np/_masks.py``).
        """
        if mask is None:
            return ALL_LEGAL
        if not self._action_masks:
            raise ValueError(
                "this replay buffer was built without action masks, got a next_action_mask: "
                "build it with CircularBuffer(..., action_masks=True) (an agent: "
                "DqnConfig(action_masks=True))"
            )
        return check_action_mask(mask, self._num_actions, "next_action_mask")

    def _raise_conversion_error(
        self, obs: Any, action: Any, reward: Any, next_obs: Any, status: Any
    ) -> NoReturn:
        _as_obs(obs, self._obs_size, "obs")
        _as_obs(next_obs, self._obs_size, "next_obs")
        for name, value in (("action", action), ("status", status)):
            try:
                operator.index(value)
            except TypeError:
                raise ValueError(f"{name} must be an integer, got {value!r}") from None
        raise ValueError(f"reward must be a number, got {reward!r}")

    def raise_push_error(
        self,
        code: int,
        action: int,
        reward: float,
        obs: np.ndarray,
        next_obs: np.ndarray,
        status: int,
    ) -> NoReturn:
        tail = "; nothing was stored"
        if code == _BAD_ACTION:
            raise ValueError(f"action must be in [0, {self._num_actions}), got {action}{tail}")
        if code == _BAD_REWARD:
            raise ValueError(
                f"reward must be finite, got {reward} (it is stored as a float32: "
                f"|reward| <= {_F32_MAX:.7g}){tail}"
            )
        if code == _BAD_OBS:
            raise ValueError(f"obs must be finite, got {obs.tolist()}{tail}")
        if code == _BAD_NEXT_OBS:
            raise ValueError(f"next_obs must be finite, got {next_obs.tolist()}{tail}")
        raise ValueError(
            f"status must be an EpisodeStatus (0 continuing, 1 terminated, 2 truncated), "
            f"got {status}{tail}"
        )

    def sample(self, batch_size: int, rng: Rng, out: Batch | None = None) -> Batch:
        """Draw ``batch_size`` transitions uniformly, with replacement.

        With ``n_step > 1`` each is an n-step transition (module docstring)
        and ``discounts`` holds gamma^m * mask.

        Parameters
        ----------
        batch_size : int > 0, at most ``len(self)``
        rng : Rng
            The stream to draw from (advanced in place).
        out : Batch, optional
            Preallocated arrays to gather into (see :meth:`empty_batch`);
            new arrays are allocated when omitted.

        Returns
        -------
        Batch
            obs (B, obs_size) float32, actions (B,) int64, rewards (B,) float32,
            next_obs (B, obs_size) float32, masks (B,) float32, discounts (B,)
            float32 for n_step > 1 (else (0,)); weights and indices of length 0;
            with ``action_masks`` next_action_masks (B, ceil(num_actions / 8))
            uint8 (packed bits; ``np.unpackbits(..., axis=1, count=num_actions)``
            gives the bool masks; the n-step next state's mask for n_step > 1).
        """
        return self._sample_checked(batch_size, rng, out, 1.0)

    def _sample_checked(self, batch_size: int, rng: Rng, out: Batch | None, beta: float) -> Batch:
        """:meth:`sample` with PER's ``beta`` (float in [0, 1]; unused when uniform)."""
        b = check_int("batch_size", batch_size)
        size = int(self._cursor[1])
        if b > size:
            raise ValueError(
                f"cannot sample {b} transitions from a buffer holding {size}; "
                f"push at least {b - size} more first (see ready_for())"
            )
        if not isinstance(rng, Rng):
            raise ValueError(f"rng must be an ember_np.Rng, got {type(rng).__name__}")
        if out is None:
            out = self._new_batch(b)
        else:
            self._check_out(out, b)
        sample = self._sample_entry
        if sample is None:  # same argument types every time: skip numba's dispatch
            sample = self._sample_entry = entry_point(_sample, self._state, rng.state, out, beta)
        sample(self._state, rng.state, out, beta)
        return out

    def _check_out(self, out: Any, b: int) -> None:
        """Raise ValueError unless ``out`` is a Batch of exactly :meth:`empty_batch`'s arrays."""
        like = self._new_batch(b)
        if not isinstance(out, Batch):
            raise ValueError(f"out must be a Batch (see empty_batch()), got {type(out).__name__}")
        actions = out.actions
        if isinstance(actions, np.ndarray) and actions.ndim == 1 and actions.shape != (b,):
            raise ValueError(f"out holds batches of {actions.shape[0]}, but batch_size is {b}")
        for name, arr, ref in zip(Batch._fields, out, like):
            if not (
                type(arr) is np.ndarray
                and arr.dtype == ref.dtype
                and arr.shape == ref.shape
                and arr.flags.carray  # C-contiguous, aligned, writeable: the kernel writes in place
            ):
                raise ValueError(
                    f"out.{name} must be a C-contiguous, writeable, aligned {ref.dtype} array "
                    f"of shape {ref.shape} for batch_size {b} (see empty_batch()), got "
                    + (
                        f"{arr.dtype} of shape {arr.shape}"
                        if isinstance(arr, np.ndarray)
                        else type(arr).__name__
                    )
                )

    def empty_batch(self, batch_size: int) -> Batch:
        """Uninitialised arrays of the right shapes and dtypes for ``sample(out=...)``.

        Only the fields this buffer fills get arrays; the others keep Batch's
        shared length-0 defaults (so a plain buffer's batch costs five arrays).
        """
        return self._new_batch(check_int("batch_size", batch_size))

    def _new_batch(self, b: int) -> Batch:
        """:meth:`empty_batch` of a checked ``b`` (``sample`` checked it already)."""
        batch = Batch(
            np.empty((b, self._obs_size), dtype=np.float32),
            np.empty(b, dtype=np.int64),
            np.empty(b, dtype=np.float32),
            np.empty((b, self._obs_size), dtype=np.float32),
            np.empty(b, dtype=np.float32),
        )
        if not self._fills_optional:
            return batch
        if self._n_step > 1:
            batch = batch._replace(discounts=np.empty(b, dtype=np.float32))
        if self._state.tree.shape[0]:  # prioritized
            batch = batch._replace(weights=np.empty(b, dtype=np.float32),
                                   indices=np.empty(b, dtype=np.int64))  # fmt: skip
        if self._action_masks:
            n_bytes = self.next_action_masks.shape[1]
            batch = batch._replace(next_action_masks=np.empty((b, n_bytes), dtype=np.uint8))
        return batch

    def clear(self) -> None:
        """Forget every stored transition (finals rows are reused from the first)."""
        self._cursor[:CURSOR_LEN] = 0  # the free-row stack is empty; its old rows are unread

    # -- state ---------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """The stored transitions (oldest slots first, as laid out) and the cursor.

        Keys: ``obs``, ``action``, ``reward``, ``next_obs``, ``status`` (the
        first ``len(self)`` slots, with every ``next_obs`` written out, so the
        format does not depend on how the buffer shares them) and ``cursor`` =
        [position, size, capacity] (int64); with ``action_masks`` also
        ``next_action_masks`` (uint8 (len, ceil(num_actions / 8)), packed bits).
        """
        n = len(self)
        s = self.storage[:n]
        # Every slot's following obs (slot n is unused or, when full, slot 0),
        # then the rows that are not shared.
        after = self.storage["obs"]
        last = n % self._capacity
        next_obs = np.concatenate([after[1:n], after[last : last + min(n, 1)]])
        own = np.flatnonzero(s["next_ref"] >= 0)
        next_obs[own] = self.finals[s["next_ref"][own]]
        state = {
            "obs": s["obs"].copy(),
            "action": s["action"].astype(np.int32),
            "reward": s["reward"].copy(),
            "next_obs": next_obs,
            "status": s["status"].copy(),
            "cursor": np.array([self._cursor[_POS], n, self._capacity], dtype=np.int64),
        }
        if self._action_masks:  # packed bits, as stored
            state["next_action_masks"] = self.next_action_masks[:n].copy()
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore a :meth:`state_dict` exactly; a mismatch raises ValueError, changing nothing.

        Each slot whose ``next_obs`` has the bits of the following slot's
        ``obs`` shares it, as :meth:`push` would have decided; the newest
        slot keeps its own row until the next push. Sampling the restored
        buffer gives the same transitions, with the same random draws.
        """
        pos, n = self.check_state_dict(state)
        for key in ("obs", "action", "reward", "status"):
            self.storage[key][:n] = state[key]
        if self._action_masks:
            self.next_action_masks[:n] = state["next_action_masks"]
        cursor = np.zeros(CURSOR_LEN, dtype=np.int64)
        cursor[_POS] = pos
        if n:
            obs = np.ascontiguousarray(state["obs"]).view(np.uint32)
            next_obs = np.ascontiguousarray(state["next_obs"])
            bits = next_obs.view(np.uint32)
            shared = np.empty(n, dtype=bool)  # next_obs[i] has the bits of obs[i + 1 (mod n)]
            shared[:-1] = (bits[:-1] == obs[1:]).all(axis=1)
            shared[-1] = (bits[-1] == obs[0]).all()
            shared[(pos - 1) % n] = False  # the newest slot: its successor is not stored
            own = np.flatnonzero(~shared)
            refs = np.full(n, -1, dtype=np.int32)
            refs[own] = np.arange(own.size, dtype=np.int32)
            self.storage["next_ref"][:n] = refs
            self.finals[: own.size] = next_obs[own]
            cursor[_SIZE], cursor[_ROWS], cursor[_PENDING] = n, own.size, 1
        self._cursor[:CURSOR_LEN] = cursor

    def check_state_dict(self, state: dict[str, np.ndarray]) -> tuple[int, int]:
        """Raise ValueError unless :meth:`load_state_dict` would accept ``state``.

        Returns the (position, size) it would restore. Reads, never writes.
        """
        for key in ("obs", "action", "reward", "next_obs", "status", "cursor"):
            if key not in state:
                raise ValueError(f"replay buffer state is missing {key!r}")
        cursor = np.asarray(state["cursor"])
        if cursor.shape != (3,) or cursor.dtype.kind not in "iu":
            raise ValueError(
                f"replay buffer 'cursor' must be 3 integers, found shape {cursor.shape}"
            )
        pos, n, cap = (int(c) for c in cursor)
        if cap != self._capacity:
            raise ValueError(
                f"replay buffer capacity mismatch: expected {self._capacity}, found {cap}"
            )
        if not (0 <= n <= cap and 0 <= pos < cap and (n == cap or pos == n)):
            raise ValueError(
                f"replay buffer cursor is inconsistent: position {pos}, size {n}, capacity {cap}"
            )
        expected = {
            "obs": ((n, self._obs_size), np.float32),
            "action": ((n,), np.int32),
            "reward": ((n,), np.float32),
            "next_obs": ((n, self._obs_size), np.float32),
            "status": ((n,), np.uint8),
        }
        for key, (shape, dtype) in expected.items():
            arr = np.asarray(state[key])
            if arr.shape != shape or arr.dtype != dtype:
                raise ValueError(
                    f"replay buffer {key!r}: expected {np.dtype(dtype)} of shape {shape}, "
                    f"found {arr.dtype} of shape {arr.shape}"
                )
        self._check_mask_state(state, n)
        actions = np.asarray(state["action"])
        if n and (actions.min() < 0 or actions.max() >= self._num_actions):
            raise ValueError(f"replay buffer 'action' has values outside [0, {self._num_actions})")
        if n and np.asarray(state["status"]).max() > 2:
            raise ValueError("replay buffer 'status' has values outside {0, 1, 2}")
        return pos, n

    def _check_mask_state(self, state: dict[str, np.ndarray], n: int) -> None:
        """ValueError unless ``state`` has next-state masks exactly when this buffer keeps them."""
        if "next_action_masks" not in state:
            if self._action_masks:
                raise ValueError(
                    "replay buffer state has no 'next_action_masks' but this buffer keeps "
                    "action masks: load it into a buffer (agent) built with action_masks=False"
                )
            return
        if not self._action_masks:
            raise ValueError(
                "replay buffer state has 'next_action_masks' but this buffer was built without "
                "action masks: build it with action_masks=True (DqnConfig(action_masks=True))"
            )
        arr = np.asarray(state["next_action_masks"])
        shape = (n, self.next_action_masks.shape[1])
        if arr.shape != shape or arr.dtype != np.uint8:
            raise ValueError(
                f"replay buffer 'next_action_masks': expected uint8 of shape {shape}, "
                f"found {arr.dtype} of shape {arr.shape}"
            )
        if n:
            legal = np.unpackbits(arr, axis=1, count=self._num_actions)
            if not legal.any(axis=1).all():
                raise ValueError(
                    "replay buffer 'next_action_masks' has a mask with no legal action"
                )

    # -- copying and pickling --------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """What ``copy.deepcopy`` and ``pickle`` keep: the parts of the arrays in use.

        Slots past ``len(self)``, finals rows never written and the stale part
        of the free-row stack are left out, so a copy is as small as the data
        and its memory, like the original's, is committed as it fills.
        """
        c = self._cursor
        used = len(self)
        return {
            "capacity": self._capacity,
            "obs_size": self._obs_size,
            "num_actions": self._num_actions,
            "options": self._options(),  # n_step, gamma, action_masks (PER: alpha, eps)
            "next_action_masks": self.next_action_masks[:used],
            "storage": self.storage[:used],
            "finals": self.finals[: c[_ROWS]],
            "cursor": c[: CURSOR_LEN + c[_N_FREE]],
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["capacity"], state["obs_size"], state["num_actions"], **state.get("options", {})
        )
        for name in ("storage", "finals", "_cursor", "next_action_masks"):
            part = state.get(name.lstrip("_"), ())  # older pickles: no masks
            getattr(self, name)[: len(part)] = part

    def __repr__(self) -> str:
        n_step = f", n_step={self._n_step}, gamma={self._gamma}" if self._n_step > 1 else ""
        return (
            f"{type(self).__name__}(capacity={self._capacity}, obs_size={self._obs_size}, "
            f"num_actions={self._num_actions}{n_step}, "
            + ("action_masks=True, " if self._action_masks else "")
            + f"len={len(self)})"
        )


def _check_real(name: str, value: Any, rule: str, ok: Any) -> float:
    """``value`` as a float, or ValueError naming ``name`` and ``rule`` unless ``ok(value)``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be {rule}, got {value!r}")
    v = float(value)
    if not (np.isfinite(v) and ok(v)):
        raise ValueError(f"{name} must be {rule}, got {value!r}")
    return v


class PrioritizedBuffer(CircularBuffer):
    """A :class:`CircularBuffer` that samples in proportion to priorities (Schaul et al. 2016).

    Proportional prioritized replay: transition i is drawn with probability
    P(i) = p_i / sum_j p_j, with p_i = (|td_i| + eps)^alpha set by
    :meth:`update_priorities` and, for a new transition, the largest priority
    so far (1 at first). The priorities live in a compiled sum tree
    (:mod:`ember_np.dqn.sumtree`); a batch is drawn stratified, one slot from
    each of B equal segments of the total. Storage, n-step returns and
    everything else are the CircularBuffer's.

    Parameters
    ----------
    capacity, obs_size, num_actions : int > 0
        As for :class:`CircularBuffer`.
    alpha : float >= 0, keyword
        How much the priorities count (0: uniform). Typical 0.4-0.7. Default 0.6.
    eps : float > 0, keyword
        Added to |td| so no transition gets priority 0. Default 1e-6.
    n_step, gamma, action_masks : keyword
        As for :class:`CircularBuffer`.
    """

    def __init__(
        self, capacity: int, obs_size: int, num_actions: int, *, alpha: float = 0.6,
        eps: float = 1e-6, n_step: int = 1, gamma: float = 0.99, action_masks: bool = False,
    ) -> None:  # fmt: skip
        a = _check_real("alpha", alpha, "a finite number >= 0", lambda v: v >= 0.0)
        e = _check_real("eps", eps, "a positive finite number", lambda v: v > 0.0)
        super().__init__(capacity, obs_size, num_actions, n_step=n_step, gamma=gamma,
                         action_masks=action_masks)  # fmt: skip
        leaves = 1 << max(0, (self._capacity - 1).bit_length())  # as SumTree lays it out
        self._alpha, self._eps = a, e
        self._tree = np.zeros(2 * leaves, dtype=np.float64)
        self._tree[_MAX_PRIORITY] = 1.0
        self._set_kernel_state(self._tree, a, e)
        self._priority_entry: Any = None

    def _options(self) -> dict[str, Any]:
        return {**super()._options(), "alpha": self._alpha, "eps": self._eps}

    @property
    def alpha(self) -> float:
        """The priority exponent."""
        return self._alpha

    @property
    def eps(self) -> float:
        """The offset added to |td| before the exponent."""
        return self._eps

    @property
    def max_priority(self) -> float:
        """The largest priority so far: a new transition's priority."""
        return float(self._tree[_MAX_PRIORITY])

    @property
    def total_priority(self) -> float:
        """Sum of the stored transitions' priorities (the sum tree's root)."""
        return float(self._tree[1])

    def priorities(self) -> np.ndarray:
        """The priority of each stored slot, float64 of shape (len(self),) (a copy)."""
        leaves = self._tree.shape[0] // 2
        return self._tree[leaves : leaves + len(self)].copy()

    @property
    def nbytes(self) -> int:
        """:attr:`CircularBuffer.nbytes` plus the sum tree."""
        return super().nbytes + int(self._tree.nbytes)

    def sample(  # type: ignore[override]
        self, batch_size: int, rng: Rng, beta: float = 1.0, out: Batch | None = None
    ) -> Batch:
        """Draw ``batch_size`` transitions in proportion to their priorities.

        Parameters
        ----------
        batch_size : int > 0, at most ``len(self)``
        rng : Rng
            The stream to draw from (advanced by ``batch_size`` draws).
        beta : float in [0, 1]
            Importance-sampling exponent (annealed to 1 during training).
        out : Batch, optional
            Preallocated arrays (:meth:`empty_batch`).

        Returns
        -------
        Batch
            As :meth:`CircularBuffer.sample`, plus ``indices`` int64 (B,), the
            slots drawn, and ``weights`` float32 (B,) =
            (N * P(i))^(-beta) / max_j (N * P(j))^(-beta) over the batch
            (N = ``len(self)``).
        """
        b = _check_real("beta", beta, "a number in [0, 1]", lambda v: 0.0 <= v <= 1.0)
        return self._sample_checked(batch_size, rng, out, b)

    def update_priorities(self, indices: Any, td_errors: Any) -> None:
        """Set p_i = (|td_i| + eps)^alpha for the given slots (e.g. a batch's ``indices``).

        Parameters
        ----------
        indices : array_like of int, shape (n,), each in [0, len(self))
        td_errors : array_like of float, shape (n,), finite

        Raises
        ------
        ValueError
            On a slot that holds no transition, a length mismatch or a
            non-finite error; no priority is changed then.
        """
        idx = np.asarray(indices)
        if idx.size and idx.dtype.kind not in "iu":
            raise ValueError(f"indices must be integers, got dtype {idx.dtype}")
        idx = np.ascontiguousarray(idx.ravel(), dtype=np.int64)
        td = np.ascontiguousarray(np.ravel(td_errors), dtype=np.float32)
        if td.shape != idx.shape:
            raise ValueError(
                f"td_errors must match indices in length (got {td.size} errors for "
                f"{idx.size} indices)"
            )
        size = len(self)
        if idx.size and (idx.min() < 0 or idx.max() >= size):
            raise ValueError(
                f"indices must be stored slots in [0, {size}), got values from {idx.min()} "
                f"to {idx.max()}"
            )
        if not np.isfinite(td).all():
            raise ValueError("td_errors must be finite (as float32), got NaN or inf")
        update = self._priority_entry
        if update is None:
            update = self._priority_entry = entry_point(_update_priorities, self._state, idx, td)
        update(self._state, idx, td)

    def clear(self) -> None:
        """Forget every stored transition and priority (the next push gets priority 1)."""
        super().clear()
        self._tree[:] = 0.0
        self._tree[_MAX_PRIORITY] = 1.0

    # -- state ---------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """:meth:`CircularBuffer.state_dict` plus ``priorities`` (float64 (len,),
        each slot's) and ``max_priority`` (float64 (1,))."""
        state = super().state_dict()
        state["priorities"] = self.priorities()
        state["max_priority"] = self._tree[_MAX_PRIORITY : _MAX_PRIORITY + 1].copy()
        return state

    def check_state_dict(self, state: dict[str, np.ndarray]) -> tuple[int, int]:
        """As :meth:`CircularBuffer.check_state_dict`, and the priorities too.

        A state without priorities (saved by a uniform buffer) is accepted:
        :meth:`load_state_dict` then gives every transition priority 1.
        """
        pos, n = super().check_state_dict(state)
        if "priorities" not in state and "max_priority" not in state:
            return pos, n
        for key, shape in (("priorities", (n,)), ("max_priority", (1,))):
            arr = np.asarray(state.get(key))
            if arr.shape != shape or arr.dtype != np.float64:
                raise ValueError(
                    f"replay buffer {key!r}: expected float64 of shape {shape}, found "
                    f"{arr.dtype} of shape {arr.shape}"
                )
            if not (np.isfinite(arr).all() and (arr.min(initial=1.0) > 0.0)):
                raise ValueError(f"replay buffer {key!r} must be finite and > 0")
            top = max_priority.py_func(self._tree.shape[0] // 2)
            if arr.max(initial=0.0) > top:
                raise ValueError(
                    f"replay buffer {key!r} must be <= {top:.6g} (its total would overflow)"
                )
        return pos, n

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore a :meth:`state_dict` exactly: transitions, priorities, the sum tree
        (rebuilt from the leaves, every node the sum of its children as when
        built push by push) and the largest priority."""
        self.check_state_dict(state)
        super().load_state_dict(state)
        n = len(self)
        leaves = self._tree.shape[0] // 2
        self._tree[:] = 0.0
        if "priorities" in state:
            self._tree[leaves : leaves + n] = state["priorities"]
            largest = float(np.asarray(state["max_priority"])[0])
        else:
            self._tree[leaves : leaves + n] = 1.0
            largest = 1.0
        self._rebuild(largest)

    def _rebuild(self, largest: float) -> None:
        """Recompute every inner node of the sum tree from its leaves, level by level,
        and set the largest priority to ``largest``.

        Node k = node 2k + node 2k+1, the same float64 sum ``_set_one`` forms,
        so the rebuilt tree has the bits of one built push by push.
        """
        tree = self._tree
        hi = tree.shape[0] // 2
        while hi > 1:
            lo = hi // 2
            tree[lo:hi] = tree[2 * lo : 2 * hi : 2] + tree[2 * lo + 1 : 2 * hi : 2]
            hi = lo
        tree[_MAX_PRIORITY] = largest

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["priorities"] = self.priorities()
        state["max_priority"] = self.max_priority
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._tree[:] = 0.0
        leaves = self._tree.shape[0] // 2
        self._tree[leaves : leaves + len(state["priorities"])] = state["priorities"]
        self._rebuild(state["max_priority"])
