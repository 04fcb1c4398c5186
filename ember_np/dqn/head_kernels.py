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
from collections.abc import Callable

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ember_np._jit import compiled_only, kernel
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


@compiled_only
@intrinsic
def _float_of_bits(typingctx, bits):  # noqa: ANN001, ANN202
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


@kernel
def support_bounds(sizes: np.ndarray) -> tuple:
    """(v_min, v_max) of a C51 head, float64 (stored as their bits in ``sizes``)."""
    n = sizes.shape[0]
    return _float_of_bits(sizes[n - 2]), _float_of_bits(sizes[n - 1])


@kernel
def support_step(sizes: np.ndarray) -> float:
    """C51's atom spacing dz = (v_max - v_min) / (n_atoms - 1), float64."""
    v_min, v_max = support_bounds(sizes)
    return (v_max - v_min) / (n_atoms(sizes) - 1)


# exp(x) = 2^k e^r, k = round(x / ln 2), r = x - k ln 2 in [-ln2/2, ln2/2]: Cephes'
# expf polynomial for e^r (about 1 ulp in float32) and 2^k from its exponent bits;
# r is computed in float64, one rounding (fast-math could merge the two float32
# parts of Cody and Waite's reduction into one product, and lose its precision).
_LOG2E = 1.4426950408889634
_LN2 = 0.6931471805599453
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
             1.6666665459e-1, 5.0000001201e-1)  # fmt: skip


@kernel
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
        two_k = _float_of_bits(np.int32((np.int64(k) + 127) << 23))  # numba: int32 + int32 is int64
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


@kernel
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


@kernel
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
