"""Matrix products with few output columns, which BLAS does poorly: :func:`product`.

An actor-critic's heads have 1 or 2 outputs (a value, two logits). For those
products ``sgemm`` spends its time packing operands and dispatching, not
multiplying: measured on the RL Zoo's CartPole-v1 PPO minibatch (256 rows,
64-wide layers, one thread, 2026-12-05), 256x64 @ 64x2 took 3.6 us and its
weight gradient 5.0 us, against 2.0 and 3.1 us in the loops below (the value
head's: 3.6 and 4.0 us against 1.2 and 1.8). :func:`product` computes a
product with fewer than :data:`SKINNY` output columns in plain loops LLVM
vectorises along the long axis, and passes every other product to
:func:`~ember_np.nn._blas.gemm`. (A loop lost to BLAS on the observation
layer's weight gradient, 4 x 256 @ 256 x 64: 4.9 us against 4.4.) The weight gradient's loop adds four rows of ``a``
to c's columns in one pass, in order (the bits of one a pass): 2.9 us instead
of 3.7 for the logits' (2026-12-05, a Python call included).

A product of at most :data:`SHORT` inner terms, the observation layer's
forward product (256x4 @ 4x64 for CartPole's four observations) or a head's
input gradient (256x1 @ 1x64 for the value, 256x2 @ 2x64 for two logits), runs
in :func:`short_product`'s loops: ``sgemm`` took 4.6, 3.4 and 4.2 us for those,
the loops 3.2, 1.6 and 3.5 us. They sum in BLAS's order, one multiply-add at a
time from the first term's product, so they give its bits (with beta 0 only,
the case they take; tests/test_skinny.py compares).

The other loops sum each output in a fixed order (their own, not BLAS's), so
the same inputs always give the same bits.
"""

from __future__ import annotations

import numpy as np

from ember_np._jit import kernel
from ember_np.nn._blas import gemm

__all__ = ["SHORT", "SKINNY", "product", "short_product"]

#: A product with fewer columns than this runs in loops.
SKINNY = 8

#: So does a product with at most this many inner terms (:func:`short_product`).
SHORT = 4


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
    At most :data:`SHORT` inner terms, beta 0 and no ``trans_a``:
    :func:`short_product`. Else, with at least :data:`SKINNY` columns in c:
    ``gemm``; with fewer and ``trans_a``, c's columns are built along m from the
    rows of ``a`` (a weight gradient); without, each entry is one dot product
    along k (a forward pass).
    """
    m = c.shape[0]
    n = c.shape[1]
    k = a.shape[0] if trans_a else a.shape[1]
    dt = c.dtype.type
    if n >= SKINNY and k <= SHORT and beta == 0.0 and not trans_a:
        short_product(a, b if not trans_b else np.ascontiguousarray(b.T), c)
        return
    if n >= SKINNY:
        gemm(a, b, c, trans_a, trans_b, beta)
        return
    zero = dt(0.0)
    keep = dt(beta)
    if trans_a:  # c[:, j] += a[p, :] * op(b)[p, j], along m (a's rows)
        ct = np.zeros((n, m), dtype=c.dtype)
        p = 0
        while p + 4 <= k:  # four terms a pass, added in order: the bits of one a pass
            a0, a1, a2, a3 = a[p], a[p + 1], a[p + 2], a[p + 3]
            for j in range(n):
                b0 = b[j, p] if trans_b else b[p, j]
                b1 = b[j, p + 1] if trans_b else b[p + 1, j]
                b2 = b[j, p + 2] if trans_b else b[p + 2, j]
                b3 = b[j, p + 3] if trans_b else b[p + 3, j]
                col = ct[j]
                for i in range(m):
                    col[i] = (((col[i] + a0[i] * b0) + a1[i] * b1) + a2[i] * b2) + a3[i] * b3
            p += 4
        for q in range(p, k):
            aq = a[q]
            for j in range(n):
                bqj = b[j, q] if trans_b else b[q, j]
                col = ct[j]
                for i in range(m):
                    col[i] += aq[i] * bqj
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


@kernel
def short_product(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    """c <- a @ b for 1 to :data:`SHORT` inner terms (an observation layer's forward
    product, a head's input gradient).

    a (m, k), b (k, n), c (m, n): 2-D, rows contiguous. Each c[i, j] is summed over
    p in order, one multiply-add at a time from the first term's product, as BLAS's
    kernels do. A row of c is written, then read once more for all the other terms
    (loaded first, each add fuses with its own product): with a pass per term,
    256x4 @ 4x64 took 6.9 us (BLAS 4.6 us), with two passes 3.2 us.
    """
    m = c.shape[0]
    n = c.shape[1]
    k = a.shape[1]
    last = k - 1
    b0, b1, b2, b3 = b[0], b[min(1, last)], b[min(2, last)], b[min(3, last)]
    for i in range(m):
        ai = a[i]
        ci = c[i]
        s0 = ai[0]
        for j in range(n):
            ci[j] = s0 * b0[j]
        s1, s2, s3 = ai[min(1, last)], ai[min(2, last)], ai[min(3, last)]
        if k == 4:
            for j in range(n):
                ci[j] = ((ci[j] + s1 * b1[j]) + s2 * b2[j]) + s3 * b3[j]
        elif k == 3:
            for j in range(n):
                ci[j] = (ci[j] + s1 * b1[j]) + s2 * b2[j]
        elif k == 2:
            for j in range(n):
                ci[j] += s1 * b1[j]
