"""Reading a runs root for the dashboard: run discovery, incremental JSONL reads, series.

Layouts found under the root (``TrainingRun``'s, and the multi-seed one)::

    <root>/<name>/<version>/<run_id>/metadata.json              one run
    <root>/<name>/<version>/<run_id>/seed_<s>/metadata.json     one run per seed

A run's id is ``"<name>/<version>/<run_id>"``. Only directories found by
walking the root are ever read: a directory or log file that is a symlink
resolving outside the root is ignored, so no request can reach outside it.

Each log file is read incrementally (:class:`JsonlTail`): the byte offset of
the last complete line is kept, and a refresh reads only what was appended
after it. A last line without its newline (a writer mid-``write``) stays
unread until it is completed; a line that is not a JSON object with the
expected numbers is skipped.

A run is *still training* when

1. its directory holds a lock file (``*.lock``) on which some process holds a
   ``flock`` (read from ``/proc/locks``, without taking the lock, so a trainer
   starting at that moment never finds it busy), or, when there is no lock
   file or no ``/proc/locks``,
2. one of its log files or ``metadata.json`` was modified within the last
   :data:`LIVE_WINDOW` seconds.

A multi-seed run is still training while any of its seeds is.

Listing runs reads each training log's last line only (its ``total_steps``
and ``episode``); a run's series reads the whole log once, then what is appended.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ember_np.stats import iqm_curve

__all__ = ["LIVE_WINDOW", "JsonlTail", "RunStore"]

LIVE_WINDOW = 60.0  # seconds since the last write for a run without a lock to count as live
SMOOTH_EPISODES = 20  # episodes in each seed's moving mean before the IQM across seeds
IQM_POINTS = 200  # env-step grid of the multi-seed reward curve
BOOTSTRAP_RESAMPLES = 1_000
CONFIDENCE = 0.95

_SEED_DIR = re.compile(r"^seed_(\d+)$")
_JSON_NUMBERS = frozenset((int, float))  # exact types: a JSON true/false (bool) is not a number


def _is_number(v: Any) -> bool:
    """A finite JSON number (not a bool; ``v - v`` is NaN for infinities and NaN)."""
    return type(v) in _JSON_NUMBERS and v - v == 0


def _finite_or_none(v: Any) -> float | None:
    return float(v) if _is_number(v) else None


# -- incremental JSONL ------------------------------------------------------------


class JsonlTail:
    """The rows of a growing JSONL file, read incrementally.

    :meth:`refresh` reads only the bytes appended since the last call. A file
    that shrank or was replaced (another inode: ``TrainingRun.rewind_logs``
    rewrites the logs atomically) is read again from the start, and
    ``generation`` goes up so that whatever was built from the old rows is
    rebuilt. With ``root``, a file that resolves outside it (a symlink out)
    reads as absent.
    """

    def __init__(self, path: Path, root: Path | None = None) -> None:
        self.path = path
        self.root = root
        self.rows: list[dict[str, Any]] = []
        self.offset = 0  # bytes up to the end of the last complete line
        self.skipped = 0  # malformed lines seen
        self.generation = 0
        self.mtime = 0.0
        self._inode: int | None = None

    def _reset(self, inode: int | None) -> None:
        if self.rows or self.offset:
            self.generation += 1
        self.rows, self.offset, self.skipped, self._inode = [], 0, 0, inode

    def refresh(self) -> None:
        """Read the complete lines appended since the last call."""
        try:
            if self.root is not None and not self.path.resolve().is_relative_to(self.root):
                raise FileNotFoundError(self.path)
            st = os.stat(self.path)
        except OSError:
            self._reset(None)  # the file is gone: so are its rows
            self.mtime = 0.0
            return
        self.mtime = st.st_mtime
        if st.st_ino != self._inode or st.st_size < self.offset:
            self._reset(st.st_ino)
        if st.st_size == self.offset:
            return
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read(st.st_size - self.offset)
        except OSError:
            return
        end = chunk.rfind(b"\n")
        if end < 0:  # only a torn line so far: wait for its newline
            return
        self.offset += end + 1
        self._parse([line for line in chunk[:end].split(b"\n") if line.strip()])

    def _parse(self, lines: list[bytes]) -> None:
        # Whole lines that each look like one object are parsed in one call (a
        # few times faster than a call per line); any doubt, and each line is
        # parsed on its own, the malformed ones skipped.
        if all(line.lstrip()[:1] == b"{" and line.rstrip()[-1:] == b"}" for line in lines):
            try:
                rows = json.loads(b"[" + b",".join(lines) + b"]")
            except (ValueError, UnicodeDecodeError):
                rows = None
            if rows is not None and len(rows) == len(lines):
                if all(isinstance(r, dict) for r in rows):
                    self.rows.extend(rows)
                    return
        for line in lines:
            try:
                row = json.loads(line)
            except (ValueError, UnicodeDecodeError):
                self.skipped += 1
                continue
            if isinstance(row, dict):
                self.rows.append(row)
            else:
                self.skipped += 1


class _Columns:
    """Columns built from a :class:`JsonlTail`'s rows, extended as rows arrive."""

    def __init__(self) -> None:
        self._generation = -1
        self._consumed = 0

    def update(self, tail: JsonlTail) -> None:
        if tail.generation != self._generation:
            self.__init__()
            self._generation = tail.generation
        for row in tail.rows[self._consumed :]:
            self._add(row)
        self._consumed = len(tail.rows)

    def _add(self, row: dict[str, Any]) -> None:
        raise NotImplementedError


class TrainColumns(_Columns):
    """The training log as columns; rows without a numeric reward and a finite length are skipped.

    ``steps`` is the row's ``total_steps``, or the running sum of lengths for
    logs written without it. Missing or non-finite values are None.
    """

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[int] = []
        self.reward: list[float | None] = []
        self.length: list[int] = []
        self.epsilon: list[float | None] = []
        self.loss: list[float | None] = []
        self._total = 0

    def _add(self, row: dict[str, Any]) -> None:
        # Called once per episode of every run shown: type() tests, not helpers
        # (json gives exactly int, float, bool, str, None, list or dict).
        r, n = row.get("total_reward"), row.get("length")
        if type(r) not in _JSON_NUMBERS or type(n) not in _JSON_NUMBERS or n - n != 0:
            return
        n = int(n)
        self._total += n
        s = row.get("total_steps")
        self.steps.append(int(s) if type(s) in _JSON_NUMBERS and s - s == 0 else self._total)
        self.reward.append(float(r) if r - r == 0 else None)  # r - r is NaN for inf and NaN
        self.length.append(n)
        extras = row.get("extras")
        if type(extras) is dict:
            e, q = extras.get("epsilon"), extras.get("loss")
            self.epsilon.append(float(e) if type(e) in _JSON_NUMBERS and e - e == 0 else None)
            self.loss.append(float(q) if type(q) in _JSON_NUMBERS and q - q == 0 else None)
        else:
            self.epsilon.append(None)
            self.loss.append(None)

    def to_dict(self) -> dict[str, list[Any]]:
        return {"steps": self.steps, "reward": self.reward, "length": self.length,
                "epsilon": self.epsilon, "loss": self.loss}  # fmt: skip


class EvalColumns(_Columns):
    """Mean greedy reward at each evaluation step (episodes grouped by ``total_steps_at_eval``)."""

    def __init__(self) -> None:
        super().__init__()
        self._sums: dict[int, list[float]] = {}

    def _add(self, row: dict[str, Any]) -> None:
        s, r = row.get("total_steps_at_eval"), _finite_or_none(row.get("total_reward"))
        if not _is_number(s) or r is None:
            return
        acc = self._sums.setdefault(int(s), [0.0, 0])
        acc[0] += r
        acc[1] += 1

    def means(self) -> list[float]:
        return [total / count for total, count in self._sums.values()]

    def to_dict(self) -> dict[str, list[Any]]:
        steps = sorted(self._sums)
        return {
            "steps": steps,
            "reward": [self._sums[s][0] / self._sums[s][1] for s in steps],
            "episodes": [int(self._sums[s][1]) for s in steps],
        }


def _lock_held(lock_files: list[Path]) -> bool | None:
    """Whether a process holds a flock on any of ``lock_files`` (None: cannot tell)."""
    try:
        with open("/proc/locks", encoding="ascii") as f:
            table = f.read()
    except OSError:
        return None
    held = set()
    for line in table.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; "1: -> FLOCK ..." is a waiter.
        # The device is major:minor in hex, the inode in decimal.
        parts = line.split()
        if len(parts) < 6 or parts[1] == "->":
            continue
        dev = parts[5].split(":")
        if len(dev) != 3:
            continue
        try:
            held.add((int(dev[0], 16), int(dev[1], 16), int(dev[2])))
        except ValueError:
            continue
    for path in lock_files:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino) in held:
            return True
    return False


def _last_row(data: bytes) -> dict[str, Any] | None:
    """The last complete line of ``data`` that is a JSON object (None: there is none)."""
    end = data.rfind(b"\n")
    while end > 0:
        start = data.rfind(b"\n", 0, end) + 1
        try:
            row = json.loads(data[start:end])
        except (ValueError, UnicodeDecodeError):
            row = None
        if isinstance(row, dict):
            return row
        end = start - 1
    return None


class SeedRun:
    """One run directory (a single run, or one seed of a multi-seed run).

    Listing a run (:meth:`refresh_summary`) reads its metadata, its small
    evaluation log and only the last line of its training log; the training
    log is read whole (then incrementally) when a series is asked for
    (:meth:`train_columns`).
    """

    TAIL_BYTES = 16_384  # enough for the last line of a training log

    def __init__(self, directory: Path, seed: int | None, root: Path) -> None:
        self.dir = directory
        self.seed = seed
        self.root = root
        self.train = JsonlTail(directory / "train_episodes.jsonl", root)
        self.eval = JsonlTail(directory / "eval_episodes.jsonl", root)
        self.metadata: dict[str, Any] = {}
        self._meta_mtime = -1.0
        self._train_cols = TrainColumns()
        self._eval_cols = EvalColumns()
        self._train_stat: tuple[int, int] | None = None  # (inode, size) of the last tail read
        self._train_mtime = 0.0
        self._last_train_row: dict[str, Any] | None = None

    def refresh_summary(self) -> None:
        """Read a changed metadata.json, the new evaluation rows and the training log's end."""
        self._read_train_tail()
        self.eval.refresh()
        self._eval_cols.update(self.eval)
        try:
            mtime = os.stat(self.dir / "metadata.json").st_mtime
        except OSError:
            return
        if mtime != self._meta_mtime:
            try:
                meta = json.loads((self.dir / "metadata.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return  # keep the last good metadata
            if isinstance(meta, dict):
                self.metadata, self._meta_mtime = meta, mtime

    def _read_train_tail(self) -> None:
        path = self.train.path
        try:
            if not path.resolve().is_relative_to(self.root):
                raise FileNotFoundError(path)
            st = os.stat(path)
        except OSError:
            self._train_stat, self._train_mtime, self._last_train_row = None, 0.0, None
            return
        self._train_mtime = st.st_mtime
        if (st.st_ino, st.st_size) == self._train_stat:
            return
        try:
            with open(path, "rb") as f:
                f.seek(max(0, st.st_size - self.TAIL_BYTES))
                data = f.read(self.TAIL_BYTES)
        except OSError:
            return
        self._train_stat = (st.st_ino, st.st_size)
        self._last_train_row = _last_row(b"\n" + data)

    def train_columns(self) -> TrainColumns:
        """The training log as columns, after reading what was appended to it."""
        self.train.refresh()
        self._train_cols.update(self.train)
        return self._train_cols

    def eval_columns(self) -> EvalColumns:
        return self._eval_cols

    def _from_last_row_or_metadata(self, row_key: str, meta_key: str, offset: int) -> int:
        row = self._last_train_row or {}
        logged = row.get(row_key)
        meta = self.metadata.get(meta_key)
        return max(int(logged) + offset if _is_number(logged) else 0,
                   int(meta) if _is_number(meta) else 0)  # fmt: skip

    def episodes(self) -> int:
        """Episodes trained: the last logged episode index + 1 (or metadata's count)."""
        return self._from_last_row_or_metadata("episode", "total_episodes", 1)

    def total_steps(self) -> int:
        """Env steps trained: the last logged ``total_steps`` (or metadata's, if later)."""
        return self._from_last_row_or_metadata("total_steps", "total_steps", 0)

    def last_update(self) -> float:
        return max(self._train_mtime, self.eval.mtime, max(self._meta_mtime, 0.0))

    def training(self, now: float) -> bool:
        locks = sorted(self.dir.glob("*.lock"))
        if locks:
            held = _lock_held(locks)
            if held is not None:
                return held
        return now - self.last_update() < LIVE_WINDOW

    def best_eval(self) -> float | None:
        best = _finite_or_none(self.metadata.get("best_eval_reward"))
        evals = self._eval_cols.means()
        if evals:
            top = max(evals)
            best = top if best is None else max(best, top)
        return best


# -- multi-seed statistics ----------------------------------------------------------


def _iqm_band(table: np.ndarray) -> dict[str, list[float]] | None:
    """IQM across seeds at each point, with its bootstrap band, as JSON lists.

    table : ndarray of float64, shape (points, seeds). The band is
    :func:`ember_np.stats.iqm_curve` (seeds resampled, seeded, so it does not
    jitter between refreshes of unchanged data); None when a value is not finite.
    """
    if not np.all(np.isfinite(table)):
        return None
    band = iqm_curve(table.T, confidence=CONFIDENCE, reps=BOOTSTRAP_RESAMPLES)
    return {"iqm": band.value.tolist(), "lo": band.low.tolist(), "hi": band.high.tolist()}


def _moving_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last ``window`` values at each index (fewer at the start)."""
    c = np.cumsum(np.concatenate(([0.0], values)))
    idx = np.arange(1, values.size + 1)
    start = np.maximum(idx - window, 0)
    return (c[idx] - c[start]) / (idx - start)


def _iqm_curves(seeds: list[SeedRun]) -> dict[str, Any]:
    """IQM and band of the seeds' smoothed training reward and of their eval reward.

    Training: each seed's moving mean of :data:`SMOOTH_EPISODES` episode
    rewards, read at :data:`IQM_POINTS` env steps between the first step all
    seeds have reached and the last one all have reached (the latest episode
    at or before each). Evaluation: the steps every seed was evaluated at.
    """
    out: dict[str, Any] = {"train": None, "eval": None}
    curves = []
    for s in seeds:
        cols = s.train_columns()
        ys = np.array([np.nan if y is None else y for y in cols.reward], dtype=np.float64)
        keep = ~np.isnan(ys)
        if not keep.any():
            curves = []
            break
        xs = np.asarray(cols.steps, dtype=np.float64)[keep]
        curves.append((xs, _moving_mean(ys[keep], SMOOTH_EPISODES)))
    if curves:
        start = max(xs[0] for xs, _ in curves)
        stop = min(xs[-1] for xs, _ in curves)
        if stop >= start:
            grid = np.unique(np.linspace(start, stop, IQM_POINTS).round())
            table = np.empty((grid.size, len(curves)))
            for j, (xs, ys) in enumerate(curves):
                table[:, j] = ys[np.searchsorted(xs, grid, side="right") - 1]
            band = _iqm_band(table)
            if band is not None:
                out["train"] = {"steps": grid.astype(int).tolist(), **band}
    evals = []
    for s in seeds:
        cols = s.eval_columns().to_dict()
        evals.append(dict(zip(cols["steps"], cols["reward"])))
    common = sorted(set.intersection(*(set(e) for e in evals))) if evals else []
    if common:
        table = np.array([[e[x] for e in evals] for x in common], dtype=np.float64)
        band = _iqm_band(table)
        if band is not None:
            out["eval"] = {"steps": common, **band}
    return out


# -- the root -----------------------------------------------------------------------


@dataclass
class Run:
    """What the dashboard lists: a single run, or a multi-seed run (its seeds' runs)."""

    id: str
    name: str
    version: str
    run_id: str
    seeds: list[SeedRun]
    multi_seed: bool

    def summary(self, now: float) -> dict[str, Any]:
        bests = [b for b in (s.best_eval() for s in self.seeds) if b is not None]
        return {
            "id": self.id,
            "name": self.name,
            "version": self.version,
            "run_id": self.run_id,
            "seeds": [s.seed for s in self.seeds] if self.multi_seed else None,
            "total_steps": min(s.total_steps() for s in self.seeds),
            "episodes": sum(s.episodes() for s in self.seeds),
            "last_update": max(s.last_update() for s in self.seeds),
            "training": any(s.training(now) for s in self.seeds),
            "best_eval": max(bests) if bests else None,
        }

    def state(self) -> tuple[tuple[int, int, int, int], ...]:
        """Changes whenever a log of a seed gains or loses rows."""
        return tuple((s.train.generation, len(s.train.rows), s.eval.generation, len(s.eval.rows))
                     for s in self.seeds)  # fmt: skip

    def series(self, iqm: dict[str, Any] | None) -> dict[str, Any]:
        members = [
            {"seed": s.seed, "train": s.train_columns().to_dict(),
             "eval": s.eval_columns().to_dict()}
            for s in self.seeds
        ]  # fmt: skip
        return {"id": self.id, "members": members, "iqm": iqm}


class RunStore:
    """The runs under one root, with every log file's reading state kept between requests.

    Thread-safe: the HTTP server's threads share one store.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        root_path = Path(root)
        if not root_path.is_dir():
            raise FileNotFoundError(
                f"runs root {str(root_path)!r} is not a directory; pass the directory that "
                "`ember-np train --root` wrote to (default: runs)"
            )
        self.root = root_path.resolve()
        self._lock = threading.Lock()
        self._seed_runs: dict[Path, SeedRun] = {}
        self._runs: dict[str, Run] = {}
        self._iqm: dict[str, tuple[Any, dict[str, Any]]] = {}  # run id -> (Run.state(), curves)

    def _inside(self, path: Path) -> bool:
        try:
            return path.resolve().is_relative_to(self.root)
        except OSError:
            return False

    def _subdirs(self, path: Path) -> list[Path]:
        try:
            entries = sorted(os.scandir(path), key=lambda e: e.name)
        except OSError:
            return []
        out = []
        for e in entries:
            if e.name.startswith("."):
                continue
            p = Path(e.path)
            try:
                if not e.is_dir():
                    continue
            except OSError:
                continue
            if e.is_symlink() and not self._inside(p):
                continue
            out.append(p)
        return out

    def _seed_run(self, path: Path, seed: int | None) -> SeedRun:
        run = self._seed_runs.get(path)
        if run is None:
            run = self._seed_runs[path] = SeedRun(path, seed, self.root)
        return run

    def _is_run_dir(self, path: Path) -> bool:
        meta = path / "metadata.json"
        try:
            return meta.is_file() and self._inside(meta)
        except OSError:  # e.g. a directory we may not read
            return False

    def _scan(self) -> None:
        runs: dict[str, Run] = {}
        for name in self._subdirs(self.root):
            for version in self._subdirs(name):
                for run_dir in self._subdirs(version):
                    rid = f"{name.name}/{version.name}/{run_dir.name}"
                    if self._is_run_dir(run_dir):
                        runs[rid] = Run(rid, name.name, version.name, run_dir.name,
                                        [self._seed_run(run_dir, None)], False)  # fmt: skip
                        continue
                    seeds = []
                    for sub in self._subdirs(run_dir):
                        m = _SEED_DIR.match(sub.name)
                        if m and self._is_run_dir(sub):
                            seeds.append(self._seed_run(sub, int(m.group(1))))
                    if seeds:
                        seeds.sort(key=lambda s: s.seed)
                        runs[rid] = Run(rid, name.name, version.name, run_dir.name, seeds, True)
        live = {s.dir for r in runs.values() for s in r.seeds}
        self._seed_runs = {p: s for p, s in self._seed_runs.items() if p in live}
        self._runs = runs

    def list_runs(self) -> list[dict[str, Any]]:
        """Every run under the root, newest first, after reading what was appended."""
        with self._lock:
            self._scan()
            now = time.time()
            for run in self._runs.values():
                for s in run.seeds:
                    s.refresh_summary()
            out = [r.summary(now) for r in self._runs.values()]
        out.sort(key=lambda r: (r["run_id"], r["id"]), reverse=True)
        return out

    def series(self, run_id: str) -> dict[str, Any] | None:
        """The training and evaluation series of ``run_id`` (None: no such run under the root)."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:  # not seen yet: a run created since the last listing
                self._scan()
                run = self._runs.get(run_id)
            if run is None:
                return None
            for s in run.seeds:
                s.refresh_summary()
            iqm = None
            if run.multi_seed:
                state = run.state()
                cached = self._iqm.get(run_id)
                if cached is None or cached[0] != state:
                    cached = self._iqm[run_id] = (state, _iqm_curves(run.seeds))
                iqm = cached[1]
            return run.series(iqm)
