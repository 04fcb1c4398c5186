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
"""

from __future__ import annotations

import json
import math
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ember_np.checkpoint import atomic_write_text
from ember_np.stats import EpisodeRecord

__all__ = ["TrainingRun"]

_RUN_ID = re.compile(r"^(\d{8}_\d{6})(?:_(\d+))?$")
_STEP_FILE = re.compile(r"^step_(\d+)\.npz$")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _check_name(kind: str, value: str) -> str:
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

    # -- creating and reopening -------------------------------------------------
    @classmethod
    def create(cls, name: str, version: str, root: str | os.PathLike[str] = "runs") -> TrainingRun:
        """Make ``root/name/version/<YYYYMMDD_HHMMSS>/`` and its files.

        Two runs started in the same second get distinct directories
        (``..._1``, ``..._2``). An unwritable root raises ``OSError`` naming
        the path, before any training happens.
        """
        _check_name("name", name)
        _check_name("version", str(version))
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
        (directory / "checkpoints").mkdir()
        now = _now()
        metadata = {
            "name": name,
            "version": str(version),
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
        try:
            metadata = json.loads((p / "metadata.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{p / 'metadata.json'} is not valid JSON: {exc}") from None
        for key in ("name", "version", "run_id", "total_steps", "total_episodes"):
            if key not in metadata:
                raise ValueError(f"{p / 'metadata.json'} lacks {key!r}")
        metadata.setdefault("best_eval_reward", None)
        (p / "checkpoints").mkdir(exist_ok=True)
        # A process killed mid-write leaves its temporary file behind (the
        # target itself is intact): remove those leftovers.
        for stale in list(p.glob(".*.tmp")) + list((p / "checkpoints").glob(".*.tmp")):
            stale.unlink(missing_ok=True)
        return cls(p, metadata)

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
        if which == "best":
            return self.best_checkpoint_path()
        if which == "latest":
            return self.latest_checkpoint_path()
        if which.startswith("step_") and which[5:].isdigit():
            return self.checkpoint_path(int(which[5:]))
        raise ValueError(f"a checkpoint is best, latest or step_N, got {which!r}")

    def step_checkpoints(self) -> list[tuple[int, Path]]:
        """Numbered checkpoints on disk, sorted by step."""
        found = []
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
    def _append(self, filename: str, row: dict[str, Any]) -> None:
        line = json.dumps(row, allow_nan=True) + "\n"
        # One write() of the whole line on an O_APPEND file, then flush + fsync:
        # a crash can only lose whole trailing lines, never leave half of one.
        with open(self._dir / filename, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def log_train_episode(
        self, record: EpisodeRecord, episode: int | None = None, total_steps: int | None = None
    ) -> None:
        """Append one training episode to ``train_episodes.jsonl``."""
        row = record.to_dict()
        if episode is not None:
            row["episode"] = int(episode)
        if total_steps is not None:
            row["total_steps"] = int(total_steps)
        self._append("train_episodes.jsonl", row)

    def log_eval_episode(self, record: EpisodeRecord, total_steps: int) -> None:
        """Append one evaluation episode, tagged with ``total_steps_at_eval``."""
        row = record.to_dict()
        row["total_steps_at_eval"] = int(total_steps)
        self._append("eval_episodes.jsonl", row)

    def read_train_episodes(self) -> list[dict[str, Any]]:
        return self._read_jsonl("train_episodes.jsonl")

    def read_eval_episodes(self) -> list[dict[str, Any]]:
        return self._read_jsonl("eval_episodes.jsonl")

    def _read_jsonl(self, filename: str) -> list[dict[str, Any]]:
        path = self._dir / filename
        if not path.exists():
            return []
        rows = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rows.append(json.loads(line))
        return rows

    def rewind_logs(self, total_steps: int) -> int:
        """Make the JSONL logs agree with a checkpoint taken at ``total_steps``.

        Rows logged after that step (training that happened after the
        checkpoint, then was lost with the process) move to
        ``train_episodes.rolled_back.jsonl`` / ``eval_episodes.rolled_back.jsonl``,
        so nothing is deleted and a resumed run does not log the same steps
        twice. Returns the number of training episodes that remain.
        """
        kept_train = 0
        for name, key in (
            ("train_episodes", "total_steps"),
            ("eval_episodes", "total_steps_at_eval"),
        ):
            path = self._dir / f"{name}.jsonl"
            if not path.exists():
                continue
            keep, drop = [], []
            for line in path.read_text(encoding="utf-8").splitlines():
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    drop.append(line)  # a torn last line from a crash
                    continue
                (keep if int(row.get(key, 0)) <= total_steps else drop).append(line)
            if name == "train_episodes":
                kept_train = len(keep)
            if not drop:
                continue
            with open(self._dir / f"{name}.rolled_back.jsonl", "a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in drop))
                f.flush()
                os.fsync(f.fileno())
            atomic_write_text(path, "".join(line + "\n" for line in keep))
        return kept_train

    def write_config(self, config: dict[str, Any]) -> None:
        """Write ``config.json`` (atomically)."""
        atomic_write_text(self._dir / "config.json", json.dumps(config, indent=2, sort_keys=True))

    def read_config(self) -> dict[str, Any] | None:
        path = self._dir / "config.json"
        return json.loads(path.read_text()) if path.exists() else None

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
