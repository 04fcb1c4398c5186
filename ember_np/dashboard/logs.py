"""Reading a runs root for the dashboard: run discovery, incremental JSONL reads, series.

Layouts found under the root (``TrainingRun``'s, and the multi-seed one)::

    <root>/<name>/<version>/<run_id>/metadata.json              one run
    <root>/<name>/<version>/<run_id>/seed_<s>/metadata.json     one run per seed

A run's id is ``"<name>/<version>/<run_id>"``. Only directories found by
walking the root are ever read: a directory or log file that is a symlink
resolving outside the root is ignored, so no request can reach outside it.

Each log file is read incrementally (:class:`JsonlTail`, in
:mod:`ember_np.dashboard.tails`): only what was appended since the last
read, in reads of at most :data:`~ember_np.dashboard.tails.PAGE_BYTES`; a
file that shrank or was replaced is read again from the start; a torn or
malformed line is skipped.

What is kept of a log is its columns (:class:`TrainLog`: five float64 arrays
and each row's end offset; :class:`EvalLog`: one mean per evaluation step),
never its rows, so a log is parsed once, and a series request can send only
the rows after a byte offset (the client's cursor), at most
:data:`~ember_np.dashboard.tails.PAGE_BYTES` of log per request.

Every number sent is finite: non-finite values, and numbers beyond float64
(``total_reward`` 1e400) or, for counts (steps, lengths, episodes), beyond
2**53 read as missing; means and the multi-seed statistics are computed on
values scaled by a power of two so that sums cannot overflow.

A run is *still training* when

1. its directory holds a lock file (``*.lock``) on which some process holds a
   ``flock`` (read from ``/proc/locks``, without taking the lock, so a trainer
   starting at that moment never finds it busy), or, when there is no lock
   file or no ``/proc/locks``,
2. one of its log files or ``metadata.json`` was modified within the last
   :data:`LIVE_WINDOW` seconds.

A multi-seed run is still training while any of its seeds is.

Listing runs reads each training log's last line only (its ``total_steps``
and ``episode``); a run's series reads the log in pages, then what is appended.
Each log has its own lock; the store's lock is held only while walking the
root, never while a log is parsed.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ember_np.dashboard import tails
from ember_np.dashboard.tails import (
    EvalLog,
    JsonlTail,
    TrainLog,
    count,
    power_of_two_above,
    real,
    unscale,
)
from ember_np.stats import iqm_curve

__all__ = ["LIVE_WINDOW", "EvalLog", "JsonlTail", "RunStore", "TrainLog"]

LIVE_WINDOW = 60.0  # seconds since the last write for a run without a lock to count as live
SMOOTH_EPISODES = 20  # episodes in each seed's moving mean before the IQM across seeds
IQM_POINTS = 200  # env-step grid of the multi-seed reward curve
BOOTSTRAP_RESAMPLES = 1_000
CONFIDENCE = 0.95

_SEED_DIR = re.compile(r"^seed_(\d+)$")
_JSON_NUMBERS = frozenset((int, float))  # exact types: a JSON true/false (bool) is not a number
_MAX_FLOAT = sys.float_info.max
_MAX_COUNT = 2**53  # whole numbers a browser's JSON.parse reads exactly


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

    Listing a run (:meth:`refresh_summary`) reads its metadata, its
    evaluation log and only the last line of its training log; the training
    log is read in pages when a series is asked for (:meth:`train_page`).
    """

    TAIL_BYTES = 16_384  # enough for the last line of a training log

    def __init__(self, directory: Path, seed: int | None, root: Path) -> None:
        self.dir = directory
        self.seed = seed
        self.root = root
        self.train = TrainLog(directory / "train_episodes.jsonl", root)
        self.eval = EvalLog(directory / "eval_episodes.jsonl", root)
        self.metadata: dict[str, Any] = {}
        self._meta_mtime = -1.0
        self._train_stat: tuple[int, int] | None = None  # (inode, size) of the last tail read
        self._train_mtime = 0.0
        self._last_train_row: dict[str, Any] | None = None
        self._lock = threading.Lock()  # the summary's state; each log has its own

    def refresh_summary(self) -> None:
        """Read a changed metadata.json, the new evaluation rows and the training log's end."""
        with self._lock:
            self._read_train_tail()
            self.refresh_eval()
            try:
                mtime = os.stat(self.dir / "metadata.json").st_mtime
            except OSError:
                return
            if mtime != self._meta_mtime:
                try:
                    meta = json.loads((self.dir / "metadata.json").read_text(encoding="utf-8"))
                except (OSError, ValueError, RecursionError):
                    return  # keep the last good metadata
                if isinstance(meta, dict):
                    self.metadata, self._meta_mtime = meta, mtime

    def refresh_eval(self) -> None:
        with self.eval.lock:
            self.eval.refresh(tails.PAGE_BYTES)

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

    def train_page(self, cursor: tuple[int, int] | None) -> tuple[dict[str, Any], list[int], bool]:
        """The training rows after ``cursor`` ((inode, byte offset) from an earlier page).

        Reads at most :data:`~ember_np.dashboard.tails.PAGE_BYTES` more of the
        log and sends the rows of at most that many log bytes. A cursor into another file (a rewound
        log) or beyond what was read (a restarted server) counts as none: the
        page then starts at row 0 (``from``), and the client starts over.
        Returns the columns, the next cursor and whether rows are left.
        """
        log = self.train
        with log.lock:
            size = log.sync()
            start = 0
            if cursor is not None and cursor[0] == log.inode and cursor[1] <= log.offset:
                start = cursor[1]
            log.read(size, start + tails.PAGE_BYTES - log.offset)
            k = log.rows_up_to(start)
            m = max(log.rows_up_to(start + tails.PAGE_BYTES), min(k + 1, len(log)))
            cols = log.to_dict(k, m)
            end = log.ends[m - 1] if m < len(log) else log.offset
            more = m < len(log) or log.more
            return cols, [log.inode or 0, max(end, start)], more

    def eval_page(self, cursor: tuple[int, int] | None) -> tuple[dict[str, Any], list[int], bool]:
        """The evaluation points created or changed after ``cursor``; as :meth:`train_page`."""
        log = self.eval
        with log.lock:
            log.refresh(tails.PAGE_BYTES)
            start = 0
            if cursor is not None and cursor[0] == log.inode and cursor[1] <= log.offset:
                start = log.changed_after(cursor[1])
            return log.to_dict(start), [log.inode or 0, log.offset], log.more

    def reward_curve(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the training ``steps`` and ``reward`` columns read so far."""
        with self.train.lock:
            return np.array(self.train.cols["steps"]), np.array(self.train.cols["reward"])

    def eval_means(self) -> dict[int, float]:
        with self.eval.lock:
            return self.eval.means()

    def _from_last_row_or_metadata(self, row_key: str, meta_key: str, offset: int) -> int:
        row = self._last_train_row or {}
        logged = count(row.get(row_key))
        meta = count(self.metadata.get(meta_key))
        return max(logged + offset if logged is not None else 0, meta or 0)

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
        best = real(self.metadata.get("best_eval_reward"))
        evals = list(self.eval_means().values())
        if evals:
            top = max(evals)
            best = top if best is None else max(best, top)
        return best


# -- multi-seed statistics ----------------------------------------------------------


def _iqm_band(table: np.ndarray) -> dict[str, list[float]] | None:
    """IQM across seeds at each point, with its bootstrap band, as JSON lists.

    table : ndarray of float64, shape (points, seeds). The band is
    :func:`ember_np.stats.iqm_curve` (seeds resampled, seeded, so it does not
    jitter between refreshes of unchanged data), computed on the table scaled
    by a power of two so that no sum overflows; None when a value is not finite.
    """
    if not np.all(np.isfinite(table)):
        return None
    e = power_of_two_above(table)
    band = iqm_curve(np.ldexp(table.T, -e), confidence=CONFIDENCE, reps=BOOTSTRAP_RESAMPLES)
    return {"iqm": unscale(band.value, e).tolist(), "lo": unscale(band.low, e).tolist(),
            "hi": unscale(band.high, e).tolist()}  # fmt: skip


def _moving_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last ``window`` values at each index (fewer at the start).

    values : ndarray of float64, finite. The running sums are taken of the
    values scaled by a power of two (at most 1 in size), so they cannot overflow.
    """
    e = power_of_two_above(values)
    c = np.cumsum(np.concatenate(([0.0], np.ldexp(values, -e))))
    idx = np.arange(1, values.size + 1)
    start = np.maximum(idx - window, 0)
    return unscale((c[idx] - c[start]) / (idx - start), e)


def _iqm_curves(seeds: list[SeedRun]) -> dict[str, Any]:
    """IQM and band of the seeds' smoothed training reward and of their eval reward.

    Training: each seed's moving mean of :data:`SMOOTH_EPISODES` episode
    rewards, read at :data:`IQM_POINTS` env steps between the first step all
    seeds have reached and the last one all have reached (the latest episode
    at or before each). Evaluation: the steps every seed was evaluated at.
    """
    out: dict[str, Any] = {"train": None, "eval": None}
    curves: list[tuple[np.ndarray, np.ndarray]] = []
    for s in seeds:
        xs, ys = s.reward_curve()
        keep = ~np.isnan(ys)
        if not keep.any():
            curves = []
            break
        curves.append((xs[keep], _moving_mean(ys[keep], SMOOTH_EPISODES)))
    if curves:
        start = max(xs[0] for xs, _ in curves)
        stop = min(xs[-1] for xs, _ in curves)
        if stop >= start:
            grid = np.unique(np.linspace(start, stop, IQM_POINTS).round())
            table = np.empty((grid.size, len(curves)))
            for j, (xs, ys) in enumerate(curves):
                table[:, j] = ys[np.maximum(np.searchsorted(xs, grid, side="right") - 1, 0)]
            band = _iqm_band(table)
            if band is not None:
                out["train"] = {"steps": grid.astype(int).tolist(), **band}
    evals = [s.eval_means() for s in seeds]
    common = sorted(set.intersection(*(set(e) for e in evals))) if evals else []
    if common:
        table = np.array([[e[x] for e in evals] for x in common], dtype=np.float64)
        band = _iqm_band(table)
        if band is not None:
            out["eval"] = {"steps": common, **band}
    return out


# -- the root -----------------------------------------------------------------------


def _parse_cursor(raw: str | None) -> dict[str, tuple[int, int, int, int]]:
    """A series cursor from the query string: {seed key: (train inode, offset, eval inode,
    offset)}; anything malformed reads as no cursor (the whole series is sent again)."""
    if not raw or len(raw) > 100_000:
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    if type(data) is not dict:
        return {}
    out = {}
    for key, value in data.items():
        if (
            type(value) is list
            and len(value) == 4
            and all(type(v) is int and v >= 0 for v in value)
        ):
            out[key] = tuple(value)
    return out


def _seed_key(seed: int | None) -> str:
    return "-" if seed is None else str(seed)


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
        return tuple((s.train.generation, s.train.offset, s.eval.generation, s.eval.offset)
                     for s in self.seeds)  # fmt: skip

    def page(self, cursor: dict[str, tuple[int, int, int, int]]) -> dict[str, Any]:
        """Each seed's rows after ``cursor`` (see :meth:`SeedRun.train_page`); no ``iqm`` yet."""
        members, next_cursor, more = [], {}, False
        for s in self.seeds:
            key = _seed_key(s.seed)
            c = cursor.get(key)
            train, t_next, t_more = s.train_page(None if c is None else c[:2])
            evals, e_next, e_more = s.eval_page(None if c is None else c[2:])
            members.append({"seed": s.seed, "train": train, "eval": evals})
            next_cursor[key] = t_next + e_next
            more = more or t_more or e_more
        cursor_text = json.dumps(next_cursor, separators=(",", ":"))
        return {"id": self.id, "members": members, "iqm": None, "cursor": cursor_text,
                "more": more}  # fmt: skip


class RunStore:
    """The runs under one root, with every log file's reading state kept between requests.

    Thread-safe: the HTTP server's threads share one store. Its lock guards
    the walk of the root only; each log is read under its own lock.
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

    def _run_at(self, name: str, version: str, run_dir: Path) -> Run | None:
        """The run in ``root/name/version/run_dir`` as it is on disk now (None: not a run)."""
        rid = f"{name}/{version}/{run_dir.name}"
        if self._is_run_dir(run_dir):
            return Run(rid, name, version, run_dir.name, [self._seed_run(run_dir, None)], False)
        seeds = []
        for sub in self._subdirs(run_dir):
            m = _SEED_DIR.match(sub.name)
            if m and self._is_run_dir(sub):
                seeds.append(self._seed_run(sub, int(m.group(1))))
        if not seeds:
            return None
        seeds.sort(key=lambda s: -1 if s.seed is None else s.seed)  # each has its number
        return Run(rid, name, version, run_dir.name, seeds, True)

    def _scan(self) -> None:
        runs: dict[str, Run] = {}
        for name in self._subdirs(self.root):
            for version in self._subdirs(name):
                for run_dir in self._subdirs(version):
                    run = self._run_at(name.name, version.name, run_dir)
                    if run is not None:
                        runs[run.id] = run
        live = {s.dir for r in runs.values() for s in r.seeds}
        self._seed_runs = {p: s for p, s in self._seed_runs.items() if p in live}
        self._runs = runs

    def list_runs(self) -> list[dict[str, Any]]:
        """Every run under the root, newest first, after reading what was appended."""
        with self._lock:
            self._scan()
            runs = list(self._runs.values())
        now = time.time()
        for run in runs:
            for s in run.seeds:
                s.refresh_summary()
        out = [r.summary(now) for r in runs]
        out.sort(key=lambda r: (r["run_id"], r["id"]), reverse=True)
        return out

    def series(self, run_id: str, cursor: str | None = None) -> dict[str, Any] | None:
        """One page of ``run_id``'s series after ``cursor`` (None: no such run under the root).

        The page has ``members`` (per seed ``train`` and ``eval`` columns, each
        with ``from``: the index of its first row, which replaces the client's
        rows from there on), ``iqm`` (multi-seed runs: over the rows read so
        far; None on a page with ``more``), ``multi_seed``, ``cursor`` (pass it back
        for the next page) and ``more`` (rows are left: ask again at once).
        """
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:  # not seen yet: a run created since the last listing
                self._scan()
                run = self._runs.get(run_id)
            elif run.multi_seed:  # seeds written since the last listing count too
                fresh = self._run_at(run.name, run.version, self.root / run_id)
                if fresh is not None:
                    run = self._runs[run_id] = fresh
        if run is None:
            return None
        page = run.page(_parse_cursor(cursor))
        page["multi_seed"] = run.multi_seed
        if run.multi_seed and not page["more"]:  # the client draws once it has every page
            state = run.state()
            with self._lock:
                cached = self._iqm.get(run_id)
            if cached is None or cached[0] != state:
                cached = (state, _iqm_curves(run.seeds))
                with self._lock:
                    self._iqm[run_id] = cached
            page["iqm"] = cached[1]
        return page
