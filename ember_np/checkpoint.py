"""Checkpoint files: atomic ``.npz`` writes and validated, pickle-free reads (the
container; what the keys mean is each algorithm's: DQN's in
``ember_np/dqn/checkpoint_format.py``).

A checkpoint is one ``.npz`` archive of plain arrays (numbers and unicode
strings; never pickled objects). Writes go to a temporary file in the same
directory, are flushed and fsynced, then renamed over the target with
``os.replace``, so a crash leaves either the old file or the new one, never a
torn one. Files are created as a plain ``open`` would create them (mode
``0o666`` less the umask), so other users can read a run when the umask lets
them.

Reads parse the zip layer with ``ember_np/_npz.py`` (``struct`` and ``zlib``:
``zipfile`` and ``pathlib`` would be most of a deployed policy's import time)
and each member with ``numpy.lib.format``, never unpickling, and turn every
way a file can be wrong (missing, truncated, corrupted, foreign, object arrays, missing keys,
wrong shapes or versions) into a :class:`CheckpointError`. Before anything is
decompressed, :func:`inspect_archive` checks what the archive declares (the
zip's central directory and each member's ``.npy`` header) against what the
format allows, and bounds what the load will allocate: a small hostile file
cannot make a load take gigabytes of memory.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any, NamedTuple, cast

import numpy as np
from numpy.lib import format as npy

from ember_np._memory import available_memory, format_bytes
from ember_np._npz import (
    DEFLATED,
    STORED,
    Entry,
    MemberStream,
    central_directory,
    data_start,
    end_of_central_directory,
)

__all__ = [
    "ArrayInfo", "CheckpointError", "Reader", "atomic_write", "fsync_dir", "inspect_archive",
    "load_arrays", "save_arrays", "format_tag", "json_array", "string_array",
    "FORMAT_KEY", "VERSION_KEY", "COUNTERS_KEY",
]  # fmt: skip

#: The key of every checkpoint's format tag (unicode scalar: which format, e.g.
#: DQN's ``AGENT_FORMAT``) and of its version (int64 scalar), whatever the format.
FORMAT_KEY = "format"
VERSION_KEY = "format_version"
#: The key of every agent checkpoint's counters (int64, the total env steps first):
#: what ``ember-np eval`` reports a checkpoint's step from, whatever the algorithm.
COUNTERS_KEY = "counters"


#: Most members an archive may hold. An agent checkpoint has 17 + 4 per layer
#: (weights, biases, online and target) + 7 for the replay buffer.
MAX_MEMBERS = 512
#: Most bytes of central directory, read at once (an entry takes 46 bytes plus its name).
MAX_DIRECTORY_BYTES = MAX_MEMBERS * 320
#: Most a compressed member may inflate. ember_np writes archives uncompressed
#: (``np.savez``), where a member takes exactly its size on disk; one recompressed
#: by hand still loads, a zip bomb (deflate reaches ~1000x) does not.
MAX_INFLATION = 64
#: Longest ``.npy`` header read (NumPy's own limit for untrusted files).
MAX_HEADER = 10_000


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used: names the file and the problem."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """fsync ``directory``: the entries made or renamed in it survive a power loss."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], object]) -> None:
    """Write a file so that readers only ever see the old or the complete new version.

    ``write(f)`` fills a temporary file in the same directory; it is flushed,
    fsynced and renamed over ``path`` (``os.replace``), then the directory is
    fsynced. On any error the temporary file is removed, ``path`` is untouched
    and the error propagates (an ``OSError`` such as ENOSPC names the file).
    """
    target = os.fspath(path)
    fd, tmp = _create_temporary(target)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):  # name the file the caller asked for, not the temporary
            raise OSError(exc.errno, exc.strerror or str(exc), str(target)) from exc
        raise
    fsync_dir(os.path.dirname(target) or ".")


def _create_temporary(target: str) -> tuple[int, str]:
    """A new, empty ``.<name>.<random>.tmp`` beside ``target``, opened for writing.

    Created with mode ``0o666``, which the kernel reduces by the umask exactly
    as for ``open(path, "w")`` (``tempfile.mkstemp`` would make it ``0o600``, so
    no one else could read the run).
    """
    directory, name = os.path.split(target)
    for _ in range(100):
        tmp = os.path.join(directory, f".{name}.{os.urandom(6).hex()}.tmp")  # 48 random bits
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:  # pragma: no cover - 48 random bits collided
            continue
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror or str(exc), str(target)) from exc
    raise FileExistsError(f"cannot create a temporary file beside {target}")  # pragma: no cover


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """:func:`atomic_write` of a UTF-8 text."""
    data = text.encode("utf-8")
    atomic_write(path, lambda f: f.write(data))


def save_arrays(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray]) -> None:
    """Atomically write ``arrays`` as an uncompressed ``.npz`` archive."""
    for key, value in arrays.items():
        if np.asarray(value).dtype.hasobject:
            raise ValueError(f"checkpoint array {key!r} holds Python objects; only plain arrays")
    # cast: numpy's stub types savez's keywords as arrays or its own allow_pickle flag
    atomic_write(path, lambda f: np.savez(f, **cast("Mapping[str, Any]", arrays)))


class ArrayInfo(NamedTuple):
    """What one member of an ``.npz`` archive declares, read without decompressing it."""

    dtype: np.dtype
    shape: tuple[int, ...]
    nbytes: int


class _Member(NamedTuple):
    """Where one checked member's array is and how to read it back."""

    entry: Entry
    start: int  # offset of its data in the file
    header: int  # bytes of its .npy header
    fortran_order: bool
    info: ArrayInfo


def _npy_header(member: MemberStream) -> tuple[np.dtype, tuple[int, ...], bool, int]:
    """dtype, shape, Fortran order and header length of the ``.npy`` stream ``member``."""
    # cast: numpy's readers call only read(n) with a count, all MemberStream.read takes
    stream = cast(IO[bytes], member)
    version = npy.read_magic(stream)
    if version == (1, 0):
        shape, fortran, dtype = npy.read_array_header_1_0(stream, max_header_size=MAX_HEADER)
    elif version == (2, 0):
        shape, fortran, dtype = npy.read_array_header_2_0(stream, max_header_size=MAX_HEADER)
    else:
        raise ValueError(f".npy format version {version} is not supported")
    return dtype, tuple(shape), bool(fortran), member.tell()


def inspect_archive(
    path: str | os.PathLike[str], max_bytes: int | None = None
) -> dict[str, ArrayInfo]:
    """Check what an ``.npz`` archive declares, before decompressing anything.

    Reads only the zip's end record and central directory and the first bytes
    of each member (its local header and ``.npy`` header), and requires: at most
    :data:`MAX_MEMBERS` members, each a ``.npy`` array stored or deflated and
    unencrypted, whose declared size is exactly its header plus
    ``prod(shape) * itemsize``, that lies inside the file and inflates at most
    :data:`MAX_INFLATION` times; no object arrays; and all arrays together at
    most ``max_bytes`` (default: the memory available now). Loading the arrays
    then allocates at most that total.

    Returns
    -------
    dict
        ``{key: ArrayInfo(dtype, shape, nbytes)}`` in archive order.

    Raises
    ------
    CheckpointError
        Naming the file and the first rule broken.
    """
    p = os.fspath(path)
    with _unreadable_as_checkpoint_error(p), open(p, "rb") as f:
        return {key: member.info for key, member in _inspect(p, f, max_bytes).items()}


@contextmanager
def _unreadable_as_checkpoint_error(p: str) -> Iterator[None]:
    """Turns any error but a CheckpointError (struct, zlib, numpy header and EOF
    errors, MemoryError) into a CheckpointError naming the file."""
    try:
        yield
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(
            p, f"not a readable .npz checkpoint (truncated or corrupted?): "
            f"{type(exc).__name__}: {exc}"
        ) from exc  # fmt: skip


def _inspect(p: str, f: IO[bytes], max_bytes: int | None) -> dict[str, _Member]:
    size = os.fstat(f.fileno()).st_size
    if f.read(6) == b"\x93NUMPY":
        raise CheckpointError(p, "not an .npz archive (a single .npy array)")
    count, cd_size, cd_offset = end_of_central_directory(f, size)
    if count > MAX_MEMBERS:
        raise CheckpointError(p, f"the archive lists {count} members, at most {MAX_MEMBERS}")
    if cd_size > min(size, MAX_DIRECTORY_BYTES):
        raise CheckpointError(
            p, f"the central directory declares {cd_size} bytes in a {size}-byte file "
            f"(at most {MAX_DIRECTORY_BYTES})"
        )  # fmt: skip
    out: dict[str, _Member] = {}
    total = 0
    for entry in central_directory(f, count, cd_size, cd_offset):
        key = _check_member(p, entry)
        if key in out:
            raise CheckpointError(p, f"member {entry.name!r} appears twice")
        start = data_start(f, entry)
        if start + entry.compress_size > size:
            raise CheckpointError(
                p, f"member {entry.name!r} declares {entry.compress_size} bytes at offset "
                f"{start}, past the end of the {size}-byte file"
            )  # fmt: skip
        dtype, shape, fortran_order, header = _npy_header(MemberStream(f, entry, start))
        if dtype.hasobject:
            raise CheckpointError(
                p, f"{key!r}: Object arrays cannot be loaded (they would be unpickled)"
            )
        if any(d < 0 for d in shape):
            raise CheckpointError(p, f"{key!r}: negative dimension in shape {shape}")
        nbytes = math.prod(shape) * dtype.itemsize
        if header + nbytes != entry.file_size:
            raise CheckpointError(
                p, f"{key!r} declares shape {shape} of {dtype} ({nbytes} bytes), but "
                f"the member holds {entry.file_size - header} bytes of data"
            )  # fmt: skip
        out[key] = _Member(entry, start, header, fortran_order, ArrayInfo(dtype, shape, nbytes))
        total += nbytes
    limit = available_memory() if max_bytes is None else max_bytes
    if limit is not None and total > limit:
        raise CheckpointError(
            p, f"its arrays would take {format_bytes(total)}, more than the "
            f"{format_bytes(limit)} this load may use"
            + (" (the memory available)" if max_bytes is None else "")
        )  # fmt: skip
    return out


def _check_member(p: str, entry: Entry) -> str:
    """The key of one archive member, after the checks its directory entry allows."""
    name = entry.name
    if not name.endswith(".npy"):
        raise CheckpointError(p, f"member {name!r} is not an .npy array")
    if entry.flags & 0x1:
        raise CheckpointError(p, f"member {name!r} is encrypted")
    if entry.method == STORED:
        if entry.compress_size != entry.file_size:
            raise CheckpointError(
                p, f"member {name!r} is stored uncompressed but declares {entry.file_size} "
                f"bytes and holds {entry.compress_size}"
            )  # fmt: skip
    elif entry.method == DEFLATED:
        if entry.file_size > MAX_INFLATION * max(entry.compress_size, 1):
            raise CheckpointError(
                p, f"member {name!r} would inflate {entry.compress_size} bytes to "
                f"{entry.file_size} (more than {MAX_INFLATION}x): rewrite the checkpoint "
                "uncompressed (np.savez)"
            )  # fmt: skip
    else:
        raise CheckpointError(
            p, f"member {name!r} uses zip compression method {entry.method}; "
            "only stored or deflated members are read"
        )  # fmt: skip
    return name[: -len(".npy")]


def _read_array(f: IO[bytes], member: _Member) -> np.ndarray:
    """The array of one member that :func:`_inspect` checked (CRC-32 included)."""
    stream = MemberStream(f, member.entry, member.start)
    stream.read(member.header)
    dtype, shape, nbytes = member.info
    flat = np.empty(math.prod(shape), dtype)
    if nbytes:
        stream.readinto(flat.view(np.uint8).data)
    stream.finish()
    if member.fortran_order:
        return flat.reshape(shape[::-1]).transpose()
    return flat.reshape(shape)


def load_arrays(
    path: str | os.PathLike[str], max_bytes: int | None = None, skip: tuple[str, ...] = ()
) -> dict[str, np.ndarray]:
    """Read every array of an ``.npz`` file, never unpickling.

    :func:`inspect_archive`'s checks come first, so nothing is
    decompressed or allocated beyond what the archive declares, and at most
    ``max_bytes`` (default: the memory available) in all. Members whose key
    starts with one of the prefixes in ``skip`` pass the same checks but are
    not read (``DqnPolicy.load`` skips the target network, the optimiser
    state and the replay buffer). Every member read is checked against its
    CRC-32, as ``np.load`` does.

    Raises
    ------
    CheckpointError
        If the file is missing, unreadable, not an ``.npz`` archive, truncated
        or corrupted, holds object arrays, or declares more than the format
        or ``max_bytes`` allow.
    """
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise CheckpointError(p, "no such checkpoint file")
    with _unreadable_as_checkpoint_error(p), open(p, "rb") as f:
        members = _inspect(p, f, max_bytes)
        return {key: _read_array(f, m) for key, m in members.items() if not key.startswith(skip)}


def format_tag(path: str | os.PathLike[str]) -> str | None:
    """A checkpoint's ``"format"`` tag (which algorithm wrote it), reading that array
    alone after :func:`inspect_archive`'s checks; None when it has none.

    Raises
    ------
    CheckpointError
        As :func:`load_arrays`, or a ``"format"`` that is not a string.
    """
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise CheckpointError(p, "no such checkpoint file")
    with _unreadable_as_checkpoint_error(p), open(p, "rb") as f:
        members = _inspect(p, f, None)
        if FORMAT_KEY not in members:
            return None
        return Reader(p, {FORMAT_KEY: _read_array(f, members[FORMAT_KEY])}).string(FORMAT_KEY)


def string_array(value: str) -> np.ndarray:
    """A 0-d unicode array holding ``value`` (how strings are stored)."""
    return np.array(value, dtype=np.str_)


def json_array(value: Any) -> np.ndarray:
    """A 0-d unicode array holding ``value`` as JSON."""
    return string_array(json.dumps(value, sort_keys=True))


class Reader:
    """Typed access to the arrays of one checkpoint, raising CheckpointError."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        arrays: dict[str, np.ndarray] | None = None,
        skip: tuple[str, ...] = (),
    ):
        self.path = os.fspath(path)
        self.arrays = load_arrays(self.path, skip=skip) if arrays is None else arrays

    def error(self, problem: str) -> CheckpointError:
        return CheckpointError(self.path, problem)

    def has(self, key: str) -> bool:
        return key in self.arrays

    def array(
        self, key: str, dtype: Any, shape: tuple[int, ...] | None = None, ndim: int | None = None
    ) -> np.ndarray:
        if key not in self.arrays:
            raise self.error(f"missing key {key!r}")
        arr = self.arrays[key]
        if arr.dtype != np.dtype(dtype):
            raise self.error(f"{key!r}: expected dtype {np.dtype(dtype)}, found {arr.dtype}")
        if shape is not None and arr.shape != shape:
            raise self.error(f"{key!r}: expected shape {shape}, found {arr.shape}")
        if ndim is not None and arr.ndim != ndim:
            raise self.error(f"{key!r}: expected {ndim} dimension(s), found shape {arr.shape}")
        return arr

    def string(self, key: str) -> str:
        if key not in self.arrays:
            raise self.error(f"missing key {key!r}")
        arr = self.arrays[key]
        if arr.dtype.kind != "U" or arr.shape != ():
            raise self.error(f"{key!r}: expected a string, found {arr.dtype} of shape {arr.shape}")
        return str(arr[()])

    def json(self, key: str) -> Any:
        text = self.string(key)
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise self.error(f"{key!r}: invalid JSON ({exc})") from None

    def integer(self, key: str) -> int:
        if key not in self.arrays:
            raise self.error(f"missing key {key!r}")
        arr = self.arrays[key]
        if arr.dtype.kind not in "iu" or arr.shape != ():
            raise self.error(
                f"{key!r}: expected an integer, found {arr.dtype} of shape {arr.shape}"
            )
        return int(arr[()])

    def check_format(self, expected: str, version: int) -> int:
        """Check the format tag (``expected``) and its version (``version``, the one
        this ember_np reads); returns the version."""
        if FORMAT_KEY not in self.arrays:
            raise self.error(
                f"not an ember_np checkpoint (no 'format' key; keys: {sorted(self.arrays)[:8]})"
            )
        fmt = self.string(FORMAT_KEY)
        if fmt != expected:
            raise self.error(f"expected a {expected!r} checkpoint, found {fmt!r}")
        found = self.integer(VERSION_KEY)
        if found != version:
            raise self.error(
                f"unknown format version {found} (this ember_np reads version {version})"
            )
        return found
