"""Distributional value heads (C51, QR-DQN): their description, and how the
kernels are told about them. Plain Python and NumPy (no numba), so the NumPy
deploy path (``forward.py``, ``policy.py``) can read it too.

A distributional network's output layer has ``n_actions * n_atoms`` units,
action-major (unit ``a * n_atoms + k`` is action a's atom k); a dueling one
has a value head of ``n_atoms`` units (per-atom streams, combined per atom:
``x[a, k] = V[k] + A[a, k] - mean_a A[a, k]``). Then

* C51 (Bellemare et al. 2017): ``p[a] = softmax(x[a])`` over the fixed
  support ``z_k = v_min + k * (v_max - v_min) / (n_atoms - 1)``;
  ``Q(s, a) = sum_k p[a, k] z_k``.
* QR-DQN (Dabney et al. 2018): ``x[a, k]`` is the quantile at
  ``tau_k = (2k + 1) / (2 n_atoms)``; ``Q(s, a) = mean_k x[a, k]``.

The kernels take every network as ``(params, sizes)`` (``mlp.py``); a
distributional network's int64 ``sizes`` array carries its head as a suffix
(:func:`kernel_sizes`), so that every kernel that acts or learns (and every
caller of one) handles both kinds without another argument.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember_np.nn.sizes import HEAD_SUFFIX

__all__ = [
    "C51",
    "HEAD_KINDS",
    "QR",
    "DistributionalHead",
    "head_name",
    "kernel_sizes",
]

#: Head codes in the kernels' ``sizes`` suffix (0 is a plain Q head: no suffix).
C51 = 1
QR = 2
HEAD_KINDS = {"c51": C51, "qr": QR}

# kernel_sizes appends HEAD_SUFFIX (ember_np/nn/sizes.py) values: -code, n_atoms,
# dueling, then v_min and v_max as the bits of float64 values (0 for QR).


class DistributionalHead:
    """A distributional value head: what the network's outputs per action are.

    Immutable and compared by value. (A plain class, not a dataclass: the NumPy
    deploy path reads it, and ``dataclasses`` would add ``inspect`` to that
    path's imports.)

    Parameters
    ----------
    kind : {"c51", "qr"}
        ``"c51"``: a categorical distribution (softmax) over ``n_atoms`` fixed
        returns from ``v_min`` to ``v_max``; ``"qr"``: ``n_atoms`` quantiles.
    n_atoms : int
        Atoms (C51, >= 2) or quantiles (QR, >= 1) per action.
    v_min, v_max : float
        C51's support bounds, finite, ``v_min < v_max``; not used by QR (0).
    """

    __slots__ = ("kind", "n_atoms", "v_min", "v_max")
    kind: str
    n_atoms: int
    v_min: float
    v_max: float

    def __init__(self, kind: str, n_atoms: int, v_min: float = 0.0, v_max: float = 0.0) -> None:
        if kind not in HEAD_KINDS:
            raise ValueError(f"distributional must be None, 'c51' or 'qr', got {kind!r}")
        low = 2 if kind == "c51" else 1
        n = n_atoms
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or not low <= n <= 2**20:
            what = "n_atoms" if kind == "c51" else "n_quantiles"
            raise ValueError(f"{what} must be an integer in [{low}, 2**20], got {n!r}")
        bounds = (0.0, 0.0)
        if kind == "c51":
            for name, v in (("v_min", v_min), ("v_max", v_max)):
                if not isinstance(v, numbers.Real) or isinstance(v, bool) or not math.isfinite(v):
                    raise ValueError(f"{name} must be a finite number, got {v!r}")
                if abs(v) > 1e30:
                    raise ValueError(f"{name} must be within +-1e30 (float32 returns), got {v!r}")
            if not v_min < v_max:
                raise ValueError(
                    f"v_min must be < v_max (the support of C51's returns), got v_min {v_min} "
                    f"and v_max {v_max}"
                )
            bounds = (float(v_min), float(v_max))
            _check_support(n, *bounds)
        for name, value in zip(self.__slots__, (kind, int(n), *bounds)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a DistributionalHead is immutable (cannot set {name!r})")

    def _key(self) -> tuple[Any, ...]:
        return (self.kind, self.n_atoms, self.v_min, self.v_max)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DistributionalHead):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"DistributionalHead(kind={self.kind!r}, n_atoms={self.n_atoms}, "
                f"v_min={self.v_min!r}, v_max={self.v_max!r})")  # fmt: skip

    def __reduce__(self) -> tuple[Any, ...]:
        return (DistributionalHead, self._key())

    @property
    def code(self) -> int:
        """The kernels' code of this head: :data:`C51` or :data:`QR`."""
        return HEAD_KINDS[self.kind]

    def support(self) -> np.ndarray:
        """C51's returns z_k, float32 (n_atoms,), as the kernels compute them
        (``v_min + k * dz`` in float64, then rounded); QR: the quantile levels tau_k."""
        k = np.arange(self.n_atoms, dtype=np.float64)
        if self.kind == "qr":
            return ((2.0 * k + 1.0) / (2.0 * self.n_atoms)).astype(np.float32)
        dz = (self.v_max - self.v_min) / (self.n_atoms - 1)
        return (self.v_min + k * dz).astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (how checkpoints record the head)."""
        return {"kind": self.kind, "n_atoms": self.n_atoms, "v_min": self.v_min,
                "v_max": self.v_max}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Any) -> DistributionalHead:
        """Inverse of :meth:`to_dict`; ValueError for anything else."""
        keys = {"kind", "n_atoms", "v_min", "v_max"}
        if not isinstance(data, dict) or set(data) != keys:
            raise ValueError(f"a distributional head is a dict with keys {sorted(keys)}, got "
                             f"{data!r}")  # fmt: skip
        return cls(data["kind"], data["n_atoms"], data["v_min"], data["v_max"])


def head_name(head: DistributionalHead | None) -> str:
    """How error messages name a head ("this network is ...")."""
    if head is None:
        return "with a plain Q head (not distributional)"
    if head.kind == "qr":
        return f"with a QR-DQN head ({head.n_atoms} quantiles)"
    return f"with a C51 head ({head.n_atoms} atoms on [{head.v_min:g}, {head.v_max:g}])"


def _float_bits(value: float) -> int:
    return int(np.array(value, dtype=np.float64).view(np.int64))


def kernel_sizes(
    layer_sizes: Sequence[int], head: DistributionalHead | None, dueling: bool
) -> np.ndarray:
    """The int64 ``sizes`` array the kernels take for a network.

    A plain head: ``layer_sizes`` itself, ``(obs_size, hidden..., n_actions)``.
    A distributional head: the widths of its layers, the last being
    ``n_actions * n_atoms``, then :data:`~ember_np.nn.sizes.HEAD_SUFFIX` values: ``-code``,
    ``n_atoms``, ``dueling`` (0 or 1), and v_min and v_max as the bits of
    float64 values. The ``-code`` (negative, unlike any width) marks the
    suffix; the kernels decode it in ``ember_np/nn/shape.py`` and ``head_kernels.py``.
    """
    sizes = [int(s) for s in layer_sizes]
    if head is None:
        return np.array(sizes, dtype=np.int64)
    sizes[-1] *= head.n_atoms
    suffix = [-head.code, head.n_atoms, int(bool(dueling)), _float_bits(head.v_min),
              _float_bits(head.v_max)]  # fmt: skip
    assert len(suffix) == HEAD_SUFFIX  # the length ember_np/nn/shape.py decodes
    return np.array(sizes + suffix, dtype=np.int64)


def _check_support(n: int, v_min: float, v_max: float) -> None:
    """Refuse a C51 support float32 cannot hold: every atom z_k (float64, then rounded,
    as the kernels compute it) a distinct float32 value, their spacing a normal float32.

    (Within +-1e30 and 2**20 atoms the expected value sum_k p_k z_k stays finite.)
    """
    dz = (v_max - v_min) / (n - 1)
    z = (v_min + np.arange(n, dtype=np.float64) * dz).astype(np.float32)
    if dz < float(np.finfo(np.float32).tiny) or not (np.diff(z) > 0).all():
        raise ValueError(
            f"C51's support v_min {v_min!r} to v_max {v_max!r} in n_atoms {n} has atoms "
            f"float32 cannot tell apart (spacing {dz:.3g}); make v_max - v_min wider "
            "relative to |v_min|, |v_max| (e.g. the range of the returns) or use fewer n_atoms"
        )
