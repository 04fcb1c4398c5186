"""Matrix products BLAS does poorly, in loops compiled once: :func:`product`.

An actor-critic's heads have 1 or 2 outputs (a value, two logits), and a
CartPole observation has 4 entries. For products with few output columns or
few inner terms, ``sgemm`` spends its time packing operands and dispatching,
not multiplying. Measured on the RL Zoo's CartPole-v1 PPO minibatch (256 rows,
64-wide layers, one thread, AMD EPYC Zen 3, OpenBLAS 0.3.31, 2026-12-05), in
microseconds a call:

| product | sgemm | loops |
|---|---:|---:|
| logits, 256x64 @ 64x2 | 3.5 | 2.3 |
| their weight gradient, 64x256 @ 256x2 | 4.1 | 2.4 |
| value, 256x64 @ 64x1 | 3.5 | 1.5 |
| its weight gradient, 64x256 @ 256x1 | 4.0 | 1.5 |
| observation layer, 256x4 @ 4x64 | 3.8 | 2.3 |
| the logits' input gradient, 256x2 @ 2x64 | 3.3 | 2.3 |
| the value's input gradient, 256x1 @ 1x64 | 2.6 | 2.1 |

:func:`product` sends a float32 product with fewer than :data:`SKINNY` output
columns, or with at most :data:`SHORT` inner terms (beta 0, a not transposed),
to the loops, and every other product to :func:`~ember_np.nn._blas.gemm`. (A
loop lost to BLAS on the observation layer's weight gradient, 4x256 @ 256x64:
4.6 us against 3.5.)

The loops are one C function (a numba ``cfunc``, :data:`LOOPS_SYMBOL`) with
``cblas_sgemm``'s arguments, registered with LLVM under a name, as the BLAS is:
a kernel calls the name, and the loops are compiled once, when this module is
first imported (about 1.8 s, then loaded from numba's cache). Inlined into
:func:`product`, they were optimised again in every kernel with a forward or
backward pass: a first PPO run (``ember-np train CartPole-v1 --algo ppo
--steps 4096``, cold cache, mostly compiling) took 19.2 s with the skinny
loops inlined, 17.8 s with these (the means of three runs each, in turn).

Bits: a product with at most SHORT inner terms sums each entry in order, one
multiply-add at a time from the first term's product, as BLAS's kernels do, so
it has BLAS's bits. The skinny products sum in their own fixed order. Either
way the same inputs always give the same bits. float64 products (the gradient
tests) all go to ``dgemm``.
"""

from __future__ import annotations

import llvmlite.binding as ll
import numba
import numpy as np
from numba import types

from ember_np._jit import FASTMATH_FLAGS, PLAN, inlined_kernel, kernel
from ember_np.nn._blas import CBLAS_SYMBOLS, TRANS, gemm, gemm_call, gemm_operands

__all__ = ["LOOPS_SYMBOL", "SHORT", "SKINNY", "product"]

#: A product with fewer output columns than this runs in the loops.
SKINNY = 8

#: So does one with at most this many inner terms (beta 0, a not transposed).
SHORT = 4

#: The name compiled code calls the loops by (float32; float64 calls ``dgemm``).
LOOPS_SYMBOL = "ember_np_loops_sgemm"

_f32p = types.CPointer(types.float32)
_CBLAS_SGEMM = types.void(types.int32, types.int32, types.int32, types.int64, types.int64,
                          types.int64, types.float32, _f32p, types.int64, _f32p, types.int64,
                          types.float32, _f32p, types.int64)  # fmt: skip


@inlined_kernel
def _short(a: np.ndarray, b: np.ndarray, c: np.ndarray, tb: bool, m: int, n: int, k: int) -> None:
    """c <- a @ op(b) for 1 to SHORT inner terms (an observation layer's forward
    product, a head's input gradient), beta 0.

    Each c[i, j] is summed over p in order, one multiply-add at a time from the
    first term's product, as BLAS's kernels do; the missing terms of k < SHORT add
    0 * 0. One loop for every k: with a loop for each k, this function took 2.8 s
    of compiling instead of 0.4 s, and 256x2 @ 2x64 ran in 2.8 us instead of 2.3.
    """
    bt = np.zeros((SHORT, n), dtype=np.float32)  # op(b)'s rows, each contiguous
    for p in range(k):
        for j in range(n):
            bt[p, j] = b[j, p] if tb else b[p, j]
    b0, b1, b2, b3 = bt[0], bt[1], bt[2], bt[3]
    zero = np.float32(0.0)
    for i in range(m):
        ai = a[i]
        s0 = ai[0]
        s1 = ai[1] if k > 1 else zero
        s2 = ai[2] if k > 2 else zero
        s3 = ai[3] if k > 3 else zero
        ci = c[i, :n]
        for j in range(n):
            ci[j] = ((s0 * b0[j] + s1 * b1[j]) + s2 * b2[j]) + s3 * b3[j]


@inlined_kernel
def _columns(b: np.ndarray, tb: bool, n: int, k: int) -> np.ndarray:
    """op(b)'s n columns of k terms, each contiguous: (n, k)."""
    bt = np.empty((n, k), dtype=np.float32)
    for j in range(n):
        for p in range(k):
            bt[j, p] = b[j, p] if tb else b[p, j]
    return bt


@inlined_kernel
def _skinny_gradient(a: np.ndarray, bt: np.ndarray, c: np.ndarray, beta: float, m: int, n: int,
                     k: int) -> None:  # fmt: skip
    """c <- a.T @ bt.T + beta * c with few columns in c (a head's weight gradient;
    bt from :func:`_columns`): c's columns are built along m from the rows of a,
    four rows a pass, added in order (the bits of one row a pass)."""
    ct = np.zeros((n, m), dtype=np.float32)
    p = 0
    while p + 4 <= k:
        a0, a1, a2, a3 = a[p, :m], a[p + 1, :m], a[p + 2, :m], a[p + 3, :m]
        for j in range(n):
            b0, b1, b2, b3 = bt[j, p], bt[j, p + 1], bt[j, p + 2], bt[j, p + 3]
            col = ct[j]
            for i in range(m):
                col[i] = (((col[i] + a0[i] * b0) + a1[i] * b1) + a2[i] * b2) + a3[i] * b3
        p += 4
    for q in range(p, k):
        aq = a[q, :m]
        for j in range(n):
            bqj = bt[j, q]
            col = ct[j]
            for i in range(m):
                col[i] += aq[i] * bqj
    for i in range(m):
        for j in range(n):
            c[i, j] = ct[j, i] if beta == 0.0 else beta * c[i, j] + ct[j, i]


@inlined_kernel
def _skinny_forward(a: np.ndarray, bt: np.ndarray, c: np.ndarray, beta: float, m: int, n: int,
                    k: int) -> None:  # fmt: skip
    """c <- a @ bt.T + beta * c with few columns in c (a head's forward product; bt
    from :func:`_columns`): each entry is one dot product along k."""
    for i in range(m):
        ai = a[i, :k]
        for j in range(n):
            bj = bt[j]
            s = np.float32(0.0)
            for p in range(k):
                s += ai[p] * bj[p]
            c[i, j] = s if beta == 0.0 else beta * c[i, j] + s


@numba.cfunc(_CBLAS_SGEMM, cache=PLAN.cache, fastmath=set(FASTMATH_FLAGS), error_model="numpy")
def _loops_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):  # noqa: ANN001, ANN202, ARG001
    """C <- op(A) @ op(B) + beta * C, row-major, alpha 1 (:func:`product` calls it so;
    ``order`` and ``alpha`` are not read)."""
    ta = trans_a == TRANS
    tb = trans_b == TRANS
    a2 = numba.carray(a, (k if ta else m, lda))
    b2 = numba.carray(b, (n if tb else k, ldb))
    c2 = numba.carray(c, (m, ldc))
    if n >= SKINNY:
        _short(a2, b2, c2, tb, m, n, k)
    elif ta:
        _skinny_gradient(a2, _columns(b2, tb, n, k), c2, beta, m, n, k)
    else:
        _skinny_forward(a2, _columns(b2, tb, n, k), c2, beta, m, n, k)


ll.add_symbol(LOOPS_SYMBOL, _loops_sgemm.address)
_loops = gemm_call({"s": LOOPS_SYMBOL, "d": CBLAS_SYMBOLS["d"]})


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
    Fewer than :data:`SKINNY` columns in c, or at most :data:`SHORT` inner terms
    with beta 0 and no ``trans_a``: the loops (float32; float64 calls ``dgemm``).
    Every other product: ``gemm``.
    """
    n = c.shape[1]
    k = a.shape[0] if trans_a else a.shape[1]
    if n < SKINNY or (0 < k <= SHORT and beta == 0.0 and not trans_a):
        trans, dims, lds = gemm_operands(a, b, c, trans_a, trans_b)
        _loops(trans, dims, a, b, beta, c, lds)
    else:
        gemm(a, b, c, trans_a, trans_b, beta)
