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

Where the cache lives. numba caches next to the source (``__pycache__``), and
only where it can write: installed where the user cannot write, with no
writable home, numba refuses even to *define* a cached function ("no locator
available"), so ``import ember_np`` would fail. This module therefore checks
once, at import, and then

* uses the package's ``__pycache__`` when it is writable (the usual case), or
  ``NUMBA_CACHE_DIR`` when the user set one;
* otherwise caches ember_np's kernels in a private directory of the user's
  (``$XDG_CACHE_HOME/ember_np/numba`` or ``~/.cache/ember_np/numba``, else
  ``<tempdir>/ember_np-numba-<uid>``, mode 0700 and owned by the user: numba's
  index files are pickles) through a numba cache locator, copying each
  kernel's shipped cache files there when it is first used, so a cache
  compiled at install time still saves the compilation;
* and when nothing is writable, compiles without caching.

The last two say so once, in one :class:`CacheWarning` line with the cost.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

import numba

F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:  # numba's stubs type a compiled function as Dispatcher[F]
    from types import FrameType

    from numba.core.decorators import _JITOptions as JitOptions
    from numba.core.dispatcher import Dispatcher

#: LLVM fast-math flags: reassociation, contraction into FMA, reciprocal
#: approximations and no signed zeros, but not ``nnan`` / ``ninf``.
FASTMATH_FLAGS = frozenset({"nsz", "arcp", "contract", "afn", "reassoc"})


class CacheWarning(UserWarning):
    """ember_np's kernels cannot be cached next to the package (said once, at import)."""


class CachePlan(NamedTuple):
    """Where compiled kernels are cached: see the module docstring."""

    cache: bool
    """Whether kernels are compiled with ``cache=True``."""
    directory: Path | None
    """The private fallback directory, when the package's own is not writable."""
    message: str | None
    """What the user is told (None when the cache works as usual)."""


PACKAGE_DIR = Path(__file__).resolve().parent


def _writable(directory: Path) -> bool:
    """Whether files can be created in ``directory`` (made if missing): numba's own test."""
    try:
        directory.mkdir(exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()
    except OSError:
        return False
    return True


def _private(directory: Path) -> bool:
    """Whether ``directory`` is (or was just made) the user's own, writable by no one else."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(directory)
        if hasattr(os, "getuid") and (st.st_uid != os.getuid() or st.st_mode & 0o022):
            return False  # someone else's, or others could plant index files (pickles) in it
        tempfile.TemporaryFile(dir=directory).close()
    except OSError:
        return False
    return os.path.isdir(directory) and not os.path.islink(directory)


def user_cache_dirs(name: str) -> list[Path]:
    """Where ember_np may keep ``name`` files of the user's own, best first.

    ``$XDG_CACHE_HOME/ember_np/<name>`` (or ``~/.cache/ember_np/<name>``), then
    ``<tempdir>/ember_np-<name>-<uid>``. Use one only once :func:`private_dir`
    accepts it.
    """
    out = []
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except (RuntimeError, KeyError):  # no HOME and no password entry
            base = None
    if base:
        out.append(Path(base) / "ember_np" / name)
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    out.append(Path(tempfile.gettempdir()) / f"ember_np-{name}-{uid}")
    return out


def private_dir(name: str) -> Path | None:
    """The first of :func:`user_cache_dirs` that is (or was just made) the user's own
    directory, writable by no one else; None if there is none."""
    return next((d for d in user_cache_dirs(name) if _private(d)), None)


def _fallback_candidates() -> list[Path]:
    return user_cache_dirs("numba")


def cache_plan(
    source_dirs: list[Path] | None = None, candidates: list[Path] | None = None
) -> CachePlan:
    """Decide where kernels are cached (the arguments exist for tests)."""
    if source_dirs is None:
        source_dirs = [PACKAGE_DIR] + [d for d in PACKAGE_DIR.iterdir() if d.is_dir()
                                       and (d / "__init__.py").exists()]  # fmt: skip
    if all(_writable(d / "__pycache__") for d in source_dirs):
        return CachePlan(True, None, None)
    # set at import from NUMBA_CACHE_DIR; numba's stub does not declare it
    user_dir = numba.config.CACHE_DIR  # type: ignore[attr-defined]
    if user_dir and _writable(Path(user_dir)):
        return CachePlan(True, None, None)  # numba's own locator takes NUMBA_CACHE_DIR
    shipped = any(next((d / "__pycache__").glob("*.nbi"), None) for d in source_dirs)
    where = source_dirs[0]
    for directory in candidates if candidates is not None else _fallback_candidates():
        if _private(directory) and _FallbackLocator.install():
            cost = (
                "the cache shipped with it is copied there once, so nothing recompiles"
                if shipped else
                "each kernel compiles once there (a few seconds in all), then loads from it"
            )  # fmt: skip
            return CachePlan(
                True, directory, f"ember_np: {where} is not writable, so compiled kernels are "
                f"cached in {directory}: {cost}"
            )  # fmt: skip
    return CachePlan(
        False, None, f"ember_np: no writable cache directory ({where} and the user's cache "
        "and temporary directories are not writable): every process compiles the kernels it "
        "uses (a few seconds at first use); set NUMBA_CACHE_DIR to a writable directory"
    )  # fmt: skip


def _locators() -> tuple[Any, Any] | None:
    """numba's cache implementation class and in-tree locator (names differ by version)."""
    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    in_tree = getattr(caching, "InTreeCacheLocator", None) or getattr(
        caching, "_InTreeCacheLocator", None
    )
    if impl is None or in_tree is None or not isinstance(
        getattr(impl, "_locator_classes", None), list
    ):  # fmt: skip
        return None
    return impl, in_tree


_found = _locators()
_InTree: Any = _found[1] if _found else object


class _FallbackLocator(_InTree):  # type: ignore[misc, valid-type]
    """numba cache locator for ember_np's kernels when the package dir is read-only.

    Placed right after numba's in-tree locator, so it serves only files that
    one refused. Source stamps and names are the in-tree locator's, so the
    shipped index and data files are valid here unchanged.
    """

    _cache_path: str  # set by numba's locator

    def __init__(self, py_func: Any, py_file: str) -> None:
        super().__init__(py_func, py_file)
        self._shipped = Path(self._cache_path)
        assert PLAN.directory is not None
        self._cache_path = str(PLAN.directory / self.get_suitable_cache_subpath(py_file))
        self._base = _filename_base(py_func, py_file, self.get_disambiguator())

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> Any:
        if PLAN.directory is None or not Path(py_file).resolve().is_relative_to(PACKAGE_DIR):
            return None
        self = cls(py_func, py_file)
        try:
            self.ensure_cache_path()
            self._copy_shipped()
        except OSError:
            return None
        return self

    def _copy_shipped(self) -> None:
        """Copy this kernel's shipped cache files here unless a newer copy is here already."""
        index = self._shipped / f"{self._base}.nbi"
        target = Path(self._cache_path)
        if not index.is_file():
            return
        mine = target / index.name
        if mine.exists() and mine.stat().st_mtime >= index.stat().st_mtime:
            return
        for data in self._shipped.glob(f"{self._base}.*.nbc"):
            _copy(data, target / data.name)
        _copy(index, mine)  # the index last: it names the data files

    @classmethod
    def install(cls) -> bool:
        """Put this locator right after numba's in-tree one; False if numba's layout differs."""
        if _found is None:
            return False
        classes = _found[0]._locator_classes
        if cls not in classes:
            classes.insert(classes.index(_found[1]) + 1, cls)
        return True


def _copy(source: Path, target: Path) -> None:
    """Replace ``target`` by a copy of ``source`` (contents and mtime, not its read-only mode)."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.copyfile(source, tmp)
    st = source.stat()
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, target)


def _filename_base(py_func: Any, py_file: str, disambiguator: str) -> str:
    """The stem numba gives a function's cache files (numba.core.caching.CacheImpl)."""
    modname = os.path.splitext(os.path.basename(py_file))[0]
    fullname = f"{modname}.{py_func.__qualname__}".replace("<", "").replace(">", "")
    abiflags = getattr(sys, "abiflags", "")
    return f"{fullname}-{disambiguator}.py{sys.version_info[0]}{sys.version_info[1]}{abiflags}"


def _caller_outside_package() -> int:
    """The ``stacklevel`` of the first frame outside ember_np (the code importing it).

    ``warnings.warn`` skips the import machinery's frames itself, so only
    ember_np's own frames are counted.
    """
    level = 1
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not ("importlib" in name and "_bootstrap" in name):
            if not name.startswith(str(PACKAGE_DIR)):
                break
            level += 1
        frame = frame.f_back
    return level


PLAN = CachePlan(True, None, None)  # read by _FallbackLocator while cache_plan() runs
PLAN = cache_plan()
if PLAN.message:
    warnings.warn(PLAN.message, CacheWarning, stacklevel=_caller_outside_package())


#: :func:`kernel`'s options but ``cache``, for what numba compiles itself (an
#: ``@overload``'s implementation: ``overload(..., jit_options=KERNEL_OPTIONS)``).
KERNEL_OPTIONS: JitOptions = {
    "fastmath": set(FASTMATH_FLAGS),
    "error_model": "numpy",
    "nogil": True,
}


def kernel(fn: F) -> Dispatcher[F]:
    """Compile ``fn`` with the project's numba options (see module docstring)."""
    return numba.njit(
        cache=PLAN.cache,
        fastmath=set(FASTMATH_FLAGS),
        error_model="numpy",
        nogil=True,
    )(fn)


#: :data:`FASTMATH_FLAGS` without ``reassoc``: see :func:`ordered_kernel`.
ORDERED_FASTMATH_FLAGS = FASTMATH_FLAGS - {"reassoc"}


def ordered_kernel(fn: F) -> Dispatcher[F]:
    """:func:`kernel`, but every sum is taken in the order the source writes it.

    For kernels whose results must not depend on where they were compiled: the
    row sums of LayerNorm and of a softmax, a distributional head's expected
    values and losses. numba links a compiled kernel into every compiled caller
    and LLVM optimises it there again; with fast-math's ``reassoc`` it may
    vectorise a sum differently in each copy (another order of additions, so
    other rounding). Which copy a process runs depends on which kernels it
    compiled and which it loaded from numba's cache, so an empty cache and a
    full one trained the same seed to different numbers. Without ``reassoc``
    every copy adds in the written order; the other fast-math flags (which do
    not reorder sums) stay, so elementwise loops still vectorise, and a kernel
    that wants a vectorised sum writes its lanes out (fixed-order partial sums).
    """
    return numba.njit(
        cache=PLAN.cache,
        fastmath=set(ORDERED_FASTMATH_FLAGS),
        error_model="numpy",
        nogil=True,
    )(fn)


def inlined_kernel(fn: F) -> Dispatcher[F]:
    """:func:`kernel`, also inlined into every compiled caller (numba ``inline="always"``).

    For a small body called once per transition with a large NamedTuple: a
    compiled call passes every array of the tuple as separate arguments (the
    agent's state is over a hundred), which costs more than the body; inlined,
    the caller's fields are used in place. Still callable from Python.
    """
    return numba.njit(
        cache=PLAN.cache,
        fastmath=set(FASTMATH_FLAGS),
        error_model="numpy",
        nogil=True,
        inline="always",
    )(fn)


def exact_kernel(fn: F) -> Dispatcher[F]:
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
    return numba.njit(
        cache=PLAN.cache,
        fastmath=False,  # explicit, or a fast-math caller's flags would be inherited
        error_model="numpy",
        nogil=True,
    )(fn)


def inlined_exact_kernel(fn: F) -> Dispatcher[F]:
    """:func:`exact_kernel`, also inlined into every compiled caller (numba ``inline="always"``).

    Called with a constant argument, the inlined body lets LLVM fold every
    branch on it: a loop written once serves each native environment as if
    written for it alone. Still callable from Python like any kernel.
    """
    return numba.njit(
        cache=PLAN.cache,
        fastmath=False,
        error_model="numpy",
        nogil=True,
        inline="always",
    )(fn)


def compiled_only(intrinsic: Any) -> Callable[..., Any]:
    """``intrinsic`` itself, typed as compiled code calls it.

    numba's stubs give an ``@intrinsic``'s call the typing context as a first
    argument, and a Python call raises; kernels call it with the other
    arguments only. Stack it above ``@intrinsic``; nothing changes at run time.
    """
    return cast("Callable[..., Any]", intrinsic)


def cached_on_disk(dispatcher: Any) -> bool | None:
    """Whether numba's disk cache holds a compiled version of ``dispatcher`` (a kernel)
    that is valid for its source as it is now: True or False, or None when that cannot
    be told (caching off, or a numba whose cache is laid out otherwise).

    Reads the kernel's cache index the way numba does before compiling (a missing,
    stale or foreign index counts as no version); compiles nothing.
    """
    cache = getattr(dispatcher, "_cache", None)
    load_index = getattr(getattr(cache, "_cache_file", None), "_load_index", None)
    if load_index is None:
        return None
    try:
        return bool(load_index())
    except Exception:  # noqa: BLE001  (numba's internals: unsure means "cannot tell")
        return None


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
