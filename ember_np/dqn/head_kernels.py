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
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

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


@intrinsic
def _float_of_bits(typingctx, bits):  # noqa: ANN001, ANN202
    """The float64 whose bits are the int64 ``bits`` (an LLVM bitcast: no code)."""
    if bits != types.int64:
        return None

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


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
def exp_into(x: np.ndarray, out: np.ndarray, bits: np.ndarray) -> None:
    """out = exp(x) elementwise, for x in [-87, 88] (smaller x give exp(-87)).

    x, out : float (n,), the same dtype, distinct arrays (in place, LLVM's
    run-time overlap check sends the loop to its scalar version, 8x slower);
    bits : int32 (>= n,), scratch.
    float32: a polynomial that vectorises (libm's expf is one call per value,
    8x slower); float64: ``math.exp`` (finite differences).
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
        out[i] = y + r + f(1.0)
        bits[i] = (np.int32(k) + np.int32(127)) << np.int32(23)
    scale = bits[:n].view(np.float32)
    for i in range(n):
        out[i] *= scale[i]


@kernel
def softmax_into(x: np.ndarray, p: np.ndarray, scratch: np.ndarray, bits: np.ndarray) -> float:
    """p = softmax(x) over one row; returns log(sum(exp(x - max(x)))) + max(x),
    the log-partition (so log p_k = x_k - it).

    x : float (n,); p : float (n,), written (any float dtypes); scratch : x's
    dtype, (>= 2n,); bits : int32 (>= n,). The exponentials run in x's dtype
    (:func:`exp_into`), their sum in float64.
    """
    n = x.shape[0]
    mx = x[0]
    for k in range(1, n):
        mx = max(mx, x[k])
    shifted = scratch[:n]
    e = scratch[n : 2 * n]
    for k in range(n):
        shifted[k] = x[k] - mx
    exp_into(shifted, e, bits)
    total = 0.0
    for k in range(n):
        total += e[k]
    inv = 1.0 / total
    for k in range(n):
        p[k] = e[k] * inv
    return mx + math.log(total)


@kernel
def expected_q(raw: np.ndarray, sizes: np.ndarray, q: np.ndarray) -> None:
    """Q-values of a distributional head's outputs, row by row.

    raw : float (B, n_actions * n_atoms), the output layer (dueling combined);
    q : float (B, n_actions), written. sizes : a distributional network's.

    C51: Q[a] = sum_k softmax(raw[a])_k z_k, with z_k = v_min + k dz (computed
    in float64), in raw's dtype; QR: Q[a] = mean_k raw[a, k] (summed in float64).
    """
    n = n_atoms(sizes)
    n_act = q.shape[1]
    if head_kind(sizes) == C51:
        v_min = support_bounds(sizes)[0]
        dz = support_step(sizes)
        z = np.empty(n, dtype=raw.dtype)
        for k in range(n):
            z[k] = v_min + k * dz
        zero = raw.dtype.type(0.0)
        shifted = np.empty(n_act * n, dtype=raw.dtype)
        e = np.empty(n_act * n, dtype=raw.dtype)
        bits = np.empty(n_act * n, dtype=np.int32)
        for i in range(raw.shape[0]):
            for a in range(n_act):
                o = a * n
                mx = raw[i, o]
                for k in range(o + 1, o + n):
                    mx = max(mx, raw[i, k])
                for k in range(o, o + n):
                    shifted[k] = raw[i, k] - mx
            exp_into(shifted, e, bits)
            for a in range(n_act):
                total = zero
                mean = zero
                for k in range(n):
                    total += e[a * n + k]
                    mean += e[a * n + k] * z[k]
                q[i, a] = mean / total
        return
    inv = 1.0 / n
    for i in range(raw.shape[0]):
        for a in range(n_act):
            total = 0.0
            for k in range(a * n, (a + 1) * n):
                total += raw[i, k]
            q[i, a] = total * inv
