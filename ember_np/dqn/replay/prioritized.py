"""PrioritizedBuffer: proportional prioritized replay (Schaul et al. 2016) on a sum tree.

A :class:`~ember_np.dqn.replay.circular.CircularBuffer` whose samples are drawn in
proportion to priorities kept in a sum tree (``sumtree.py``), with importance
weights; see ``ember_np/dqn/replay/__init__.py`` for the layout.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember_np._jit import entry_point
from ember_np.dqn.replay.circular import CircularBuffer
from ember_np.dqn.replay.replay_kernels import MAX_PRIORITY, update_priorities
from ember_np.dqn.replay.sumtree import max_priority
from ember_np.rng import Rng
from ember_np.types import Batch


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
    (:mod:`ember_np.dqn.replay.sumtree`); a batch is drawn stratified, one slot from
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
    n_step, gamma, action_masks, num_envs : keyword
        As for :class:`CircularBuffer`.
    """

    def __init__(
        self, capacity: int, obs_size: int, num_actions: int, *, alpha: float = 0.6,
        eps: float = 1e-6, n_step: int = 1, gamma: float = 0.99, action_masks: bool = False,
        num_envs: int = 1,
    ) -> None:  # fmt: skip
        a = _check_real("alpha", alpha, "a finite number >= 0", lambda v: v >= 0.0)
        e = _check_real("eps", eps, "a positive finite number", lambda v: v > 0.0)
        super().__init__(capacity, obs_size, num_actions, n_step=n_step, gamma=gamma,
                         action_masks=action_masks, num_envs=num_envs)  # fmt: skip
        leaves = 1 << max(0, (self._capacity - 1).bit_length())  # as SumTree lays it out
        self._alpha, self._eps = a, e
        self._tree = np.zeros(2 * leaves, dtype=np.float64)
        self._tree[MAX_PRIORITY] = 1.0
        self._set_kernel_state(self._tree, a, e)
        self._priority_entry: Any = None

    def _forget_entry_points(self) -> None:
        super()._forget_entry_points()
        self._priority_entry = None

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
        return float(self._tree[MAX_PRIORITY])

    @property
    def total_priority(self) -> float:
        """Sum of the stored transitions' priorities (the sum tree's root)."""
        return float(self._tree[1])

    def priorities(self) -> np.ndarray:
        """The priority of each stored slot, float64 of shape (len(self),) (a copy),
        in :meth:`stored_slots` order (with one stream, slot order)."""
        leaves = self._tree.shape[0] // 2
        if self.num_envs == 1:
            return self._tree[leaves : leaves + len(self)].copy()
        return self._tree[leaves + self.stored_slots()]

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
        if self.num_envs == 1 and idx.size and (idx.min() < 0 or idx.max() >= size):
            raise ValueError(
                f"indices must be stored slots in [0, {size}), got values from {idx.min()} "
                f"to {idx.max()}"
            )
        if self.num_envs > 1 and not np.isin(idx, self.stored_slots()).all():
            raise ValueError("indices must be stored slots (see stored_slots())")
        if not np.isfinite(td).all():
            raise ValueError("td_errors must be finite (as float32), got NaN or inf")
        update = self._priority_entry
        if update is None:
            update = self._priority_entry = entry_point(update_priorities, self._state, idx, td)
        update(self._state, idx, td)

    def clear(self) -> None:
        """Forget every stored transition and priority (the next push gets priority 1)."""
        super().clear()
        self._tree[:] = 0.0
        self._tree[MAX_PRIORITY] = 1.0

    # -- state ---------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """:meth:`CircularBuffer.state_dict` plus ``priorities`` (float64 (len,),
        each slot's) and ``max_priority`` (float64 (1,))."""
        state = super().state_dict()
        state["priorities"] = self.priorities()
        state["max_priority"] = self._tree[MAX_PRIORITY : MAX_PRIORITY + 1].copy()
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
        slots = self._tree.shape[0] // 2 + self.stored_slots()  # their leaves
        self._tree[:] = 0.0
        if "priorities" in state:
            self._tree[slots] = state["priorities"]
            largest = float(np.asarray(state["max_priority"])[0])
        else:
            self._tree[slots] = 1.0
            largest = 1.0
        self._rebuild(largest)

    def _rebuild(self, largest: float) -> None:
        """Recompute every inner node of the sum tree from its leaves, level by level,
        and set the largest priority to ``largest``.

        Node k = node 2k + node 2k+1, the same float64 sum ``set_one`` forms,
        so the rebuilt tree has the bits of one built push by push.
        """
        tree = self._tree
        hi = tree.shape[0] // 2
        while hi > 1:
            lo = hi // 2
            tree[lo:hi] = tree[2 * lo : 2 * hi : 2] + tree[2 * lo + 1 : 2 * hi : 2]
            hi = lo
        tree[MAX_PRIORITY] = largest

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["priorities"] = self.priorities()
        state["max_priority"] = self.max_priority
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._tree[:] = 0.0
        leaves = self._tree.shape[0] // 2
        self._tree[leaves + self.stored_slots()] = state["priorities"]
        self._rebuild(state["max_priority"])
