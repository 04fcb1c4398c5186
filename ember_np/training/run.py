"""TrainingRun: one training run's directory, checkpoints, logs and metadata.

Layout (ember-rl's ``TrainingRun``, with ``.npz`` checkpoints)::

    <root>/<name>/<version>/<YYYYMMDD_HHMMSS>[_<k>]/
        metadata.json           name, version, run_id, total_steps, total_episodes,
                                started_at, last_updated, best_eval_reward
        config.json             whatever write_config() was given
        checkpoints/step_<N>.npz
        checkpoints/latest.npz
        checkpoints/best.npz
        train_episodes.jsonl    one JSON object per training episode
        eval_episodes.jsonl     one per evaluation episode, with total_steps_at_eval

``metadata.json``, ``config.json`` and every checkpoint are written atomically
(temporary file, fsync, rename); each JSONL record is appended as one whole
line and flushed.

One process at a time trains in a run: :meth:`TrainingRun.lock` takes a
:class:`DirectoryLock`, an exclusive ``fcntl.flock`` on ``<run>/.lock`` (the
file holds the owner's PID), which the operating system releases when the
process ends, killed or not. A multi-seed run locks its parent directory the
same way.
Readers (``eval``, ``plot``, :meth:`TrainingRun.resume` to read) take no lock.

The JSONL readers skip any line that is not a whole episode record (a torn
last line left by a crash or a full disk, or garbage), with a
:class:`RunLogWarning` naming the file and the line.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
import weakref
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ember_np._validate import is_int
from ember_np.checkpoint import atomic_write_text
from ember_np.stats import EpisodeRecord

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, runs are not locked
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "DirectoryLock", "RunLockedError", "RunLogWarning", "TrainingRun", "check_name",
    "checkpoint_file_name",
]  # fmt: skip

_RUN_ID = re.compile(r"^(\d{8}_\d{6})(?:_(\d+))?$")
_STEP_FILE = re.compile(r"^step_(\d+)\.npz$")
LOCK_FILE = ".lock"


def checkpoint_file_name(which: str) -> str:
    """The file name of the checkpoint ``which`` names: ``"best"``, ``"latest"`` or
    ``"step_<N>"`` (``step_007`` is ``step_7.npz``). ValueError for any other name."""
    if which in ("best", "latest"):
        return f"{which}.npz"
    if which.startswith("step_") and which[5:].isdigit():
        return f"step_{int(which[5:])}.npz"
    raise ValueError(f"a checkpoint is best, latest or step_N, got {which!r}")


class RunLockedError(RuntimeError):
    """Another process is training in this run directory (it holds the run's lock)."""

    def __init__(self, run_dir: Path, pid: int | None, what: str = "the run") -> None:
        self.run_dir = run_dir
        self.pid = pid
        holder = f"process {pid}" if pid is not None else "another process"
        readers = "eval and plot" if what == "the run" else "report and plot"
        super().__init__(
            f"{what.removeprefix('the ')} {run_dir} is in use: {holder} is training in it "
            f"(lock {run_dir / LOCK_FILE}); wait for it to finish or stop it ({readers} work "
            "meanwhile)"
        )


class RunLogWarning(UserWarning):
    """A JSONL log line that is not a whole record was skipped (torn write or garbage)."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# What every line of each log must hold to count as a record.
_LOG_FIELDS: dict[str, dict[str, Callable[[Any], bool]]] = {
    "train_episodes.jsonl": {"total_reward": _is_number, "length": is_int},
    "eval_episodes.jsonl": {
        "total_reward": _is_number, "length": is_int, "total_steps_at_eval": is_int,
    },
}  # fmt: skip


def _parse_log_line(line: str, fields: dict[str, Callable[[Any], bool]]) -> dict[str, Any] | None:
    """The record on ``line``, or None when it is not a whole record."""
    try:
        row = json.loads(line)
    except ValueError:  # JSONDecodeError, or a torn multi-byte character
        return None
    if not isinstance(row, dict):
        return None
    for key, ok in fields.items():
        if key not in row or not ok(row[key]):
            return None
    if "total_steps" in row and not is_int(row["total_steps"]):
        return None
    return row


def _read_log(path: Path) -> tuple[list[tuple[str, dict[str, Any]]], list[str], bool]:
    """Split a JSONL log into its records (with their lines) and the lines that are not.

    Each skipped line is reported with a :class:`RunLogWarning` naming the file
    and the line number. The third value says whether the file lacks its final
    newline (a write cut short; the line is kept if it still holds a record).
    """
    fields = _LOG_FIELDS.get(path.name, {})
    # Undecodable bytes survive as surrogates: a line moved aside keeps its exact bytes.
    text = path.read_bytes().decode("utf-8", errors="surrogateescape")
    lines = text.split("\n")
    torn_end = bool(lines[-1])  # the file does not end with a newline
    if not torn_end:
        lines.pop()
    good: list[tuple[str, dict[str, Any]]] = []
    bad: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        row = _parse_log_line(line, fields)
        if row is not None:
            good.append((line, row))
            continue
        bad.append(line)
        what = "a torn last line" if number == len(lines) else "not a whole record"
        shown = line.encode("utf-8", "replace").decode("utf-8", "replace")
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        warnings.warn(
            f"{path}: line {number} is {what}, skipped: {shown!r}", RunLogWarning, stacklevel=3
        )
    return good, bad, torn_end


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def check_name(kind: str, value: str) -> str:
    """``value`` when it can name a run's directory level (``kind``: "name" or "version").

    ValueError when it is empty, ``.``/``..`` or holds a path separator.
    """
    if (
        not isinstance(value, str)
        or not value
        or value in (".", "..")
        or "/" in value
        or "\\" in value
    ):
        raise ValueError(f"{kind} must be a non-empty name without path separators, got {value!r}")
    return value


def _run_sort_key(path: Path) -> tuple[str, int]:
    m = _RUN_ID.match(path.name)
    assert m is not None
    return m.group(1), int(m.group(2) or 0)


class TrainingRun:
    """A run directory: checkpoints with rotation, JSONL episode logs, metadata.

    Create with :meth:`create` or reopen with :meth:`resume`; the constructor
    is internal.
    """

    def __init__(self, directory: Path, metadata: dict[str, Any]) -> None:
        self._dir = directory
        self._metadata = metadata
        self._lock = DirectoryLock(directory, "the run")
        self._log_listeners: list[Callable[[str, list[dict[str, Any]]], None]] = []

    # -- creating and reopening -------------------------------------------------
    @classmethod
    def create(cls, name: str, version: str, root: str | os.PathLike[str] = "runs") -> TrainingRun:
        """Make ``root/name/version/<YYYYMMDD_HHMMSS>/`` and its files.

        Two runs started in the same second get distinct directories
        (``..._1``, ``..._2``). An unwritable root raises ``OSError`` naming
        the path, before any training happens.
        """
        check_name("name", name)
        check_name("version", str(version))
        parent = Path(root) / name / str(version)
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OSError(
                exc.errno, f"cannot create the run directory under {parent}: {exc.strerror}"
            ) from exc
        stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
        k = 0
        while True:
            run_id = stamp if k == 0 else f"{stamp}_{k}"
            directory = parent / run_id
            try:
                directory.mkdir()  # atomic: fails if another run took this name
                break
            except FileExistsError:
                k += 1
        return cls._init(directory, name, str(version), run_id)

    @classmethod
    def create_in(cls, directory: str | os.PathLike[str], name: str, version: str) -> TrainingRun:
        """Make a run in exactly ``directory`` (which must not exist yet; its parent must).

        For runs grouped under one directory, such as the seeds of a
        multi-seed run (``<parent>/seed_<s>/``); ``run_id`` is the directory's name.
        """
        check_name("name", name)
        check_name("version", str(version))
        directory = Path(directory)
        directory.mkdir()  # FileExistsError if taken: never mix two runs' files
        return cls._init(directory, name, str(version), directory.name)

    @classmethod
    def _init(cls, directory: Path, name: str, version: str, run_id: str) -> TrainingRun:
        (directory / "checkpoints").mkdir()
        now = _now()
        metadata = {
            "name": name,
            "version": version,
            "run_id": run_id,
            "total_steps": 0,
            "total_episodes": 0,
            "started_at": now,
            "last_updated": now,
            "best_eval_reward": None,
        }
        run = cls(directory, metadata)
        run._write_metadata()
        for log in ("train_episodes.jsonl", "eval_episodes.jsonl"):
            (directory / log).touch()
        return run

    @classmethod
    def resume(cls, path: str | os.PathLike[str]) -> TrainingRun:
        """Reopen a run from its directory, or the latest run of a name/version directory."""
        p = Path(path)
        if not p.is_dir():
            raise FileNotFoundError(f"no run directory at {p}")
        if not (p / "metadata.json").is_file():
            runs = [c for c in p.iterdir() if c.is_dir() and _RUN_ID.match(c.name)
                    and (c / "metadata.json").is_file()]  # fmt: skip
            if not runs:
                raise FileNotFoundError(
                    f"{p} is neither a run directory (no metadata.json) nor a name/version "
                    "directory holding runs"
                )
            p = max(runs, key=_run_sort_key)
        metadata = _read_json(p / "metadata.json")
        _check_metadata(p / "metadata.json", metadata)
        metadata.setdefault("best_eval_reward", None)
        run = cls(p, metadata)
        # Leftovers of a killed writer are removed only when no process
        # trains here: a live writer's temporary files are its next checkpoint.
        try:
            run.lock()
        except (RunLockedError, OSError):
            pass
        else:
            run.unlock()
        return run

    # -- the writer's lock --------------------------------------------------------
    def lock(self) -> None:
        """Take the run's writer lock; a no-op when this object holds it already.

        A :class:`DirectoryLock` on the run directory: an exclusive,
        non-blocking ``fcntl.flock`` on ``<run>/.lock``, which then holds this
        process's PID. It lasts until :meth:`unlock`, until this object is
        garbage collected, or until the process ends in any way (the OS
        releases it, ``SIGKILL`` included). Taking it also removes the
        temporary files a killed writer left behind.

        The lock belongs to the process: other ``TrainingRun`` objects of the
        same directory in this process share it (a trainer and its resumed
        successor in one notebook), and it is released when the last of them
        lets go.

        Raises
        ------
        RunLockedError
            If another process holds it (naming that process).
        OSError
            If the run directory is not writable (naming it).
        """
        if self._lock.held:
            return
        if not self._lock.acquire():
            return
        (self._dir / "checkpoints").mkdir(exist_ok=True)
        # A process killed mid-write leaves its temporary file behind (the
        # target itself is intact): remove those leftovers.
        for stale in self.checkpoints_dir.glob(".*.tmp"):
            stale.unlink(missing_ok=True)

    def unlock(self) -> None:
        """Release the writer lock taken by :meth:`lock` (a no-op otherwise)."""
        self._lock.release()

    @property
    def locked(self) -> bool:
        """Whether this object holds the run's writer lock."""
        return self._lock.held

    # -- paths --------------------------------------------------------------------
    @property
    def dir(self) -> Path:
        """The run directory."""
        return self._dir

    @property
    def metadata(self) -> dict[str, Any]:
        """A copy of the current metadata."""
        return dict(self._metadata)

    @property
    def name(self) -> str:
        return str(self._metadata["name"])

    @property
    def version(self) -> str:
        return str(self._metadata["version"])

    @property
    def checkpoints_dir(self) -> Path:
        return self._dir / "checkpoints"

    def checkpoint_path(self, step: int) -> Path:
        """``checkpoints/step_<step>.npz``."""
        return self.checkpoints_dir / f"step_{int(step)}.npz"

    def latest_checkpoint_path(self) -> Path:
        return self.checkpoints_dir / "latest.npz"

    def best_checkpoint_path(self) -> Path:
        return self.checkpoints_dir / "best.npz"

    def named_checkpoint_path(self, which: str) -> Path:
        """The checkpoint ``which`` names: ``"best"``, ``"latest"`` or ``"step_<N>"``.

        Raises ValueError for any other name (the file need not exist).
        """
        return self.checkpoints_dir / checkpoint_file_name(which)

    def step_checkpoints(self) -> list[tuple[int, Path]]:
        """Numbered checkpoints on disk, sorted by step."""
        found: list[tuple[int, Path]] = []
        if not self.checkpoints_dir.is_dir():
            return found
        for p in self.checkpoints_dir.iterdir():
            m = _STEP_FILE.match(p.name)
            if m:
                found.append((int(m.group(1)), p))
        return sorted(found)

    def prune_checkpoints(self, keep: int) -> list[Path]:
        """Delete all but the ``keep`` highest-step numbered checkpoints.

        ``latest.npz`` and ``best.npz`` are never deleted. Returns the removed paths.
        """
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ValueError(f"keep must be an integer >= 0, got {keep!r}")
        numbered = self.step_checkpoints()
        doomed = [p for _, p in numbered[: max(0, len(numbered) - keep)]]
        for p in doomed:
            p.unlink(missing_ok=True)
        return doomed

    # -- logs and metadata ------------------------------------------------------
    def _append(self, filename: str, rows: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(row, allow_nan=True) + "\n" for row in rows)
        # One write() of whole lines on an O_APPEND file, then flush + fsync:
        # a crash loses whole trailing lines; a full disk can leave part of one,
        # which the readers skip and resume moves aside.
        path = self._dir / filename
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:  # name the log (a write error alone does not)
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        for listener in tuple(self._log_listeners):  # told once the rows are on disk
            listener(filename, rows)

    def add_log_listener(self, listener: Callable[[str, list[dict[str, Any]]], None]) -> None:
        """Call ``listener(log, rows)`` after every append to a JSONL log.

        ``log`` is ``"train_episodes.jsonl"`` or ``"eval_episodes.jsonl"``;
        ``rows`` the records just written, as the readers return them. A
        listener only reads (how the training loop tells its callbacks).
        """
        self._log_listeners.append(listener)

    def remove_log_listener(self, listener: Callable[[str, list[dict[str, Any]]], None]) -> None:
        """Stop calling ``listener`` (added by :meth:`add_log_listener`); no-op if absent."""
        if listener in self._log_listeners:
            self._log_listeners.remove(listener)

    def log_train_episode(
        self, record: EpisodeRecord, episode: int | None = None, total_steps: int | None = None,
        env: int | None = None,
    ) -> None:  # fmt: skip
        """Append one training episode to ``train_episodes.jsonl`` (``env``: the index
        of the env of a vector env that played it)."""
        self.log_train_episodes([(record, episode, total_steps, env)])

    def log_train_episodes(
        self, entries: Sequence[tuple[EpisodeRecord, int | None, int | None, int | None]]
    ) -> None:
        """Append training episodes, each ``(record, episode, total_steps, env)`` as
        :meth:`log_train_episode` takes them, in one write and one fsync (the same
        bytes as one call each: a compiled chunk's episodes cost one disk flush)."""
        rows = []
        for record, episode, total_steps, env in entries:
            row = record.to_dict()
            if episode is not None:
                row["episode"] = int(episode)
            if total_steps is not None:
                row["total_steps"] = int(total_steps)
            if env is not None:
                row["env"] = int(env)
            rows.append(row)
        if rows:
            self._append("train_episodes.jsonl", rows)

    def log_eval_episode(self, record: EpisodeRecord, total_steps: int) -> None:
        """Append one evaluation episode, tagged with ``total_steps_at_eval``."""
        self.log_eval_episodes([record], total_steps)

    def log_eval_episodes(self, records: Sequence[EpisodeRecord], total_steps: int) -> None:
        """Append an evaluation's episodes (:meth:`log_eval_episode` each), in one
        write and one fsync."""
        rows = [{**record.to_dict(), "total_steps_at_eval": int(total_steps)} for record in records]
        if rows:
            self._append("eval_episodes.jsonl", rows)

    def read_train_episodes(self) -> list[dict[str, Any]]:
        """The records of ``train_episodes.jsonl``; lines that are not (torn,
        garbage) are skipped with a :class:`RunLogWarning` naming file and line."""
        return self._read_jsonl("train_episodes.jsonl")

    def read_eval_episodes(self) -> list[dict[str, Any]]:
        """The records of ``eval_episodes.jsonl`` (bad lines skipped, with a warning)."""
        return self._read_jsonl("eval_episodes.jsonl")

    def _read_jsonl(self, filename: str) -> list[dict[str, Any]]:
        path = self._dir / filename
        if not path.exists():
            return []
        return [row for _, row in _read_log(path)[0]]

    def rewind_logs(self, total_steps: int) -> int:
        """Make the JSONL logs agree with a checkpoint taken at ``total_steps``.

        Rows logged after that step (training that happened after the
        checkpoint, then was lost with the process) move to
        ``train_episodes.rolled_back.jsonl`` / ``eval_episodes.rolled_back.jsonl``,
        so nothing is deleted and a resumed run does not log the same steps
        twice. Lines that are not whole records (a torn last line, garbage)
        move there too, with a :class:`RunLogWarning`, and every log is left
        ending in a newline, so the next record starts a line of its own.
        Returns the number of training episodes that remain.
        """
        kept_train = 0
        for name, key in (
            ("train_episodes", "total_steps"),
            ("eval_episodes", "total_steps_at_eval"),
        ):
            path = self._dir / f"{name}.jsonl"
            if not path.exists():
                continue
            records, drop, torn_end = _read_log(path)
            keep: list[str] = []
            for line, row in records:
                (keep if row.get(key, 0) <= total_steps else drop).append(line)
            if name == "train_episodes":
                kept_train = len(keep)
            if not drop and not torn_end:
                continue
            if drop:
                with open(self._dir / f"{name}.rolled_back.jsonl", "a", encoding="utf-8",
                          errors="surrogateescape") as f:  # fmt: skip
                    f.write("".join(line + "\n" for line in drop))
                    f.flush()
                    os.fsync(f.fileno())
            atomic_write_text(path, "".join(line + "\n" for line in keep))
        return kept_train

    def write_config(self, config: dict[str, Any]) -> None:
        """Write ``config.json`` (atomically)."""
        atomic_write_text(self._dir / "config.json", json.dumps(config, indent=2, sort_keys=True))

    def read_config(self) -> dict[str, Any] | None:
        """``config.json`` as written by :meth:`write_config`, or None if there is none.

        Raises
        ------
        ValueError
            If the file is not a JSON object (naming the file).
        OSError
            If it cannot be read (naming the file and the reason).
        """
        path = self._dir / "config.json"
        return _read_json(path) if path.exists() else None

    def update_metadata(self, total_steps: int, total_episodes: int, **extra: Any) -> None:
        """Record progress in ``metadata.json`` (atomically)."""
        self._metadata["total_steps"] = int(total_steps)
        self._metadata["total_episodes"] = int(total_episodes)
        self._metadata.update(extra)
        self._metadata["last_updated"] = _now()
        self._write_metadata()

    @property
    def best_eval_reward(self) -> float:
        v = self._metadata.get("best_eval_reward")
        return -math.inf if v is None else float(v)

    def _write_metadata(self) -> None:
        atomic_write_text(self._dir / "metadata.json", json.dumps(self._metadata, indent=2))

    def __repr__(self) -> str:
        return f"TrainingRun({str(self._dir)!r})"


class DirectoryLock:
    """One writing process per directory: an exclusive ``fcntl.flock`` on ``<dir>/.lock``.

    The lock file holds the owner's PID, so a refused writer can name it. The
    operating system releases the lock when the owner ends in any way
    (``SIGKILL`` included): a stale lock never blocks anyone. It is
    non-blocking: a second writer is refused at once with
    :class:`RunLockedError`.

    Within one process the lock is shared: ``DirectoryLock`` objects of the
    same directory count references to one file descriptor, released when
    the last of them lets go (:meth:`release`, or garbage collection). Taking
    it fresh removes the ``.*.tmp`` files a killed writer left in the
    directory. :class:`TrainingRun` locks its run directory with it, and a
    multi-seed run its parent directory.

    Parameters
    ----------
    directory : path
        The directory to lock (it must exist).
    what : str
        How errors name the directory, e.g. ``"the run"`` or ``"the multi-seed run"``.
    """

    def __init__(self, directory: str | os.PathLike[str], what: str = "the run") -> None:
        self.directory = Path(directory)
        self.what = what
        self._release: weakref.finalize | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._release is not None and self._release.alive

    def acquire(self) -> bool:
        """Take the lock (a no-op when held). Returns whether this process took it fresh.

        Raises
        ------
        RunLockedError
            If another process holds it (naming that process's PID).
        OSError
            If the directory is not writable (naming it).
        """
        if self.held or fcntl is None:
            return False
        key = os.path.realpath(self.directory)
        held = _HELD.get(key)
        if held is not None:
            held[1] += 1
            self._release = weakref.finalize(self, _release, key)
            return False
        path = self.directory / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # not inherited by children
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"cannot train in {self.what} {self.directory}: it is not writable "
                f"({exc.strerror}); fix its permissions or copy the run to a writable place",
                str(path),
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise RunLockedError(self.directory, pid, self.what) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _HELD[key] = [fd, 1]
        self._release = weakref.finalize(self, _release, key)
        for stale in self.directory.glob(".*.tmp"):  # a killed writer's, never a live one's
            stale.unlink(missing_ok=True)
        return True

    def release(self) -> None:
        """Let go of the lock (a no-op when not held)."""
        if self._release is not None:
            self._release()
            self._release = None

    def __enter__(self) -> DirectoryLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


#: Directory locks this process holds: real path -> [fd, number of DirectoryLock objects using it].
_HELD: dict[str, list[int]] = {}


def _release(key: str) -> None:
    held = _HELD[key]
    held[1] -= 1
    if held[1] == 0:
        del _HELD[key]
        os.close(held[0])  # releases the flock


def _read_pid(fd: int) -> int | None:
    """The PID written in a lock file, if it holds one."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
    except OSError:  # pragma: no cover
        return None
    return int(text) if text.isdigit() else None


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; errors name the file, the problem and the fix."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:  # e.g. no permission: not a JSON problem
        raise OSError(exc.errno, f"cannot read {path}: {exc.strerror}", str(path)) from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text: restore it from a copy of the run") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path} is not valid JSON ({exc}): it is written atomically, so it was edited or "
            "damaged; restore it from a copy of the run"
        ) from None
    if not isinstance(value, dict):
        raise ValueError(
            f"{path} holds a JSON {type(value).__name__}, expected an object: restore it from "
            "a copy of the run"
        )
    return value


def _check_metadata(path: Path, metadata: dict[str, Any]) -> None:
    for key in ("name", "version", "run_id"):
        if key not in metadata:
            raise ValueError(f"{path} lacks {key!r}: restore it from a copy of the run")
    for key in ("total_steps", "total_episodes"):
        value = metadata.get(key)
        if not is_int(value) or value < 0:
            raise ValueError(
                f"{path}: {key!r} must be an integer >= 0, found {value!r}: restore it from a "
                "copy of the run"
            )
