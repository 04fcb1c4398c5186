"""The kernels' view of a distributional Q head: C51's support and the expected
Q-values of a C51 or QR-DQN head's outputs (numba kernels, public to the package).

A distributional head (``head.py``) makes the output width ``n_actions * n_atoms``
and appends to ``sizes`` the suffix ``ember_np/nn/sizes.py`` describes, here
``(-code, n_atoms, dueling, v_min bits, v_max bits)``; the shape is read through
``ember_np/nn/shape.py`` (:func:`~ember_np.nn.shape.n_atoms`, ...).
"""

from __future__ import annotations

import numpy as np

from ember_np._jit import kernel, ordered_kernel
from ember_np.dqn.heads.head import C51
from ember_np.nn.shape import head_kind, n_atoms
from ember_np.nn.softmax import exp_rows, float_of_bits


@kernel
def support_bounds(sizes: np.ndarray) -> tuple:
    """(v_min, v_max) of a C51 head, float64 (stored as their bits in ``sizes``)."""
    n = sizes.shape[0]
    return float_of_bits(sizes[n - 2]), float_of_bits(sizes[n - 1])


@kernel
def support_step(sizes: np.ndarray) -> float:
    """C51's atom spacing dz = (v_max - v_min) / (n_atoms - 1), float64."""
    v_min, v_max = support_bounds(sizes)
    return (v_max - v_min) / (n_atoms(sizes) - 1)


@ordered_kernel
def expected_q(raw: np.ndarray, sizes: np.ndarray, q: np.ndarray) -> None:
    """Q-values of a distributional head's outputs, row by row.

    raw : float (B, n_actions * n_atoms), the output layer (dueling combined),
    rows contiguous; q : float (B, n_actions), written. sizes : a distributional
    network's.

    C51: Q[a] = sum_k softmax(raw[a])_k z_k, with z_k = v_min + k dz (computed
    in float64), in raw's dtype; QR: Q[a] = mean_k raw[a, k] (summed in float64).
    """
    n = n_atoms(sizes)
    batch, n_act = q.shape
    if head_kind(sizes) == C51:
        v_min = support_bounds(sizes)[0]
        dz = support_step(sizes)
        z = np.empty(n, dtype=raw.dtype)
        for k in range(n):
            z[k] = v_min + k * dz
        zero = raw.dtype.type(0.0)
        e = exp_rows(raw.reshape((batch * n_act, n)))[0]
        for i in range(batch):
            for a in range(n_act):
                o = (i * n_act + a) * n
                total = zero
                mean = zero
                for k in range(n):
                    total += e[o + k]
                    mean += e[o + k] * z[k]
                q[i, a] = mean / total
        return
    inv = 1.0 / n
    for i in range(batch):
        for a in range(n_act):
            total = 0.0
            for k in range(a * n, (a + 1) * n):
                total += raw[i, k]
            q[i, a] = total * inv
