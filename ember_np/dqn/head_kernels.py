"""The kernels' view of a network's value head: decoding ``sizes`` and the
expected Q-values of a distributional head (numba kernels, public to the package).

``sizes`` is ``(obs_size, hidden..., n_actions)`` for a plain Q head; a
distributional head (``head.py``) makes the last width ``n_actions * n_atoms``
and appends ``HEAD_SUFFIX`` values (``-code, n_atoms, dueling, v_min bits,
v_max bits``). Every kernel reads the network's shape through :func:`n_layers`,
:func:`n_actions` and :func:`n_atoms`, never through ``sizes.shape`` alone.
"""

from __future__ import annotations

import math

import numpy as np

from ember_np._jit import kernel
from ember_np.dqn.head import C51, HEAD_SUFFIX


@kernel
def head_kind(sizes: np.ndarray) -> int:
    """0 for a plain Q head, else the head's code (``head.C51``, ``head.QR``).

    sizes : int64 (n,): a plain network's layer widths (all positive), or
    those then the suffix, whose first value is -code (see the module docstring).
    """
    n = sizes.shape[0]
    if n > HEAD_SUFFIX + 1 and sizes[n - HEAD_SUFFIX] < 0:
        return -sizes[n - HEAD_SUFFIX]
    return 0


@kernel
def n_layers(sizes: np.ndarray) -> int:
    """Number of Linear layers of the network ``sizes`` (the value head's not counted)."""
    n = sizes.shape[0] - 1
    return n - HEAD_SUFFIX if head_kind(sizes) != 0 else n


@kernel
def n_atoms(sizes: np.ndarray) -> int:
    """Outputs per action: 1 for a plain Q head, else the atoms or quantiles."""
    if head_kind(sizes) == 0:
        return 1
    return sizes[sizes.shape[0] - HEAD_SUFFIX + 1]


@kernel
def head_dueling(sizes: np.ndarray) -> bool:
    """Whether a distributional head is dueling (False for a plain Q head, whose
    parameter count says it: ``mlp.layout``)."""
    if head_kind(sizes) == 0:
        return False
    return sizes[sizes.shape[0] - HEAD_SUFFIX + 2] != 0


@kernel
def n_actions(sizes: np.ndarray) -> int:
    """Number of actions: the output width over :func:`n_atoms`."""
    return sizes[n_layers(sizes)] // n_atoms(sizes)


@kernel
def support_bounds(sizes: np.ndarray) -> tuple:
    """(v_min, v_max) of a C51 head, float64 (stored as their bits in ``sizes``)."""
    n = sizes.shape[0]
    v = sizes[n - 2 : n].view(np.float64)
    return v[0], v[1]


@kernel
def support_step(sizes: np.ndarray) -> float:
    """C51's atom spacing dz = (v_max - v_min) / (n_atoms - 1), float64."""
    v_min, v_max = support_bounds(sizes)
    return (v_max - v_min) / (n_atoms(sizes) - 1)


@kernel
def softmax_into(x: np.ndarray, p: np.ndarray) -> float:
    """p = softmax(x) over one row; returns log(sum(exp(x - max(x)))) + max(x),
    the log-partition (so log p_k = x_k - it).

    x : float (n,); p : float (n,), written (any float dtypes). The exponentials
    run in x's dtype, their sum in float64.
    """
    mx = x[0]
    for k in range(1, x.shape[0]):
        mx = max(mx, x[k])
    total = 0.0
    for k in range(x.shape[0]):
        e = math.exp(x[k] - mx)
        p[k] = e
        total += e
    inv = 1.0 / total
    for k in range(x.shape[0]):
        p[k] *= inv
    return mx + math.log(total)


@kernel
def expected_q(raw: np.ndarray, sizes: np.ndarray, q: np.ndarray) -> None:
    """Q-values of a distributional head's outputs, row by row.

    raw : float (B, n_actions * n_atoms), the output layer (dueling combined);
    q : float (B, n_actions), written. sizes : a distributional network's.

    C51: Q[a] = sum_k softmax(raw[a])_k z_k, with z_k = v_min + k dz (float64)
    and the sums in float64; QR: Q[a] = mean_k raw[a, k] (summed in float64).
    """
    n = n_atoms(sizes)
    n_act = q.shape[1]
    if head_kind(sizes) == C51:
        v_min = support_bounds(sizes)[0]
        dz = support_step(sizes)
        e = np.empty(n, dtype=raw.dtype)
        for i in range(raw.shape[0]):
            for a in range(n_act):
                block = raw[i, a * n : (a + 1) * n]
                mx = block[0]
                for k in range(1, n):
                    mx = max(mx, block[k])
                total = 0.0
                for k in range(n):
                    e[k] = math.exp(block[k] - mx)
                    total += e[k]
                mean = 0.0
                for k in range(n):
                    mean += e[k] * (v_min + k * dz)
                q[i, a] = mean / total
        return
    inv = 1.0 / n
    for i in range(raw.shape[0]):
        for a in range(n_act):
            total = 0.0
            for k in range(a * n, (a + 1) * n):
                total += raw[i, k]
            q[i, a] = total * inv
