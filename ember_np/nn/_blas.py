"""Matrix products for the kernels: a direct call into the BLAS NumPy already loaded.

numba's ``np.dot`` inside ``@njit`` reaches BLAS through SciPy, and importing
``scipy.linalg.cython_blas`` costs about 25 MB of resident memory (all of
``scipy.linalg`` is imported with it). NumPy's wheels already map an OpenBLAS
into every process that imports NumPy, so the kernels call its
``cblas_sgemm`` / ``cblas_dgemm`` directly instead:

* at import, :func:`_register` finds a CBLAS library (NumPy's bundled OpenBLAS,
  else SciPy's bundled OpenBLAS file, else a system BLAS), loads the kernels'
  own copy of it (see Threads, below), and registers the addresses of the
  copy's ``?gemm`` entry points with LLVM under fixed names;
* compiled code calls those names (an external symbol, like numba's own
  helper functions), so kernels stay cacheable: the address is resolved when
  a cached kernel is loaded, never baked into it.

Integer arguments are passed as 64-bit values. That matches ILP64 builds
(NumPy's ``scipy_openblas64``) and also LP64 ones on x86-64 and arm64, where a
32-bit integer argument is the low half of the same register or stack slot.

Threads: the kernels' products run on the calling thread. A threaded
``sgemm`` hands part of each product to OpenBLAS's worker threads and waits
for them; a DQN update is a string of products of a few microseconds each, so
when another process keeps the second core busy every product waits for a
worker that is not scheduled, and training ran 3-10x slower (issue 23). The
mechanism is a *private copy* of the OpenBLAS library: :func:`_register`
copies the library file once into the user's private cache directory
(``~/.cache/ember_np/blas``, see :func:`ember_np._jit.private_dir`) and loads
that copy, which the loader maps as a second instance with its own thread
count and thread pool. The kernels call the copy, set to one thread;
NumPy keeps the original and the user's setting (``OPENBLAS_NUM_THREADS``,
threadpoolctl), untouched. :func:`set_kernel_threads` opts the kernels into
threads (wide networks on a quiet machine) and changes the copy alone.

Why not the other ways (measured with OpenBLAS 0.3.31, NumPy 2.4's wheel):

* ``openblas_set_num_threads_local`` is exported but is not thread-local in
  pthreads builds such as NumPy's: called on one thread, it changed the count
  every thread sees (it calls the global setter);
* a compiled loop under a size threshold ran the network's products 2.7-10x
  slower than OpenBLAS's kernels on one thread (128x64x64: 92 us against 9);
* switching the process's count around each call is cheap (setting 1 then 2
  took 1 us through ctypes, mostly ctypes' own cost) but process-wide: the
  user's NumPy on other threads would run on one thread meanwhile, and two
  threads training at once would restore each other's saved count in the
  wrong order.

The copy costs about 25 MB of disk once per NumPy build (kept in the cache
directory, keyed by the source's size and time), about 2 MB of resident
memory and a few milliseconds at import. When it cannot be made (no private
writable directory, a BLAS other than OpenBLAS, a loader that returns the
already-loaded library), the kernels call the process's BLAS as before and
:data:`KERNEL_BLAS` says why; their thread count is then the process's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import llvmlite.binding as ll
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ember_np._jit import compiled_only, inlined_kernel, kernel, private_dir

__all__ = [
    "BLAS_LIBRARY",
    "CBLAS_SYMBOLS",
    "KERNELS",
    "KERNEL_BLAS",
    "Kernels",
    "ThreadSwitch",
    "gemm",
    "gemm_call",
    "gemm_operands",
    "kernel_threads",
    "private_copy",
    "set_kernel_threads",
    "thread_switch",
]

#: The names compiled code calls the kernels' ``cblas_sgemm`` and ``cblas_dgemm`` by.
CBLAS_SYMBOLS = {"s": "ember_np_cblas_sgemm", "d": "ember_np_cblas_dgemm"}
# Exported names of cblas_?gemm, most specific first: NumPy >= 2 wheels
# (scipy-openblas64), older ILP64 OpenBLAS builds, SciPy's LP64 scipy-openblas,
# plain CBLAS (system OpenBLAS, Accelerate, MKL).
_CANDIDATES = ("scipy_cblas_{}gemm64_", "cblas_{}gemm64_", "scipy_cblas_{}gemm", "cblas_{}gemm")
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


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


class ThreadSwitch(NamedTuple):
    """OpenBLAS's runtime thread count of one loaded library instance."""

    set: Callable[[int], None]
    """Set the instance's thread count (``openblas_set_num_threads``)."""
    get: Callable[[], int]
    """The instance's thread count (``openblas_get_num_threads``)."""
    address: int
    """Where the setter is mapped: two instances of one library differ here."""


#: OpenBLAS's runtime thread switch and count, by build (NumPy >= 2 wheels first).
_THREAD_SWITCHES = (
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
)


def thread_switch(lib: ctypes.CDLL) -> ThreadSwitch | None:
    """The thread switch of one loaded BLAS library instance.

    Parameters
    ----------
    lib : ctypes.CDLL
        A loaded BLAS library.

    Returns
    -------
    ThreadSwitch or None
        Its setter and getter of the thread count (argument and result types
        set for the build's integer width), or None when ``lib`` exports no
        OpenBLAS thread-count setter and getter (another BLAS).
    """
    for set_name, get_name in _THREAD_SWITCHES:
        setter, getter = getattr(lib, set_name, None), getattr(lib, get_name, None)
        if setter is not None and getter is not None:
            setter.argtypes = [ctypes.c_int64 if set_name.endswith("64_") else ctypes.c_int]
            setter.restype = None
            getter.argtypes = []
            getter.restype = ctypes.c_int
            address = ctypes.cast(setter, ctypes.c_void_p).value or 0
            return ThreadSwitch(setter, getter, address)
    return None


def _find() -> tuple[str, str, ctypes.CDLL]:
    """The first CBLAS with sgemm and dgemm: (path, symbol pattern, the loaded library)."""
    tried = []
    for path in _library_files():
        tried.append(path)
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for pattern in _CANDIDATES:
            if all(getattr(lib, pattern.format(p), None) is not None for p in "sd"):
                return path, pattern, lib
    raise ImportError(
        "ember_np could not find a CBLAS library with cblas_sgemm (looked in NumPy's and "
        f"SciPy's bundled OpenBLAS and the system: {tried or 'nothing found'}); install "
        "NumPy from its PyPI wheels, or a system OpenBLAS (e.g. apt install libopenblas0)"
    )


def private_copy(path: str, shared: ThreadSwitch) -> tuple[ctypes.CDLL | None, str]:
    """Load a second instance of the library at ``path`` from a copy of the file.

    The copy lives in ``private_dir("blas")``, named by the source's size and
    modification time, so a new NumPy gets a new copy and a second call loads
    the file the first one wrote. It is written under a temporary name and
    renamed, so concurrent imports never load a half-written file.

    Parameters
    ----------
    path : str
        The library file already loaded in the process (NumPy's OpenBLAS).
    shared : ThreadSwitch
        That loaded instance's thread switch: a "copy" whose switch sits at the
        same address is the same instance (the loader deduplicated it).

    Returns
    -------
    (ctypes.CDLL, str) or (None, str)
        The copy and its path, or None and why no copy could be used (no
        private writable directory, the file could not be written or loaded,
        or the loader returned the already-loaded library).
    """
    directory = private_dir("blas")
    if directory is None:
        return None, "no private writable cache directory for a copy"
    st = os.stat(path)
    target = directory / f"kernels-{st.st_size}-{st.st_mtime_ns}-{Path(path).name}"
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        if not target.is_file() or target.stat().st_size != st.st_size:
            shutil.copyfile(path, tmp)
            os.replace(tmp, target)
        # a noexec directory or a loader that refuses the file raises OSError too
        lib = ctypes.CDLL(str(target), mode=ctypes.RTLD_LOCAL)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        return None, f"the copy could not be made or loaded ({exc})"
    switch = thread_switch(lib)
    if switch is None or switch.address == shared.address:
        return None, "the loader returned the already-loaded library for the copy"
    return lib, str(target)


class Kernels(NamedTuple):
    """What the kernels' products call (:data:`KERNELS`)."""

    description: str
    """:data:`KERNEL_BLAS`: ``"private copy: <path>"`` or ``"shared: <path> (why)"``."""
    threads: ThreadSwitch | None
    """The thread switch of the kernels' own library instance; None when shared."""
    shared: ThreadSwitch | None
    """The process's OpenBLAS thread switch (None if the BLAS is not OpenBLAS)."""


def _register() -> tuple[str, Kernels]:
    """Find a CBLAS, load the kernels' copy of it, and register its sgemm and dgemm.

    Returns the source library (``path:symbol``) and what the kernels call.
    """
    path, pattern, lib = _find()
    shared = thread_switch(lib)
    if shared is None:
        kernels = Kernels(f"shared: {path} (not OpenBLAS: no thread switch to copy)", None, None)
    else:
        copy, where = private_copy(path, shared)
        if copy is None:
            kernels = Kernels(f"shared: {path} ({where})", None, shared)
        else:
            lib = copy
            kernels = Kernels(f"private copy: {where}", thread_switch(copy), shared)
            assert kernels.threads is not None
            kernels.threads.set(1)
    for prefix in "sd":
        fn = getattr(lib, pattern.format(prefix))
        ll.add_symbol(CBLAS_SYMBOLS[prefix], ctypes.cast(fn, ctypes.c_void_p).value)
    return f"{path}:{pattern.format('s')}", kernels


#: The library (and symbol) NumPy loaded, whose code the kernels' products run;
#: and the :class:`Kernels` record of the instance they call and both thread switches.
BLAS_LIBRARY, KERNELS = _register()

#: Which instance the kernels call: ``"private copy: <path>"`` (their own
#: thread count, 1 unless :func:`set_kernel_threads` says otherwise), or
#: ``"shared: <path> (why)"`` (the process's BLAS and its thread count).
KERNEL_BLAS = KERNELS.description


def set_kernel_threads(n: int) -> None:
    """Let the kernels' matrix products use ``n`` threads (default 1: the calling thread).

    Changes the kernels' own copy of OpenBLAS (see :data:`KERNEL_BLAS`), never
    the thread count of NumPy or of the rest of the process. More than one
    thread pays for wide networks (256 units and up) on an otherwise idle
    machine; on a machine whose other cores are busy it slows training several
    fold, since every product waits for a descheduled worker. Results can
    differ in the last bits between thread counts.

    Parameters
    ----------
    n : int
        Threads per product, >= 1; OpenBLAS caps it at its build's maximum.

    Raises
    ------
    ValueError
        If ``n`` is not a whole number >= 1.
    RuntimeError
        If the kernels share the process's BLAS (no private copy could be
        made; :data:`KERNEL_BLAS` says why): set the process's count then.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(
            f"set_kernel_threads needs a whole number of threads >= 1 (got {n!r}); "
            "1, the default, runs every product on the calling thread"
        )
    if KERNELS.threads is None:
        raise RuntimeError(
            f"ember_np's kernels use the process's BLAS ({KERNEL_BLAS}), so their thread "
            "count is the process's: set it with threadpoolctl or OPENBLAS_NUM_THREADS"
        )
    KERNELS.threads.set(int(n))


def kernel_threads() -> int:
    """How many threads the kernels' matrix products may use.

    Their own count (1 unless :func:`set_kernel_threads` changed it), or, when
    they share the process's BLAS, the process's OpenBLAS count (1 if that
    BLAS is not OpenBLAS and cannot say).
    """
    switch = KERNELS.threads or KERNELS.shared
    return int(switch.get()) if switch is not None else 1


def gemm_call(symbols: dict[str, str]) -> Callable[..., None]:
    """An intrinsic that calls a function with cblas_?gemm's arguments, registered with
    LLVM (``ll.add_symbol``) under ``symbols["s"]`` for float32 and ``symbols["d"]`` for
    float64; a call of another dtype does not type.

    The intrinsic's arguments: ``trans`` (trans_a, trans_b), CBLAS codes; ``dims``
    (m, n, k); ``a``, ``b``; ``beta``; ``c``; ``lds`` (lda, ldb, ldc), leading
    dimensions in elements. It calls ``symbol(RowMajor, *trans, *dims, 1, A, lda, B,
    ldb, beta, C, ldc)``. Compiled code calls the name, never an address, so the
    kernels stay cacheable.
    """

    @intrinsic
    def call(typingctx, trans, dims, a, b, beta, c, lds):  # noqa: ANN001, ANN202
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
                [i32, i32, i32, i64, i64, i64, fp, fp.as_pointer(), i64, fp.as_pointer(), i64,
                 fp, fp.as_pointer(), i64],
            )  # fmt: skip
            fn = cgutils.get_or_insert_function(builder.module, fnty, symbols[prefix])
            sig_args = signature.args

            def data(ty, value):  # noqa: ANN001, ANN202
                return context.make_array(ty)(context, builder, value).data

            def ints(arg, value, n):  # noqa: ANN001, ANN202
                """The ``n`` integers of a tuple argument, each as an i64."""
                items = cgutils.unpack_tuple(builder, value, n)
                return [
                    context.cast(builder, v, sig_args[arg][i], types.int64)
                    for i, v in enumerate(items)
                ]

            ta, tb = ints(0, trans_, 2)
            m_, n_, k_ = ints(1, dims_, 3)
            lda_, ldb_, ldc_ = ints(6, lds_, 3)
            builder.call(
                fn,
                [
                    ir.Constant(i32, ROW_MAJOR),
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

    return compiled_only(call)


#: cblas_?gemm of the kernels' BLAS (see the module docstring).
_cblas_gemm = gemm_call(CBLAS_SYMBOLS)


@kernel
def gemm(
    a: np.ndarray, b: np.ndarray, c: np.ndarray, trans_a: bool, trans_b: bool, beta: float
) -> None:
    """c <- op(a) @ op(b) + beta * c for 2-D arrays whose rows are contiguous.

    op(x) is x, or x.T when the matching ``trans_*`` flag is set. Works for
    float32 (sgemm) and float64 (dgemm); all three arrays share the dtype.
    """
    trans, dims, lds = gemm_operands(a, b, c, trans_a, trans_b)
    _cblas_gemm(trans, dims, a, b, beta, c, lds)


@inlined_kernel
def gemm_operands(
    a: np.ndarray, b: np.ndarray, c: np.ndarray, trans_a: bool, trans_b: bool
) -> tuple[tuple[int, int], tuple[int, int, int], tuple[int, int, int]]:
    """The integer arguments of a :func:`gemm_call` intrinsic for c <- op(a) @ op(b):
    the CBLAS transpose codes, (m, n, k) and the leading dimensions (lda, ldb, ldc).

    Inlined: a kernel of its own, it was compiled for each caller's literal flags
    (``gemm(..., False, True, ...)``) and array layouts, three times in a DQN run."""
    m = c.shape[0]
    n = c.shape[1]
    k = a.shape[0] if trans_a else a.shape[1]
    trans = (TRANS if trans_a else NO_TRANS, TRANS if trans_b else NO_TRANS)
    return trans, (m, n, k), (_leading_dim(a), _leading_dim(b), _leading_dim(c))


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


def set_blas_threads(n: int) -> bool:
    """Make the process's BLAS (NumPy's) use ``n`` threads; False if it has no such switch.

    The command line runs on one thread (``ember-np train``, ``resume`` and
    every worker of ``--seeds``): a multi-threaded ``sgemm`` may sum a 256-wide
    product in another order, so a run's numbers would depend on the core
    count; with one thread, ``--seed s`` alone and seed s of ``--seeds`` are
    the same run on any machine. The kernels run on one thread anyway when
    they have their private copy (:data:`KERNEL_BLAS`); this covers the
    shared case and NumPy's own products. (threadpoolctl does this for every
    BLAS it knows, but is not a dependency of the library; this is the one
    call it would make here.)
    """
    if KERNELS.shared is None:
        return False
    KERNELS.shared.set(int(n))
    return True
