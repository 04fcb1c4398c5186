"""Checkpoint files: atomic ``.npz`` writes and validated, pickle-free reads.

A checkpoint is one ``.npz`` archive of plain arrays (numbers and unicode
strings; never pickled objects). Writes go to a temporary file in the same
directory, are flushed and fsynced, then renamed over the target with
``os.replace``, so a crash leaves either the old file or the new one, never a
torn one. Reads use ``np.load(..., allow_pickle=False)`` and turn every way a
file can be wrong (missing, truncated, corrupted, foreign, object arrays,
missing keys, wrong shapes or versions) into a :class:`CheckpointError`.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

__all__ = ["AgentKeys", "CheckpointError", "atomic_write", "load_arrays", "save_arrays"]

#: Identifies an ember_np agent checkpoint; a file without it is foreign.
AGENT_FORMAT = "ember_np.dqn_agent"
#: Bumped whenever the layout changes incompatibly.
FORMAT_VERSION = 1


class AgentKeys:
    """Every key of an agent checkpoint (format version 1): the one place they are spelled.

    Written by ``DqnAgent.state_arrays``, read by ``DqnAgent.load`` /
    ``from_checkpoint``, ``DqnPolicy.load`` and ``ember-np eval``.
    """

    FORMAT = "format"  # unicode scalar, AGENT_FORMAT
    VERSION = "format_version"  # int64 scalar, FORMAT_VERSION
    CONFIG = "config"  # JSON text: DqnConfig.to_dict()
    ENCODER = "encoder"  # JSON text: the encoder's description
    MAPPER = "action_mapper"  # JSON text: the action mapper's description
    SEED = "seed"  # int64 scalar
    COUNTERS = "counters"  # int64 (2,): total_steps, n_updates
    RNG_EXPLORE = "rng/explore"  # uint64 (4,): PCG64 state
    RNG_REPLAY = "rng/replay"  # uint64 (4,): PCG64 state
    ONLINE = "online/"  # prefix of QNetwork.state_dict() keys (layer_sizes, w<i>, b<i>, adam_*)
    TARGET = "target/"  # prefix of the target network's w<i>, b<i>
    BUFFER = "buffer/"  # prefix of the replay buffer's state_dict() keys (optional)

    @staticmethod
    def weight(prefix: str, layer: int) -> str:
        """Key of layer ``layer``'s weight matrix under ``prefix`` (ONLINE or TARGET)."""
        return f"{prefix}w{layer}"

    @staticmethod
    def bias(prefix: str, layer: int) -> str:
        """Key of layer ``layer``'s bias vector under ``prefix`` (ONLINE or TARGET)."""
        return f"{prefix}b{layer}"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used: names the file and the problem."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


def _fsync_dir(directory: Path) -> None:
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


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], None]) -> None:
    """Write a file so that readers only ever see the old or the complete new version.

    ``write(f)`` fills a temporary file in the same directory; it is flushed,
    fsynced and renamed over ``path`` (``os.replace``), then the directory is
    fsynced. On any error the temporary file is removed, ``path`` is untouched
    and the error propagates (an ``OSError`` such as ENOSPC names the file).
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(target.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """:func:`atomic_write` of a UTF-8 text."""
    data = text.encode("utf-8")
    atomic_write(path, lambda f: f.write(data))


def save_arrays(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray]) -> None:
    """Atomically write ``arrays`` as an uncompressed ``.npz`` archive."""
    for key, value in arrays.items():
        if np.asarray(value).dtype.hasobject:
            raise ValueError(f"checkpoint array {key!r} holds Python objects; only plain arrays")
    atomic_write(path, lambda f: np.savez(f, **arrays))


def load_arrays(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Read every array of an ``.npz`` file, never unpickling.

    Raises
    ------
    CheckpointError
        If the file is missing, unreadable, not an ``.npz`` archive, truncated
        or corrupted, or holds object arrays.
    """
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(p, "no such checkpoint file")
    try:
        with np.load(p, allow_pickle=False) as archive:
            if not hasattr(archive, "files"):
                raise CheckpointError(p, "not an .npz archive (a single .npy array)")
            return {key: archive[key] for key in archive.files}
    except CheckpointError:
        raise
    except Exception as exc:  # zipfile, zlib, numpy header and EOF errors, MemoryError
        raise CheckpointError(
            p,
            "not a readable .npz checkpoint (truncated or corrupted?): "
            f"{type(exc).__name__}: {exc}",
        ) from exc


def string_array(value: str) -> np.ndarray:
    """A 0-d unicode array holding ``value`` (how strings are stored)."""
    return np.array(value, dtype=np.str_)


def json_array(value: Any) -> np.ndarray:
    """A 0-d unicode array holding ``value`` as JSON."""
    return string_array(json.dumps(value, sort_keys=True))


class Reader:
    """Typed access to the arrays of one checkpoint, raising CheckpointError."""

    def __init__(self, path: str | os.PathLike[str], arrays: dict[str, np.ndarray] | None = None):
        self.path = Path(path)
        self.arrays = load_arrays(self.path) if arrays is None else arrays

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

    def check_format(self, expected: str) -> int:
        """Check the format tag and version; returns the version."""
        if AgentKeys.FORMAT not in self.arrays:
            raise self.error(
                f"not an ember_np checkpoint (no 'format' key; keys: {sorted(self.arrays)[:8]})"
            )
        fmt = self.string(AgentKeys.FORMAT)
        if fmt != expected:
            raise self.error(f"expected a {expected!r} checkpoint, found {fmt!r}")
        version = self.integer(AgentKeys.VERSION)
        if version != FORMAT_VERSION:
            raise self.error(
                f"unknown format version {version} (this ember_np reads version {FORMAT_VERSION})"
            )
        return version
