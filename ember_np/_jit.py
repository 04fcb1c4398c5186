"""Numba options for every compiled kernel, kept in one place.

Every kernel in ember_np is compiled with :func:`kernel`, which sets

* ``cache=True``: the machine code is written next to the source, so a second
  process loads it instead of compiling again (about 0.25 s instead of 3 s);
* ``fastmath`` with :data:`FASTMATH_FLAGS`, a flag set *without* ``nnan`` and
  ``ninf``: with those two, LLVM may assume no value is ever NaN or infinite
  and silently turns ``np.isnan`` / ``np.isfinite`` checks into constants;
* ``error_model="numpy"``: division by zero gives inf/nan as in NumPy instead
  of a Python exception check on every division;
* ``nogil=True``: kernels release the GIL, so other Python threads keep
  running during a long training chunk.

Settings that change per call (learning rate, gamma, ...) are always passed to
kernels as arguments: numba freezes module globals at compile time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numba

F = TypeVar("F", bound=Callable[..., Any])

#: LLVM fast-math flags: reassociation, contraction into FMA, reciprocal
#: approximations and no signed zeros, but not ``nnan`` / ``ninf``.
FASTMATH_FLAGS = frozenset({"nsz", "arcp", "contract", "afn", "reassoc"})


def kernel(fn: F) -> F:
    """Compile ``fn`` with the project's numba options (see module docstring)."""
    return numba.njit(  # type: ignore[no-any-return]
        cache=True,
        fastmath=set(FASTMATH_FLAGS),
        error_model="numpy",
        nogil=True,
    )(fn)


def exact_kernel(fn: F) -> F:
    """Compile ``fn`` like :func:`kernel` but with strict IEEE arithmetic.

    For code that must reproduce another implementation bit for bit (the
    native environments match gymnasium's float64 dynamics): no fast-math, so
    LLVM neither reassociates nor fuses multiply-adds.

    ``fastmath=False`` is spelled out because numba lets a callee that leaves
    the option unset inherit its caller's: compiled first from a fast-math
    kernel (the fused trainer), the env dynamics would get fast-math too, and
    numba's cache, which keys on the signature alone, would then hand that
    version to every later process.
    """
    return numba.njit(  # type: ignore[no-any-return]
        cache=True,
        fastmath=False,  # explicit, or a fast-math caller's flags would be inherited
        error_model="numpy",
        nogil=True,
    )(fn)


def inlined_exact_kernel(fn: F) -> F:
    """:func:`exact_kernel`, also inlined into every compiled caller (numba ``inline="always"``).

    Called with a constant argument, the inlined body lets LLVM fold every
    branch on it: a loop written once serves each native environment as if
    written for it alone. Still callable from Python like any kernel.
    """
    return numba.njit(  # type: ignore[no-any-return]
        cache=True,
        fastmath=False,
        error_model="numpy",
        nogil=True,
        inline="always",
    )(fn)


def entry_point(dispatcher: Any, *args: Any) -> Callable[..., Any]:
    """The compiled function ``dispatcher`` runs for the types of ``args``, callable directly.

    A numba dispatcher types every argument of every call before it picks the
    machine code. Arrays and numbers are typed in C, but a NamedTuple goes
    through Python (about 1.3 us for one of seven arrays), which is more than
    a whole replay push. A hot call whose argument types never change (the
    object's own state tuples, validated float32 vectors, Python ints and
    floats) resolves its entry point once with this function and calls it
    directly: about 0.35 us for the same NamedTuple. The machine code is the
    dispatcher's own, compiled or loaded from the disk cache here.

    The caller guarantees that later calls pass the same types: the entry
    point converts each argument to the type it was compiled for without
    checking it as the dispatcher would.
    """
    sig = tuple(dispatcher.typeof_pyval(a) for a in args)
    dispatcher.compile(sig)
    return dispatcher.overloads[sig].entry_point  # type: ignore[no-any-return]
