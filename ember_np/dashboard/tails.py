"""Incremental reads of a run's JSONL logs, kept as columns (the dashboard's data layer).

Each log file is read incrementally (:class:`JsonlTail`): the byte offset of
the last complete line is kept, and a refresh reads only what was appended
after it, in reads of at most :data:`PAGE_BYTES` (a longer line is skipped as
malformed). A file whose (inode, size) is unchanged is not opened again; one
that shrank or was replaced is read again from the start. A last line without
its newline (a writer mid-``write``) stays unread until it is completed; a
line that is not a JSON object with the expected numbers is skipped.

What is kept of a log is its columns (:class:`TrainLog`: five float64 arrays
and each row's end offset; :class:`EvalLog`: one mean per evaluation step),
never its rows. :mod:`ember_np.dashboard.logs` builds runs and series on them.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
from array import array
from bisect import bisect_right
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "PAGE_BYTES",
    "EvalLog",
    "JsonlTail",
    "TrainLog",
    "count",
    "json_floats",
    "power_of_two_above",
    "real",
    "unscale",
]

PAGE_BYTES = 4 << 20  # log bytes read, and sent as columns, per file per series request

_JSON_NUMBERS = frozenset((int, float))  # exact types: a JSON true/false (bool) is not a number
_MAX_FLOAT = sys.float_info.max
_MAX_COUNT = 2**53  # whole numbers a browser's JSON.parse reads exactly


def real(v: Any) -> float | None:
    """``v`` as a finite float64; None for anything else (bool, NaN, inf, an int beyond float64)."""
    t = type(v)
    if t is float:
        return v if v - v == 0 else None  # v - v is NaN for inf and NaN
    if t is int:
        return float(v) if -_MAX_FLOAT <= v <= _MAX_FLOAT else None
    return None


def count(v: Any) -> int | None:
    """``v`` as a whole number within +-2**53 (a float is truncated); None for anything else."""
    t = type(v)
    if (t is int or t is float) and -_MAX_COUNT <= v <= _MAX_COUNT:  # False for NaN
        return int(v)
    return None


def json_floats(values: array) -> list[float | None]:
    """Float64 column values as JSON: NaN (a missing value) as None."""
    return [None if v != v else v for v in values.tolist()]


def power_of_two_above(a: np.ndarray) -> int:
    """``e`` with ``|a| * 2**-e < 1`` everywhere (0 for an empty or all-zero ``a``).

    Scaling by a power of two is exact, so statistics of ``a * 2**-e`` scaled
    back equal those of ``a`` wherever the latter do not overflow.
    """
    top = float(np.max(np.abs(a))) if a.size else 0.0
    return math.frexp(top)[1] if top > 0 else 0


def unscale(a: np.ndarray, e: int) -> np.ndarray:
    return np.clip(np.ldexp(a, e), -_MAX_FLOAT, _MAX_FLOAT)  # rounding at the very top of float64


# -- incremental JSONL ------------------------------------------------------------


class JsonlTail:
    """The rows of a growing JSONL file, read incrementally.

    :meth:`refresh` reads only the bytes appended since the last call. A file
    that shrank or was replaced (another inode: ``TrainingRun.rewind_logs``
    rewrites the logs atomically) is read again from the start, and
    ``generation`` goes up so that whatever was built from the old rows is
    rebuilt. With ``root``, a file that resolves outside it (a symlink out)
    reads as absent. Each parsed object goes to :meth:`_take` (here: appended
    to ``rows``; the column readers keep columns instead). Callers that share
    one reader between threads hold its ``lock``.
    """

    def __init__(self, path: Path, root: Path | None = None) -> None:
        self.path = path
        self.root = root
        self.rows: list[dict[str, Any]] = []
        self.offset = 0  # bytes up to the end of the last complete line read
        self.skipped = 0  # malformed lines seen
        self.generation = 0
        self.mtime = 0.0
        self.more = False  # complete lines are left unread (the last refresh had a budget)
        self.inode: int | None = None
        self.lock = threading.Lock()

    def _reset(self, inode: int | None) -> None:
        if self.rows or self.offset:
            self.generation += 1
        self.rows, self.offset, self.skipped, self.inode = [], 0, 0, inode

    def sync(self) -> int:
        """Notice a replaced, shrunk or vanished file (and reset); returns the file's size."""
        try:
            if self.root is not None and not self.path.resolve().is_relative_to(self.root):
                raise FileNotFoundError(self.path)
            st = os.stat(self.path)
        except OSError:
            if self.inode is not None or self.offset:
                self._reset(None)  # the file is gone: so are its rows
            self.mtime, self.more = 0.0, False
            return 0
        self.mtime = st.st_mtime
        if st.st_ino != self.inode or st.st_size < self.offset:
            self._reset(st.st_ino)
        return st.st_size

    def refresh(self, max_bytes: int | None = None) -> None:
        """Read the complete lines appended since the last call (at most ``max_bytes`` of them)."""
        self.read(self.sync(), max_bytes)

    def read(self, size: int, max_bytes: int | None = None) -> None:
        """Read complete lines from ``offset`` towards ``size`` (from :meth:`sync`),
        within ``max_bytes``."""
        budget = math.inf if max_bytes is None else max_bytes
        self.more = False
        if size <= self.offset:
            return
        try:
            with open(self.path, "rb") as f:
                while self.offset < size:
                    if budget <= 0:
                        self.more = True
                        return
                    f.seek(self.offset)
                    chunk = f.read(min(PAGE_BYTES, size - self.offset))
                    end = chunk.rfind(b"\n")
                    if end >= 0:
                        self._parse_chunk(chunk[: end + 1])
                        budget -= end + 1
                    elif len(chunk) < PAGE_BYTES:
                        return  # only a torn line so far: wait for its newline
                    elif not self._skip_long_line(f, size):
                        return  # a huge line still without its newline
        except OSError:
            return

    def _skip_long_line(self, f: Any, size: int) -> bool:
        """Skip a line longer than PAGE_BYTES (malformed: rows are ~200 bytes),
        without holding it."""
        pos = self.offset + PAGE_BYTES
        while pos < size:
            f.seek(pos)
            block = f.read(min(PAGE_BYTES, size - pos))
            nl = block.find(b"\n")
            if nl >= 0:
                self.offset = pos + nl + 1
                self.skipped += 1
                return True
            pos += len(block)
        return False

    def _parse_chunk(self, data: bytes) -> None:
        """Parse whole lines (``data`` ends with a newline) and advance ``offset`` past them."""
        lines, ends = [], []
        pos = self.offset
        for line in data.split(b"\n")[:-1]:
            pos += len(line) + 1
            if line.strip():
                lines.append(line)
                ends.append(pos)
        rows, row_ends = self.parse_lines(lines, ends)
        self.offset += len(data)
        self._take(rows, row_ends)

    def parse_lines(
        self, lines: list[bytes], ends: list[int]
    ) -> tuple[list[dict[str, Any]], list[int]]:
        """The lines that are JSON objects, with the end offsets of their lines.

        :meth:`read` calls it once per chunk of new complete lines, so every
        line of the file passes through it once (until the file is replaced).

        Parameters
        ----------
        lines : list of bytes
            Non-blank lines, without their newlines.
        ends : list of int
            Each line's end offset in the file (past its newline).

        Returns
        -------
        rows : list of dict
            The lines that parse as JSON objects, in order; each other line
            adds one to ``skipped``.
        row_ends : list of int
            Their entries of ``ends``.
        """
        # Whole lines that each look like one object are parsed in one call (a
        # few times faster than a call per line); any doubt, and each line is
        # parsed on its own, the malformed ones skipped.
        if all(line.lstrip()[:1] == b"{" and line.rstrip()[-1:] == b"}" for line in lines):
            try:
                rows = json.loads(b"[" + b",".join(lines) + b"]")
            except (ValueError, UnicodeDecodeError, RecursionError):
                rows = None
            if rows is not None and len(rows) == len(lines):
                if all(isinstance(r, dict) for r in rows):
                    return rows, ends
        out, out_ends = [], []
        for line, end in zip(lines, ends):
            try:
                row = json.loads(line)
            except (ValueError, UnicodeDecodeError, RecursionError):
                self.skipped += 1
                continue
            if isinstance(row, dict):
                out.append(row)
                out_ends.append(end)
            else:
                self.skipped += 1
        return out, out_ends

    def _take(self, rows: list[dict[str, Any]], ends: list[int]) -> None:
        self.rows.extend(rows)


class TrainLog(JsonlTail):
    """The training log as columns; rows without a numeric reward and a count length are skipped.

    Columns (float64 arrays, NaN for a missing value): ``steps`` (the row's
    ``total_steps``, or the running sum of lengths for logs written without
    it), ``reward`` (missing when not finite, e.g. 1e400), ``length``,
    ``epsilon``, ``loss``; ``ends``: each kept row's end offset in the file.
    """

    COLUMNS = ("steps", "reward", "length", "epsilon", "loss")

    def __init__(self, path: Path, root: Path | None = None) -> None:
        super().__init__(path, root)
        self._clear()

    def _clear(self) -> None:
        self.ends = array("q")
        self.cols = {name: array("d") for name in self.COLUMNS}
        self._total = 0

    def _reset(self, inode: int | None) -> None:
        super()._reset(inode)
        self._clear()

    def _take(self, rows: list[dict[str, Any]], ends: list[int]) -> None:
        nan = math.nan
        steps: list[int] = []
        reward: list[float] = []
        length: list[int] = []
        epsilon: list[float] = []
        loss: list[float] = []
        kept: list[int] = []
        for row, end in zip(rows, ends):
            r, n = row.get("total_reward"), count(row.get("length"))
            if type(r) not in _JSON_NUMBERS or n is None:
                continue
            self._total += n
            s = count(row.get("total_steps"))
            steps.append(self._total if s is None else s)
            r = real(r)
            reward.append(nan if r is None else r)
            length.append(n)
            extras = row.get("extras")
            if type(extras) is dict:
                e, q = real(extras.get("epsilon")), real(extras.get("loss"))
                epsilon.append(nan if e is None else e)
                loss.append(nan if q is None else q)
            else:
                epsilon.append(nan)
                loss.append(nan)
            kept.append(end)
        columns: tuple[list[int] | list[float], ...] = (steps, reward, length, epsilon, loss)
        for name, values in zip(self.COLUMNS, columns):
            self.cols[name].extend(values)
        self.ends.extend(kept)

    def __len__(self) -> int:
        return len(self.ends)

    def to_dict(self, start: int = 0, stop: int | None = None) -> dict[str, Any]:
        """Rows ``start:stop`` as JSON columns (steps and lengths as ints, missing as None)."""
        c = {name: col[start:stop] for name, col in self.cols.items()}
        return {"from": start,
                "steps": [int(v) for v in c["steps"].tolist()],
                "reward": json_floats(c["reward"]),
                "length": [int(v) for v in c["length"].tolist()],
                "epsilon": json_floats(c["epsilon"]),
                "loss": json_floats(c["loss"])}  # fmt: skip

    def rows_up_to(self, offset: int) -> int:
        """How many kept rows end at or before byte ``offset``."""
        return bisect_right(self.ends, offset)


class EvalLog(JsonlTail):
    """Mean greedy reward at each evaluation step (episodes grouped by ``total_steps_at_eval``).

    Points are kept in the order their step first appears in the log (the
    order training writes them). Each mean is updated as
    ``m += r/n - m/n``: no sum is kept, so 1e308 twice averages to 1e308.
    """

    def __init__(self, path: Path, root: Path | None = None) -> None:
        super().__init__(path, root)
        self._clear()

    def _clear(self) -> None:
        self._index: dict[int, int] = {}
        self.steps: list[int] = []
        self.mean: list[float] = []
        self.count: list[int] = []
        self.last: list[int] = []  # end offset of the last row counted in each point

    def _reset(self, inode: int | None) -> None:
        super()._reset(inode)
        self._clear()

    def _take(self, rows: list[dict[str, Any]], ends: list[int]) -> None:
        for row, end in zip(rows, ends):
            s, r = count(row.get("total_steps_at_eval")), real(row.get("total_reward"))
            if s is None or r is None:
                continue
            i = self._index.get(s)
            if i is None:
                self._index[s] = len(self.steps)
                self.steps.append(s)
                self.mean.append(r)
                self.count.append(1)
                self.last.append(end)
                continue
            n = self.count[i] + 1
            m = self.mean[i]
            self.mean[i] = min(max(m - m / n + r / n, -_MAX_FLOAT), _MAX_FLOAT)
            self.count[i] = n
            self.last[i] = end

    def changed_after(self, offset: int) -> int:
        """The first point that a row after byte ``offset`` created or changed (len: none)."""
        return next((i for i, end in enumerate(self.last) if end > offset), len(self.last))

    def means(self) -> dict[int, float]:
        return dict(zip(self.steps, self.mean))

    def to_dict(self, start: int = 0) -> dict[str, Any]:
        return {"from": start, "steps": self.steps[start:], "reward": self.mean[start:],
                "episodes": self.count[start:]}  # fmt: skip
