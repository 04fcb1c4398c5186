"""Explicit, saveable random streams usable inside compiled kernels.

Every random draw in ember_np (weight initialisation, replay sampling,
exploration, native environment resets) comes from an :class:`Rng`: a PCG64
generator whose whole state is four ``uint64`` words in a NumPy array. The
array is passed into ``@njit`` kernels, which advance it in place, and it is
saved in checkpoints, so a restored agent continues the exact same streams.
Nothing uses numba's hidden global generator (which ``np.random.seed`` called
from Python does not even reach).

The generator is NumPy's ``PCG64`` (128-bit LCG, XSL-RR output), bit for bit:
``Rng(seed).random()`` returns the same numbers as
``np.random.default_rng(seed).random()``. The state layout is
``[state_hi, state_lo, inc_hi, inc_lo]``.
"""

from __future__ import annotations

import math
from typing import Any, overload

import numpy as np

from ember_np._jit import exact_kernel, kernel

__all__ = ["Rng", "fill_normals"]

_M32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_S11 = np.uint64(11)
_S58 = np.uint64(58)
_S63 = np.uint64(63)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)
# PCG_DEFAULT_MULTIPLIER_128 = 0x2360ED051FC65DA4_4385DF649FCCF645
_MULT_HI = np.uint64(0x2360ED051FC65DA4)
_MULT_LO = np.uint64(0x4385DF649FCCF645)
_TWO_M53 = 1.0 / 9007199254740992.0  # 2**-53
_TWO_M31 = 1.0 / 2147483648.0  # 2**-31


@kernel
def mul_hi_lo(a: np.uint64, b: np.uint64) -> tuple[np.uint64, np.uint64]:
    """Full 64 x 64 -> 128-bit product of two uint64 (a, b), as (high, low) uint64 words."""
    a_lo = a & _M32
    a_hi = a >> _S32
    b_lo = b & _M32
    b_hi = b >> _S32
    p0 = a_lo * b_lo
    p1 = a_lo * b_hi
    p2 = a_hi * b_lo
    p3 = a_hi * b_hi
    carry = ((p0 >> _S32) + (p1 & _M32) + (p2 & _M32)) >> _S32
    hi = p3 + (p1 >> _S32) + (p2 >> _S32) + carry
    return hi, a * b


@kernel
def next_u64(state: np.ndarray) -> np.uint64:
    """Advance a PCG64 state in place and return the next 64 random bits.

    state <- state * MULT + inc (mod 2**128); output = rotr(hi ^ lo, hi >> 58)
    of the new state (NumPy's ``pcg64_random_r``).
    """
    s_hi = state[0]
    s_lo = state[1]
    hi, lo = mul_hi_lo(s_lo, _MULT_LO)
    hi = hi + s_lo * _MULT_HI + s_hi * _MULT_LO
    new_lo = lo + state[3]
    if new_lo < lo:  # carry out of the low word
        hi = hi + _ONE
    new_hi = hi + state[2]
    state[0] = new_hi
    state[1] = new_lo
    x = new_hi ^ new_lo
    rot = new_hi >> _S58
    return (x >> rot) | (x << ((_ZERO - rot) & _S63))


@kernel
def next_double(state: np.ndarray) -> float:
    """Uniform float64 in [0, 1) with 53 random bits (NumPy's ``random()``).

    state : uint64 (4,), a PCG64 state (odd increment), advanced in place.
    """
    return float(next_u64(state) >> _S11) * _TWO_M53


@kernel
def next_below(state: np.ndarray, n: int | np.int64) -> int:
    """Uniform integer in [0, n) for n >= 1, without modulo bias (Lemire).

    state : uint64 (4,), a PCG64 state (odd increment), advanced in place; n : int >= 1.
    """
    bound = np.uint64(n)
    hi, lo = mul_hi_lo(next_u64(state), bound)
    if lo < bound:
        threshold = (_ZERO - bound) % bound
        while lo < threshold:
            hi, lo = mul_hi_lo(next_u64(state), bound)
    return np.int64(hi)  # type: ignore[return-value]  # an int64: a Python int to callers


@exact_kernel
def fill_normals(state: np.ndarray, out: np.ndarray) -> None:
    """Fill ``out`` with standard normal draws (Marsaglia's polar method, two per pair).

    state : uint64 (4,), a PCG64 state (odd increment), advanced; out : float (n,),
    written (float32 or float64).

    Per pair, one 64-bit draw x gives u = hi32(x) / 2^31 - 1 and v = lo32(x) / 2^31 - 1
    (uniform on [-1, 1) with 32 bits each), redrawn until 0 < s = u^2 + v^2 < 1 (a
    pair is kept with probability pi / 4); then z0 = u m, z1 = v m with
    m = sqrt(-2 ln(s) / s), in float64; an odd ``n`` drops the last z1. No trigonometry
    (Box-Muller's cos and sin cost twice as much), and strict IEEE arithmetic
    (``exact_kernel``), so the draws are the same bits wherever numba runs. (Not
    NumPy's ziggurat: these are ember_np's own normals.)
    """
    n = out.shape[0]
    for i in range(0, n, 2):
        s = 1.0
        u = v = 0.0
        while s >= 1.0 or s == 0.0:
            x = next_u64(state)
            u = float(x >> _S32) * _TWO_M31 - 1.0
            v = float(x & _M32) * _TWO_M31 - 1.0
            s = u * u + v * v
        m = math.sqrt(-2.0 * math.log(s) / s)
        out[i] = u * m
        if i + 1 < n:
            out[i + 1] = v * m


@kernel
def _fill_doubles(state: np.ndarray, out: np.ndarray) -> None:
    """out[i] = next_double(state): state uint64 (4,) advanced; out float64 (n,) written."""
    for i in range(out.shape[0]):
        out[i] = next_double(state)


@kernel
def _fill_below(state: np.ndarray, n: int, out: np.ndarray) -> None:
    """out[i] = next_below(state, n): state uint64 (4,); n int >= 1; out int64 (m,) written."""
    for i in range(out.shape[0]):
        out[i] = next_below(state, n)


def _state_from_seed_sequence(seq: np.random.SeedSequence) -> np.ndarray:
    st = np.random.PCG64(seq).state["state"]
    mask = (1 << 64) - 1
    s, inc = int(st["state"]), int(st["inc"])
    return np.array([s >> 64, s & mask, inc >> 64, inc & mask], dtype=np.uint64)


class Rng:
    """A seedable PCG64 random stream whose state can be saved and restored.

    Parameters
    ----------
    seed : int or numpy.random.SeedSequence
        Same seed, same stream: ``Rng(7)`` reproduces
        ``np.random.default_rng(7)``'s raw bits exactly.

    Attributes
    ----------
    state : ndarray of uint64, shape (4,)
        The live generator state. Compiled kernels take this array and advance
        it in place; copy it to save a stream, assign to restore one.
    """

    __slots__ = ("_state",)

    def __init__(self, seed: int | np.random.SeedSequence = 0) -> None:
        if isinstance(seed, np.random.SeedSequence):
            seq = seed
        else:
            if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
                raise ValueError(
                    f"seed must be a non-negative integer or a numpy SeedSequence, got {seed!r}"
                )
            seq = np.random.SeedSequence(int(seed))
        self._state = _state_from_seed_sequence(seq)

    @classmethod
    def from_state(cls, state: np.ndarray) -> Rng:
        """Rebuild a stream from a saved :attr:`state` (4 uint64 words)."""
        rng = cls.__new__(cls)
        rng._state = np.zeros(4, dtype=np.uint64)
        rng.state = state
        return rng

    @staticmethod
    def streams(seed: int, n: int) -> list[Rng]:
        """``n`` independent streams derived from one seed (SeedSequence.spawn)."""
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        return [Rng(child) for child in np.random.SeedSequence(int(seed)).spawn(n)]

    @property
    def state(self) -> np.ndarray:
        """The live state array (uint64, shape (4,)); kernels advance it in place."""
        return self._state

    @state.setter
    def state(self, value: np.ndarray) -> None:
        arr = np.asarray(value)
        if arr.shape != (4,) or arr.dtype != np.uint64:
            raise ValueError(
                f"an Rng state is 4 uint64 words, got an array of shape {arr.shape} "
                f"and dtype {arr.dtype}"
            )
        if arr[3] & 1 == 0:
            raise ValueError("invalid PCG64 state: the increment (last word) must be odd")
        self._state[:] = arr

    def __reduce__(self) -> tuple[Any, ...]:
        """Copies and pickles get their own state array (even from out-of-band pickle buffers)."""
        return (Rng.from_state, (self._state,))

    @overload
    def random(self, size: None = None) -> float: ...
    @overload
    def random(self, size: int) -> np.ndarray: ...

    def random(self, size: int | None = None) -> float | np.ndarray:
        """Uniform float64 in [0, 1): one number, or an array of ``size``."""
        if size is None:
            return float(next_double(self._state))
        out = np.empty(int(size), dtype=np.float64)
        _fill_doubles(self._state, out)
        return out

    def normal(self, size: int) -> np.ndarray:
        """``size`` standard normal float64 draws (:func:`fill_normals`, as kernels draw them)."""
        out = np.empty(int(size), dtype=np.float64)
        fill_normals(self._state, out)
        return out

    def integers(self, n: int, size: int | None = None) -> int | np.ndarray:
        """Uniform integer in [0, n): one number, or an int64 array of ``size``."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be an integer >= 1, got {n!r}")
        if size is None:
            return int(next_below(self._state, int(n)))
        out = np.empty(int(size), dtype=np.int64)
        _fill_below(self._state, int(n), out)
        return out

    def __repr__(self) -> str:
        return f"Rng(state={self._state.tolist()})"
