"""User arrays at the boundary: the one layout every kernel is compiled for.

Kernels (and the BLAS calls inside them) are compiled for C-contiguous,
aligned, writeable arrays of one dtype in native byte order. Anything else a
user can hand in (a view with other strides, a broadcast, Fortran order,
negative strides, a read-only or unaligned array, another dtype or byte
order, a list) is copied once into that layout here, before it reaches
compiled code: numba would otherwise compile and cache another version of
each kernel for every such type (read-only, unaligned and non-contiguous
arrays are distinct numba types), and a strided array handed to BLAS as if
it were contiguous reads the wrong numbers.

An array already in that layout is returned as it is: the check is one
``type``, one ``dtype`` and one ``flags.carray`` test (C-contiguous, aligned
and writeable at once), so the hot paths (``DqnPolicy.act``,
``CircularBuffer.push``) pay ~0.1 us for it.

Values that are not real numbers (complex, strings, dates, ragged nested
lists; objects that do not convert) raise ValueError naming the parameter instead of being cast: a
complex array would otherwise lose its imaginary part silently, a float
array of actions its fractions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["as_f32", "as_f64", "as_i64"]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_I64 = np.dtype(np.int64)


def as_f32(x: Any, name: str) -> np.ndarray:
    """``x`` as a C-contiguous, aligned, writeable float32 array (no copy if it is one).

    Values beyond float32's range become ±inf (callers that need finite
    values check after this cast, so a float64 1e39 is caught as inf).

    Raises
    ------
    ValueError
        If ``x`` does not hold real numbers (names ``name``).
    """
    if type(x) is np.ndarray and x.dtype is _F32 and x.flags.carray:
        return x
    return _copy_as(x, _F32, "biuf", name, "real numbers")


def as_f64(x: Any, name: str) -> np.ndarray:
    """:func:`as_f32` for float64 arrays."""
    if type(x) is np.ndarray and x.dtype is _F64 and x.flags.carray:
        return x
    return _copy_as(x, _F64, "biuf", name, "real numbers")


def as_i64(x: Any, name: str) -> np.ndarray:
    """``x`` as a C-contiguous, aligned, writeable int64 array (no copy if it is one).

    Only integer (or bool) values are accepted: a float array raises rather
    than being truncated.
    """
    if type(x) is np.ndarray and x.dtype is _I64 and x.flags.carray:
        return x
    return _copy_as(x, _I64, "biu", name, "integers")


def _copy_as(x: Any, dtype: np.dtype, kinds: str, name: str, what: str) -> np.ndarray:
    try:
        arr = np.asarray(x)
        if arr.dtype.kind == "O":  # a list mixing Python numbers and NumPy scalars
            arr = np.asarray(arr.tolist())
    except (TypeError, ValueError) as exc:  # ragged nested sequences
        raise ValueError(f"{name} must be an array of {what}, got {x!r} ({exc})") from None
    if (
        arr.size
        and arr.dtype.kind not in kinds
        and not (arr.dtype.kind == "O" and dtype.kind == "f")
    ):
        raise ValueError(
            f"{name} must be an array of {what} convertible to {dtype}, got dtype "
            f"{arr.dtype}: {_preview(arr)}"
        )
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # beyond float32: inf, checked later
            return np.array(arr, dtype=dtype, order="C")  # a copy: owned, aligned, writeable
    except (TypeError, ValueError) as exc:  # objects that are not numbers (None gives NaN)
        raise ValueError(f"{name} must be an array of {what}, got {_preview(arr)}: {exc}") from None


def _preview(arr: np.ndarray) -> str:
    return np.array2string(arr.ravel()[:8], threshold=8) + (" ..." if arr.size > 8 else "")
