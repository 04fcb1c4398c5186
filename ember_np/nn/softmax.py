"""Softmax building blocks: a vectorised float32 exp, row maxima, exponentials of
blocks of columns, normalisation (numba kernels).

A categorical output (C51's atoms, a policy's logits) is a softmax of one
block of units per row; these kernels compute it without libm's scalar expf.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ember_np._jit import compiled_only, kernel, ordered_kernel


@compiled_only
@intrinsic
def float_of_bits(typingctx, bits):  # noqa: ANN001, ANN202
    """The float64 whose bits are the int64 ``bits``, or the float32 whose bits
    are the int32 ``bits`` (an LLVM bitcast: no code, and it vectorises)."""
    if bits == types.int64:
        return types.float64(types.int64), _bitcast_to(ir.DoubleType())
    if bits == types.int32:
        return types.float32(types.int32), _bitcast_to(ir.FloatType())
    return None


def _bitcast_to(ty: ir.Type) -> Callable:
    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        return builder.bitcast(args[0], ty)

    return codegen


# exp(x) = 2^k e^r, k = round(x / ln 2), r = x - k ln 2 in [-ln2/2, ln2/2]: Cephes'
# expf polynomial for e^r (about 1 ulp in float32) and 2^k from its exponent bits;
# r is computed in float64, one rounding (fast-math could merge the two float32
# parts of Cody and Waite's reduction into one product, and lose its precision).
_LOG2E = 1.4426950408889634


_LN2 = 0.6931471805599453


_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
             1.6666665459e-1, 5.0000001201e-1)  # fmt: skip


@ordered_kernel
def exp_into(x: np.ndarray, out: np.ndarray) -> None:
    """out = exp(x) elementwise, for x in [-87, 88] (smaller x give exp(-87)).

    x, out : float (n,), the same dtype, distinct arrays (in place, LLVM's
    run-time overlap check sends the loop to its scalar version, 8x slower).
    float32: a polynomial that vectorises (libm's expf is one call per value,
    8x slower), 2^k made from its exponent bits in the same loop; float64:
    ``math.exp`` (finite differences).
    """
    n = x.shape[0]
    if x.itemsize != 4:
        for i in range(n):
            out[i] = math.exp(x[i])
        return
    f = np.float32
    c0, c1, c2, c3, c4, c5 = _EXP_POLY
    lo = f(-87.0)
    hi = f(88.0)
    for i in range(n):
        v = x[i]
        v = lo if v < lo else (hi if v > hi else v)
        k = np.floor(v * f(_LOG2E) + f(0.5))
        r = f(np.float64(v) - np.float64(k) * _LN2)
        y = (((((f(c0) * r + f(c1)) * r + f(c2)) * r + f(c3)) * r + f(c4)) * r + f(c5)) * (r * r)
        two_k = float_of_bits(np.int32((np.int64(k) + 127) << 23))  # numba: int32 + int32 is int64
        out[i] = (y + r + f(1.0)) * two_k


@kernel
def exp_rows(x: np.ndarray) -> tuple:
    """The exponentials of a softmax, for every row of ``x`` at once.

    x : float (R, n), rows contiguous. Returns ``e``, x's dtype (R n,):
    e[i n + k] = exp(x[i, k] - row_max[i]), and ``row_max``, x's dtype (R,):
    max_k x[i, k] (:func:`exp_blocks` with every row's block 0).
    """
    return exp_blocks(x, np.zeros(x.shape[0], dtype=np.int64), x.shape[1])


@kernel
def row_maximum(r: np.ndarray) -> float:
    """max_k r[k] of a float (n,) row, n >= 1, in four running maxima.

    One running maximum is a chain of dependent compare-and-selects that LLVM
    cannot vectorise without assuming no NaNs; four independent ones took
    1.9 us for 128 rows of 51 against 2.6. The maximum is exact either way.
    """
    n = r.shape[0]
    m0 = r[0]
    m1 = m0
    m2 = m0
    m3 = m0
    k = 0
    while k + 4 <= n:
        v0 = r[k]
        v1 = r[k + 1]
        v2 = r[k + 2]
        v3 = r[k + 3]
        m0 = v0 if v0 > m0 else m0
        m1 = v1 if v1 > m1 else m1
        m2 = v2 if v2 > m2 else m2
        m3 = v3 if v3 > m3 else m3
        k += 4
    while k < n:
        v0 = r[k]
        m0 = v0 if v0 > m0 else m0
        k += 1
    m0 = m1 if m1 > m0 else m0
    m2 = m3 if m3 > m2 else m2
    return m2 if m2 > m0 else m0


@kernel
def exp_blocks(x: np.ndarray, block: np.ndarray, n: int) -> tuple:
    """The exponentials of a softmax over one block of ``n`` columns of each row.

    x : float (R, width), rows contiguous; block : int (R,), row i's block is
    x[i, block_i n : (block_i + 1) n]. Returns ``e``, x's dtype (R n,):
    e[i n + k] = exp(x[i, block_i n + k] - row_max[i]) (:func:`exp_into`, one
    call for all rows: per-row calls of 51 values run 2.5x slower), and
    ``row_max``, x's dtype (R,), each block's largest value. Reads the blocks
    where they are (a copy of them first cost as much as the exponentials).
    """
    rows = x.shape[0]
    shifted = np.empty(rows * n, dtype=x.dtype)
    row_max = np.empty(rows, dtype=x.dtype)
    for i in range(rows):
        o = block[i] * n
        r = x[i, o : o + n]
        mx = row_maximum(r)
        row_max[i] = mx
        s = i * n
        for k in range(n):
            shifted[s + k] = r[k] - mx
    e = np.empty(rows * n, dtype=x.dtype)
    exp_into(shifted, e)
    return e, row_max


@ordered_kernel
def normalized(e: np.ndarray, p: np.ndarray) -> float:
    """p = e / sum(e), one softmax row from its exponentials (:func:`exp_rows`).

    e : float (n,); p : float (n,), written (any float dtype). The sum is taken
    in float64 and returned.
    """
    n = e.shape[0]
    total = 0.0
    for k in range(n):
        total += e[k]
    inv = 1.0 / total
    for k in range(n):
        p[k] = e[k] * inv
    return total
