"""A compiled sum tree: the index behind proportional prioritized replay.

Prioritized experience replay (Schaul et al. 2016, proportional variant)
samples transition ``i`` with probability ``p_i / sum_j p_j``. A sum tree
keeps every partial sum of the priorities in a complete binary tree, so that
setting one priority and drawing one index each cost O(log capacity):

* the leaves ``tree[size + i]`` hold the priorities ``p_i`` (``size`` is the
  capacity rounded up to a power of two; unused leaves hold 0);
* each inner node ``tree[k]`` holds ``tree[2k] + tree[2k + 1]``, so
  ``tree[1]`` is the total;
* drawing: a mass ``m`` uniform in [0, total) walks down from the root,
  going left when ``m < tree[2k]`` and otherwise subtracting it and going
  right; the leaf reached is the first ``i`` whose prefix sum exceeds ``m``.

The tree is float64 and every inner node is recomputed as the sum of its two
children (never adjusted by a difference), so rounding errors do not pile up
over millions of updates. A zero-priority leaf is never drawn. No priority
exceeds :func:`max_priority` ``(size)`` = float64 max / (2 * size), so no
sum, the total included, overflows; prioritized replay also keeps each
priority >= :data:`MIN_PRIORITY` (:func:`clamp_priority`), so it never
vanishes.

Reading map (call order): :meth:`SumTree.set` -> ``_set_many`` -> ``set_one``;
:meth:`SumTree.sample` -> ``sample_stratified`` -> ``_find``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember_np._arrays import as_f64, as_i64
from ember_np._jit import kernel
from ember_np._validate import check_int
from ember_np.rng import Rng, next_double

__all__ = ["MIN_PRIORITY", "SumTree", "clamp_priority", "max_priority"]

#: The smallest priority prioritized replay gives a transition: float64's
#: smallest normal number (an underflow to 0 would make it never drawn).
MIN_PRIORITY = float(np.finfo(np.float64).tiny)
_F64_MAX = float(np.finfo(np.float64).max)


@kernel
def max_priority(size: int) -> float:
    """The largest priority a tree of ``size`` leaves takes: float64 max / (2 * size).

    The sum of ``size`` such leaves stays below half of float64's largest
    value, so no inner node (the total included) overflows, rounding and all.
    """
    return _F64_MAX / (2.0 * size)


@kernel
def clamp_priority(p: float, size: int) -> float:
    """``p`` clamped to [:data:`MIN_PRIORITY`, :func:`max_priority` (size)] (NaN: the top).

    PER's p = (|td| + eps)^alpha overflows to inf for a large alpha (alpha=1000)
    and underflows to 0 for a tiny eps (alpha=2, eps=1e-300, td=0); clamped, the
    tree's total stays finite and positive and every transition can be drawn.
    """
    top = max_priority(size)
    if not p <= top:  # also NaN
        return top
    return p if p >= MIN_PRIORITY else MIN_PRIORITY


@kernel
def set_one(tree: np.ndarray, index: int, priority: float) -> None:
    """Set leaf ``index`` to ``priority`` and recompute its ancestors.

    Parameters
    ----------
    tree : ndarray of float64, shape (2 * size,)
        The tree; ``size`` is a power of two and ``tree[0]`` is unused.
    index : int
        Leaf index; precondition ``0 <= index < size``.
    priority : float
        Precondition: finite and ``>= 0``.
    """
    size = tree.shape[0] // 2
    k = size + index
    tree[k] = priority
    k //= 2
    while k >= 1:
        tree[k] = tree[2 * k] + tree[2 * k + 1]
        k //= 2


@kernel
def _set_many(tree: np.ndarray, indices: np.ndarray, priorities: np.ndarray) -> None:
    """``set_one`` for each pair, in order (a repeated index keeps its last priority).

    indices : ndarray of int64, shape (n,); priorities : ndarray of float64, shape (n,).
    Preconditions as for ``set_one``.
    """
    for j in range(indices.shape[0]):
        set_one(tree, indices[j], priorities[j])


@kernel
def _find(tree: np.ndarray, mass: float) -> int:
    """The first leaf whose prefix sum exceeds ``mass``.

    Parameters
    ----------
    tree : ndarray of float64, shape (2 * size,)
    mass : float
        Precondition: ``tree[1] > 0``. A mass at or past the total (rounding)
        lands on the last leaf with a positive priority.

    Returns
    -------
    int
        A leaf index in [0, size) whose priority is > 0.
    """
    size = tree.shape[0] // 2
    k = 1
    while k < size:
        left = tree[2 * k]
        # Go right only when the right subtree has mass: rounding can leave a
        # mass just past a subtree's sum, and a zero leaf must never be drawn.
        if mass < left or tree[2 * k + 1] <= 0.0:
            if mass >= left:
                mass = left * (1.0 - 1e-16)
            k = 2 * k
        else:
            mass -= left
            k = 2 * k + 1
    return k - size


@kernel
def sample_stratified(tree: np.ndarray, rng_state: np.ndarray, out: np.ndarray) -> None:
    """Draw ``out.shape[0]`` leaves, one from each equal slice of the total.

    Slice ``j`` covers [j, j + 1) * total / n; one uniform mass in each
    (stratified sampling, as in Schaul et al. 2016 and Dopamine) keeps every
    leaf's marginal probability ``p_i / total`` but spreads a batch over the
    whole distribution.

    Parameters
    ----------
    tree : ndarray of float64, shape (2 * size,)
        Precondition: ``tree[1] > 0``.
    rng_state : ndarray of uint64, shape (4,)
        A PCG64 state (:class:`ember_np.Rng`), advanced by ``n`` draws.
    out : ndarray of int64, shape (n,)
        Filled with leaf indices.
    """
    n = out.shape[0]
    segment = tree[1] / n
    for j in range(n):
        out[j] = _find(tree, (j + next_double(rng_state)) * segment)


class SumTree:
    """Priorities of ``capacity`` items, summed in a tree for O(log n) sampling.

    Parameters
    ----------
    capacity : int
        Number of items (leaves), >= 1. Every priority starts at 0.

    Examples
    --------
    >>> tree = SumTree(4)
    >>> tree.set([0, 2], [1.0, 3.0])
    >>> tree.total
    4.0
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = check_int("capacity", capacity)
        size = 1 << max(0, (self._capacity - 1).bit_length())
        self._tree = np.zeros(2 * size, dtype=np.float64)

    @property
    def capacity(self) -> int:
        """Number of items."""
        return self._capacity

    @property
    def total(self) -> float:
        """Sum of every priority."""
        return float(self._tree[1])

    @property
    def tree(self) -> np.ndarray:
        """The whole tree, float64 of shape (2 * size,) (read-only view; see module docs)."""
        view = self._tree.view()
        view.flags.writeable = False
        return view

    def _indices(self, indices: Any) -> np.ndarray:
        idx = np.asarray(indices)
        if idx.size and idx.dtype.kind not in "iu":
            raise ValueError(f"indices must be integers (got dtype {idx.dtype})")
        idx = as_i64(idx.ravel(), "indices")  # read-only or strided: copied (see _arrays.py)
        if idx.size and (idx.min() < 0 or idx.max() >= self._capacity):
            raise ValueError(
                f"indices must be in [0, {self._capacity}) "
                f"(got values from {idx.min()} to {idx.max()})"
            )
        return idx

    def set(self, indices: Any, priorities: Any) -> None:
        """Set the priorities of ``indices`` (later entries win for a repeated index).

        Parameters
        ----------
        indices : array_like of int, shape (n,)
            In [0, capacity).
        priorities : array_like of float, shape (n,)
            Finite and >= 0.

        Raises
        ------
        ValueError
            On an index out of range, a shape mismatch, or a negative or
            non-finite priority; nothing is changed then.
        """
        idx = self._indices(indices)
        p = as_f64(np.ravel(priorities), "priorities")
        if p.shape != idx.shape:
            raise ValueError(
                f"priorities must match indices in length (got {p.size} priorities "
                f"for {idx.size} indices)"
            )
        if p.size and not (np.all(np.isfinite(p)) and p.min() >= 0.0):
            raise ValueError(
                "priorities must be finite and >= 0 (got a negative or non-finite one)"
            )
        top = max_priority.py_func(self._tree.shape[0] // 2)
        if p.size and p.max() > top:
            raise ValueError(
                f"priorities must be <= {top:.6g} (float64 max / (2 * {self._tree.shape[0] // 2}"
                f" leaves), so that their total stays finite), got {p.max():.6g}"
            )
        _set_many(self._tree, idx, p)

    def get(self, indices: Any) -> np.ndarray:
        """The priorities of ``indices``, float64 of shape (n,)."""
        idx = self._indices(indices)
        return self._tree[self._tree.shape[0] // 2 + idx]

    def find(self, mass: float) -> int:
        """The first index whose prefix sum of priorities exceeds ``mass`` (0 <= mass < total)."""
        if not self.total > 0.0:
            raise ValueError("cannot search a sum tree whose priorities are all 0")
        m = float(mass)
        if not 0.0 <= m < self.total:
            raise ValueError(f"mass must be in [0, total={self.total}) (got {mass!r})")
        return int(_find(self._tree, m))

    def sample(self, batch_size: int, rng: Rng) -> np.ndarray:
        """Draw ``batch_size`` indices, index ``i`` with probability ``p_i / total``.

        Stratified: one draw from each of ``batch_size`` equal slices of the
        total (see ``sample_stratified``). Returns int64 of shape (batch_size,).
        """
        n = check_int("batch_size", batch_size)
        if not isinstance(rng, Rng):
            raise ValueError(f"rng must be an ember_np.Rng (got {type(rng).__name__})")
        if not self.total > 0.0:
            raise ValueError("cannot sample from a sum tree whose priorities are all 0")
        out = np.empty(n, dtype=np.int64)
        sample_stratified(self._tree, rng.state, out)
        return out

    def __repr__(self) -> str:
        return f"SumTree(capacity={self._capacity}, total={self.total:.6g})"
