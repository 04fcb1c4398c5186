"""Acrobot-v1 dynamics as compiled kernels, bit for bit gymnasium's ``AcrobotEnv``.

State slots (float64[8]): theta1, theta2, dtheta1, dtheta2; the other slots are
unused. Every expression keeps gymnasium's operation order and the kernels are
compiled without fast-math, so the float64 states agree exactly. Two NumPy
behaviours need more than plain arithmetic:

* ``np.float64 ** 2`` (Acrobot's ``dtheta**2``, ``d2**2``) calls libm ``pow``, which
  rounds differently from ``x * x`` for about one argument in a thousand. LLVM
  rewrites any visible ``pow(x, 2.0)`` into ``x * x``, so :func:`_pow2` calls
  ``pow`` through a symbol name LLVM does not know.
* Acrobot's first observation takes ``np.cos`` / ``np.sin`` of float32 angles, which
  NumPy computes with its own SIMD polynomials (fused multiply-adds), not libm:
  :func:`_np_sincos_f32` replays that algorithm.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math

import numpy as np
from llvmlite import binding as _llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ember_np._jit import compiled_only, exact_kernel
from ember_np.rng import next_double

# ---------------------------------------------------------------- Acrobot-v1
ACROBOT_DT = 0.2
# rk4 integrates over t = [0, dt]: its step is t[1] - t[0], halved for k2, k3.
ACROBOT_DT2 = ACROBOT_DT / 2.0
ACROBOT_DT6 = ACROBOT_DT / 6.0
LINK_LENGTH_1 = 1.0
LINK_MASS_1 = 1.0
LINK_MASS_2 = 1.0
LINK_COM_POS_1 = 0.5
LINK_COM_POS_2 = 0.5
LINK_MOI = 1.0
ACROBOT_G = 9.8
MAX_VEL_1 = 4 * math.pi
MAX_VEL_2 = 9 * math.pi
# wrap(x, -pi, pi) steps by M - m, which gymnasium computes at every call.
TWO_PI = math.pi - (-math.pi)
TORQUE_NEG, TORQUE_ZERO, TORQUE_POS = -1.0, 0.0, 1.0  # AVAIL_TORQUE = [-1.0, 0.0, +1]
ACROBOT_RESET_LOW, ACROBOT_RESET_HIGH = -0.1, 0.1
ACROBOT_OBS_SIZE = 6

# ---------------------------------------------- NumPy's float32 sin/cos (SIMD)
# Constants of numpy/_core/src/umath/loops_trigonometric.dispatch.cpp.
_F32 = np.float32
_TWO_OVER_PI = _F32(float.fromhex("0x1.45f306p-1"))
_CW_PIO2_HI = _F32(float.fromhex("-0x1.921fb0p+00"))
_CW_PIO2_MED = _F32(float.fromhex("-0x1.5110b4p-22"))
_CW_PIO2_LO = _F32(float.fromhex("-0x1.846988p-48"))
_RINT_MAGIC = _F32(float.fromhex("0x1.800000p+23"))
_COS_C8 = _F32(float.fromhex("0x1.98e616p-16"))
_COS_C6 = _F32(float.fromhex("-0x1.6c06dcp-10"))
_COS_C4 = _F32(float.fromhex("0x1.55553cp-05"))
_COS_C2 = _F32(float.fromhex("-0x1.000000p-01"))
_COS_C0 = _F32(1.0)
_SIN_C9 = _F32(float.fromhex("0x1.7d3bbcp-19"))
_SIN_C7 = _F32(float.fromhex("-0x1.a06bbap-13"))
_SIN_C5 = _F32(float.fromhex("0x1.11119ap-07"))
_SIN_C3 = _F32(float.fromhex("-0x1.555556p-03"))
_F32_ZERO = _F32(0.0)

# libm's pow under a private name: LLVM's library-call simplifier only recognises
# the name "pow" (and llvm.pow), so calls through this alias stay real pow calls.
# The alias is registered at import, before any kernel (or its numba cache) loads.
_POW_SYMBOL = "ember_np_classic_libm_pow"
# dlopen(NULL) searches the process's global symbols, as numba's JIT linker does.
try:
    _libm_pow = ctypes.CDLL(None).pow
except AttributeError:  # libm not loaded globally (unusual): open it by name
    _libm_pow = ctypes.CDLL(ctypes.util.find_library("m")).pow
_llvm.add_symbol(_POW_SYMBOL, ctypes.cast(_libm_pow, ctypes.c_void_p).value)


@compiled_only
@intrinsic
def _pow2(typingctx, x):  # type: ignore[no-untyped-def]
    """``pow(x, 2.0)`` from libm: what ``np.float64(x) ** 2`` computes, not ``x * x``."""
    if not isinstance(x, types.Float):
        return None
    sig = types.float64(types.float64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        double = ir.DoubleType()
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(double, [double, double]), _POW_SYMBOL
        )
        return builder.call(fn, [args[0], ir.Constant(double, 2.0)])

    return sig, codegen


@compiled_only
@intrinsic
def _fma_f32(typingctx, a, b, c):  # type: ignore[no-untyped-def]
    """Fused ``a * b + c`` in float32, one rounding (Highway's ``MulAdd``)."""
    if not all(t == types.float32 for t in (a, b, c)):
        return None
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        f32 = ir.FloatType()
        fn = builder.module.declare_intrinsic(
            "llvm.fma", [f32], ir.FunctionType(f32, [f32, f32, f32])
        )
        return builder.call(fn, args)

    return sig, codegen


@exact_kernel
def _np_sincos_f32(x: np.float32, want_cos: bool) -> np.float32:
    """``np.cos`` / ``np.sin`` of a float32, as NumPy's FMA SIMD loop computes it.

    Parameters
    ----------
    x : float32
        The angle; must satisfy ``|x| <= 71476`` (beyond it NumPy switches to libm).
        Acrobot only calls this with reset angles in [-0.1, 0.1].
    want_cos : bool
        Cosine if true, sine otherwise.

    Returns
    -------
    float32
        Bit-identical to NumPy on CPUs where it runs the fused-multiply-add SIMD loop
        (every x86-64 with FMA3 or AVX-512, which is what NumPy dispatches to).
    """
    # Nearest quadrant by the 1.5 * 2**23 trick. NumPy's source multiplies and then
    # adds, but its compiler contracts the two into one FMA; the exact product
    # matters when x * 2/pi lands on a half-integer.
    quadrant = _fma_f32(x, _TWO_OVER_PI, _RINT_MAGIC) - _RINT_MAGIC
    r = _fma_f32(quadrant, _CW_PIO2_HI, x)
    r = _fma_f32(quadrant, _CW_PIO2_MED, r)
    r = _fma_f32(quadrant, _CW_PIO2_LO, r)
    r2 = r * r
    iquadrant = np.int32(quadrant)
    if want_cos:
        iquadrant += 1
    if (iquadrant & 1) == 0:
        y = _fma_f32(_SIN_C9, r2, _SIN_C7)
        y = _fma_f32(y, r2, _SIN_C5)
        y = _fma_f32(y, r2, _SIN_C3)
        y = _fma_f32(y, r2, _F32_ZERO)
        y = _fma_f32(y, r, r)
    else:
        y = _fma_f32(_COS_C8, r2, _COS_C6)
        y = _fma_f32(y, r2, _COS_C4)
        y = _fma_f32(y, r2, _COS_C2)
        y = _fma_f32(y, r2, _COS_C0)
    if (iquadrant & 2) == 2:
        y = _F32_ZERO - y
    return y


@exact_kernel
def _acrobot_dsdt(
    theta1: float, theta2: float, dtheta1: float, dtheta2: float, a: float
) -> tuple[float, float, float, float]:
    """gymnasium's ``AcrobotEnv._dsdt`` with the "book" equations.

    The torque derivative (always 0.0) is dropped: rk4 adds ``dt * 0.0`` to the
    torque, which leaves it unchanged.
    """
    m1 = LINK_MASS_1
    m2 = LINK_MASS_2
    l1 = LINK_LENGTH_1
    lc1 = LINK_COM_POS_1
    lc2 = LINK_COM_POS_2
    i1 = LINK_MOI
    i2 = LINK_MOI
    g = ACROBOT_G
    # Python-float constants squared (lc1**2, ...) are exact; squares of the
    # state go through libm pow like NumPy's scalar power does.
    d1 = (
        m1 * (lc1 * lc1)
        + m2 * ((l1 * l1) + (lc2 * lc2) + 2 * l1 * lc2 * math.cos(theta2))
        + i1
        + i2
    )
    d2 = m2 * ((lc2 * lc2) + l1 * lc2 * math.cos(theta2)) + i2
    phi2 = m2 * lc2 * g * math.cos(theta1 + theta2 - math.pi / 2.0)
    phi1 = (
        -m2 * l1 * lc2 * _pow2(dtheta2) * math.sin(theta2)
        - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * math.sin(theta2)
        + (m1 * lc1 + m2 * l1) * g * math.cos(theta1 - math.pi / 2)
        + phi2
    )
    ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * _pow2(dtheta1) * math.sin(theta2) - phi2) / (
        m2 * (lc2 * lc2) + i2 - _pow2(d2) / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


@exact_kernel
def _acrobot_write_obs(state: np.ndarray, obs: np.ndarray) -> None:
    """``AcrobotEnv._get_ob`` for a float64 state (any step after a reset)."""
    obs[0] = math.cos(state[0])
    obs[1] = math.sin(state[0])
    obs[2] = math.cos(state[1])
    obs[3] = math.sin(state[1])
    obs[4] = state[2]
    obs[5] = state[3]


@exact_kernel
def acrobot_reset(state: np.ndarray, rng_state: np.ndarray, obs: np.ndarray) -> None:
    """Start an Acrobot episode: ``uniform(-0.1, 0.1, size=(4,)).astype(np.float32)``.

    Parameters
    ----------
    state : ndarray of float64, shape (8,)
        Receives theta1, theta2, dtheta1, dtheta2 in slots 0-3.
    rng_state : ndarray of uint64, shape (4,)
        PCG64 state (``Rng.state``); four doubles are drawn, in element order.
    obs : ndarray of float32, shape (6,)
        Receives the observation gymnasium's ``reset`` returns.
    """
    span = ACROBOT_RESET_HIGH - ACROBOT_RESET_LOW
    for i in range(4):
        # gymnasium keeps the float32 cast in its state; the first step widens it
        # back to float64 (np.append with the torque), so the values stay exact.
        state[i] = np.float32(ACROBOT_RESET_LOW + span * next_double(rng_state))
    # Until the first step the state is a float32 array, so _get_ob's np.cos/np.sin
    # run NumPy's float32 loops rather than float64 libm.
    theta1 = np.float32(state[0])
    theta2 = np.float32(state[1])
    obs[0] = _np_sincos_f32(theta1, True)
    obs[1] = _np_sincos_f32(theta1, False)
    obs[2] = _np_sincos_f32(theta2, True)
    obs[3] = _np_sincos_f32(theta2, False)
    obs[4] = state[2]
    obs[5] = state[3]


@exact_kernel
def acrobot_step(state: np.ndarray, action: int, obs: np.ndarray) -> tuple[float, bool]:
    """One RK4 step of ``dt = 0.2`` s with torque ``AVAIL_TORQUE[action]``.

    Parameters
    ----------
    state : ndarray of float64, shape (8,)
        theta1, theta2, dtheta1, dtheta2 in slots 0-3, updated in place.
    action : int
        0, 1 or 2: torque -1, 0 or +1 on the joint between the links.
    obs : ndarray of float32, shape (6,)
        Receives the new observation.

    Returns
    -------
    reward : float
        -1.0, or 0.0 on the terminal step.
    terminated : bool
        The free end rose above the target height.
    """
    if action == 0:
        a = TORQUE_NEG
    elif action == 1:
        a = TORQUE_ZERO
    else:
        a = TORQUE_POS
    y0 = state[0]
    y1 = state[1]
    y2 = state[2]
    y3 = state[3]
    # rk4's array expressions are elementwise, e.g. y0 + dt2 * k1 is
    # y0[j] + (dt2 * k1[j]) for each j; spelled out per component.
    k1_0, k1_1, k1_2, k1_3 = _acrobot_dsdt(y0, y1, y2, y3, a)
    k2_0, k2_1, k2_2, k2_3 = _acrobot_dsdt(
        y0 + ACROBOT_DT2 * k1_0,
        y1 + ACROBOT_DT2 * k1_1,
        y2 + ACROBOT_DT2 * k1_2,
        y3 + ACROBOT_DT2 * k1_3,
        a,
    )
    k3_0, k3_1, k3_2, k3_3 = _acrobot_dsdt(
        y0 + ACROBOT_DT2 * k2_0,
        y1 + ACROBOT_DT2 * k2_1,
        y2 + ACROBOT_DT2 * k2_2,
        y3 + ACROBOT_DT2 * k2_3,
        a,
    )
    k4_0, k4_1, k4_2, k4_3 = _acrobot_dsdt(
        y0 + ACROBOT_DT * k3_0,
        y1 + ACROBOT_DT * k3_1,
        y2 + ACROBOT_DT * k3_2,
        y3 + ACROBOT_DT * k3_3,
        a,
    )
    ns0 = y0 + ACROBOT_DT6 * (k1_0 + 2 * k2_0 + 2 * k3_0 + k4_0)
    ns1 = y1 + ACROBOT_DT6 * (k1_1 + 2 * k2_1 + 2 * k3_1 + k4_1)
    ns2 = y2 + ACROBOT_DT6 * (k1_2 + 2 * k2_2 + 2 * k3_2 + k4_2)
    ns3 = y3 + ACROBOT_DT6 * (k1_3 + 2 * k2_3 + 2 * k3_3 + k4_3)
    # wrap(): repeated subtraction / addition, not a modulo, as gymnasium does.
    while ns0 > math.pi:
        ns0 = ns0 - TWO_PI
    while ns0 < -math.pi:
        ns0 = ns0 + TWO_PI
    while ns1 > math.pi:
        ns1 = ns1 - TWO_PI
    while ns1 < -math.pi:
        ns1 = ns1 + TWO_PI
    # bound(): min(max(x, m), M)
    ns2 = min(max(ns2, -MAX_VEL_1), MAX_VEL_1)
    ns3 = min(max(ns3, -MAX_VEL_2), MAX_VEL_2)
    state[0] = ns0
    state[1] = ns1
    state[2] = ns2
    state[3] = ns3
    terminated = -math.cos(ns0) - math.cos(ns1 + ns0) > 1.0
    reward = 0.0 if terminated else -1.0
    _acrobot_write_obs(state, obs)
    return reward, terminated
