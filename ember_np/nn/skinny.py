"""Matrix products with few output columns, which BLAS does poorly: :func:`product`.

An actor-critic's heads have 1 or 2 outputs (a value, two logits). For those
products ``sgemm`` spends its time packing operands and dispatching, not
multiplying: measured on the RL Zoo's CartPole-v1 PPO minibatch (256 rows,
64-wide layers, one thread, 2026-12-05), 256x64 @ 64x2 took 3.6 us and its
weight gradient 5.0 us, against 2.0 and 3.1 us in the loops below (the value
head's: 3.6 and 4.0 us against 1.2 and 1.8). :func:`product` computes a
product with fewer than :data:`SKINNY` output columns in plain loops LLVM
vectorises along the long axis, and passes every other product to
:func:`~ember_np.nn._blas.gemm`. (Loops lost to BLAS on the observation
layer's products, 4 inputs by 64 outputs: each output row is a short loop
entered once per input.)

The loops sum each output in a fixed order (their own, not BLAS's), so the
same inputs always give the same bits.
"""

from __future__ import annotations

import numpy as np

from ember_np._jit import kernel
from ember_np.nn._blas import gemm

__all__ = ["SKINNY", "product"]

#: A product with fewer columns than this runs in loops.
SKINNY = 8


@kernel
def product(
    a: np.ndarray, b: np.ndarray, c: np.ndarray, trans_a: bool, trans_b: bool, beta: float
) -> None:
    """c <- op(a) @ op(b) + beta * c, as :func:`~ember_np.nn._blas.gemm` (same arguments).

    Parameters
    ----------
    a, b : ndarray of c's dtype, 2-D, rows contiguous
        op(x) is x, or x.T when the matching ``trans_*`` flag is set.
    c : ndarray (m, n), rows contiguous
        Written (beta 0: never read, as BLAS).
    trans_a, trans_b : bool
    beta : float

    Notes
    -----
    With at least :data:`SKINNY` columns in c: ``gemm``. Else, with ``trans_a``,
    c's columns are built along m from the rows of ``a`` (a weight gradient);
    without, each entry is one dot product along k (a forward pass).
    """
    m = c.shape[0]
    n = c.shape[1]
    k = a.shape[0] if trans_a else a.shape[1]
    if n >= SKINNY:
        gemm(a, b, c, trans_a, trans_b, beta)
        return
    dt = c.dtype.type
    zero = dt(0.0)
    keep = dt(beta)
    if trans_a:  # c[:, j] += a[p, :] * op(b)[p, j], along m (a's rows)
        ct = np.zeros((n, m), dtype=c.dtype)
        for p in range(k):
            ap = a[p]
            for j in range(n):
                bpj = b[j, p] if trans_b else b[p, j]
                col = ct[j]
                for i in range(m):
                    col[i] += ap[i] * bpj
        for i in range(m):
            for j in range(n):
                c[i, j] = ct[j, i] if beta == 0.0 else keep * c[i, j] + ct[j, i]
        return
    bt = np.empty((n, k), dtype=c.dtype)  # op(b)'s columns, each contiguous
    for j in range(n):
        for p in range(k):
            bt[j, p] = b[j, p] if trans_b else b[p, j]
    for i in range(m):
        ai = a[i]
        for j in range(n):
            bj = bt[j]
            s = zero
            for p in range(k):
                s += ai[p] * bj[p]
            c[i, j] = s if beta == 0.0 else keep * c[i, j] + s
