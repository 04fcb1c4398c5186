"""Matrix products for the kernels: a direct call into the BLAS NumPy already loaded.

numba's ``np.dot`` inside ``@njit`` reaches BLAS through SciPy, and importing
``scipy.linalg.cython_blas`` costs about 25 MB of resident memory (all of
``scipy.linalg`` is imported with it). NumPy's wheels already map an OpenBLAS
into every process that imports NumPy, so the kernels call its
``cblas_sgemm`` / ``cblas_dgemm`` directly instead:

* at import, :func:`_register` finds a CBLAS library (NumPy's bundled OpenBLAS,
  else SciPy's bundled OpenBLAS file, else a system BLAS), and registers the
  addresses of its ``?gemm`` entry points with LLVM under fixed names;
* compiled code calls those names (an external symbol, like numba's own
  helper functions), so kernels stay cacheable: the address is resolved when
  a cached kernel is loaded, never baked into it.

Integer arguments are passed as 64-bit values. That matches ILP64 builds
(NumPy's ``scipy_openblas64``) and also LP64 ones on x86-64 and arm64, where a
32-bit integer argument is the low half of the same register or stack slot.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Iterator
from pathlib import Path

import llvmlite.binding as ll
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ember_np._jit import kernel

__all__ = ["BLAS_LIBRARY", "gemm"]

_SYMBOLS = {"s": "ember_np_cblas_sgemm", "d": "ember_np_cblas_dgemm"}
# Exported names of cblas_?gemm, most specific first: NumPy >= 2 wheels
# (scipy-openblas64), older ILP64 OpenBLAS builds, SciPy's LP64 scipy-openblas,
# plain CBLAS (system OpenBLAS, Accelerate, MKL).
_CANDIDATES = ("scipy_cblas_{}gemm64_", "cblas_{}gemm64_", "scipy_cblas_{}gemm", "cblas_{}gemm")
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


def _library_files() -> Iterator[str]:
    import importlib.util

    for package in ("numpy", "scipy"):  # find_spec does not import the package
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            continue
        root = Path(spec.origin).parent
        for directory in (root.parent / f"{package}.libs", root / ".dylibs", root.parent / package):
            if directory.is_dir():
                for pattern in ("*openblas*", "*blas*"):
                    for path in sorted(directory.glob(pattern)):
                        if path.suffix in (".so", ".dylib", ".dll") or ".so." in path.name:
                            yield str(path)
    if sys.platform == "darwin":
        yield "/System/Library/Frameworks/Accelerate.framework/Accelerate"
    for name in ("openblas", "cblas", "blas", "mkl_rt"):
        found = ctypes.util.find_library(name)
        if found:
            yield found


def _register() -> str:
    """Find a CBLAS with sgemm and dgemm and register both; returns the library path."""
    tried = []
    for path in _library_files():
        tried.append(path)
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for pattern in _CANDIDATES:
            fns = {p: getattr(lib, pattern.format(p), None) for p in "sd"}
            if all(fn is not None for fn in fns.values()):
                for prefix, fn in fns.items():
                    ll.add_symbol(_SYMBOLS[prefix], ctypes.cast(fn, ctypes.c_void_p).value)
                return f"{path}:{pattern.format('s')}"
    raise ImportError(
        "ember_np could not find a CBLAS library with cblas_sgemm (looked in NumPy's and "
        f"SciPy's bundled OpenBLAS and the system: {tried or 'nothing found'}); install "
        "NumPy from its PyPI wheels, or a system OpenBLAS (e.g. apt install libopenblas0)"
    )


#: The library (and symbol) the kernels' matrix products call.
BLAS_LIBRARY = _register()


@intrinsic
def _cblas_gemm(typingctx, trans, dims, a, b, beta, c, lds):  # noqa: ANN001, ANN202
    """cblas_?gemm(RowMajor, *trans, *dims, 1, A, lds[0], B, lds[1], beta, C, lds[2]).

    trans : (trans_a, trans_b), CBLAS codes; dims : (m, n, k);
    lds : (lda, ldb, ldc), leading dimensions in elements.
    """
    dtype = c.dtype
    if not (a.dtype == b.dtype == dtype and dtype in (types.float32, types.float64)):
        return None
    prefix = "s" if dtype == types.float32 else "d"
    sig = types.void(trans, dims, a, b, beta, c, lds)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        trans_, dims_, a_, b_, beta_, c_, lds_ = args
        fp = ir.FloatType() if prefix == "s" else ir.DoubleType()
        i32, i64 = ir.IntType(32), ir.IntType(64)
        fnty = ir.FunctionType(
            ir.VoidType(),
            [i32, i32, i32, i64, i64, i64, fp, fp.as_pointer(), i64, fp.as_pointer(), i64, fp,
             fp.as_pointer(), i64],
        )  # fmt: skip
        fn = cgutils.get_or_insert_function(builder.module, fnty, _SYMBOLS[prefix])
        sig_args = signature.args

        def data(ty, value):  # noqa: ANN001, ANN202
            return context.make_array(ty)(context, builder, value).data

        def ints(arg, value, n):  # noqa: ANN001, ANN202
            """The ``n`` integers of a tuple argument, each as an i64."""
            items = cgutils.unpack_tuple(builder, value, n)
            return [
                context.cast(builder, v, sig_args[arg][i], types.int64) for i, v in enumerate(items)
            ]

        ta, tb = ints(0, trans_, 2)
        m_, n_, k_ = ints(1, dims_, 3)
        lda_, ldb_, ldc_ = ints(6, lds_, 3)
        builder.call(
            fn,
            [
                ir.Constant(i32, _ROW_MAJOR),
                builder.trunc(ta, i32),
                builder.trunc(tb, i32),
                m_,
                n_,
                k_,
                ir.Constant(fp, 1.0),
                data(sig_args[2], a_),
                lda_,
                data(sig_args[3], b_),
                ldb_,
                context.cast(builder, beta_, sig_args[4], dtype),
                data(sig_args[5], c_),
                ldc_,
            ],
        )
        return context.get_dummy_value()

    return sig, codegen


@kernel
def gemm(
    a: np.ndarray, b: np.ndarray, c: np.ndarray, trans_a: bool, trans_b: bool, beta: float
) -> None:
    """c <- op(a) @ op(b) + beta * c for 2-D arrays whose rows are contiguous.

    op(x) is x, or x.T when the matching ``trans_*`` flag is set. Works for
    float32 (sgemm) and float64 (dgemm); all three arrays share the dtype.
    """
    m = c.shape[0]
    n = c.shape[1]
    k = a.shape[0] if trans_a else a.shape[1]
    _cblas_gemm(
        (_TRANS if trans_a else _NO_TRANS, _TRANS if trans_b else _NO_TRANS),
        (m, n, k), a, b, beta, c,
        (_leading_dim(a), _leading_dim(b), _leading_dim(c)),
    )  # fmt: skip


@kernel
def _leading_dim(x: np.ndarray) -> int:
    """The row stride of ``x`` in elements, as BLAS needs it: at least max(1, columns).

    NumPy ignores the stride of a length-1 axis when it flags an array
    C-contiguous, so a one-row array can carry any row stride: 0 for
    ``obs[None]`` or ``np.broadcast_to``, negative for a reversed view.
    Only one row is read then, so the column count is a valid stride; passed
    as it is, BLAS rejects it ("parameter number 10 had an illegal value")
    and leaves the output unwritten.
    """
    return max(x.strides[0] // x.itemsize, x.shape[1], 1)


#: OpenBLAS's runtime thread switch, by build (NumPy >= 2 wheels first).
_THREAD_SWITCHES = (
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)


def set_blas_threads(n: int) -> bool:
    """Make the BLAS the kernels call use ``n`` threads; False if it has no such switch.

    The command line runs on one thread (``ember-np train``, ``resume`` and
    every worker of ``--seeds``): a multi-threaded ``sgemm`` may sum a 256-wide
    product in another order, so a run's numbers would depend on the core
    count; with one thread, ``--seed s`` alone and seed s of ``--seeds`` are
    the same run on any machine. (threadpoolctl does this for every BLAS it
    knows, but is not a dependency of the library; this is the one call it
    would make here.)
    """
    path = BLAS_LIBRARY.rsplit(":", 1)[0]
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return False
    for name in _THREAD_SWITCHES:
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes = [ctypes.c_int64 if name.endswith("64_") else ctypes.c_int]
            fn.restype = None
            fn(int(n))
            return True
    return False
