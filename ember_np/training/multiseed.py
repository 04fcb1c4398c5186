"""Many seeds in one call: K independent training runs on W worker processes.

:func:`train_seeds` (and ``ember-np train ENV_ID --seeds K --workers W``)
trains every seed as an ordinary :class:`~ember_np.TrainingRun` under one
parent directory::

    <root>/<name>/<version>/<YYYYMMDD_HHMMSS>/
        seeds.json              what to train: env, config, steps, the seeds
        seed_<s>/               exactly the run ``ember-np train ... --seed s`` makes
            ...                 (config.json, checkpoints/, *.jsonl, metadata.json)
            result.json         written last: the seed finished

Each seed runs :func:`train_seed`, the same steps in the same order as the
single-seed command line (``cli._train_loop``): chunks of ``PROGRESS_CHUNK``
env steps, a greedy evaluation every ``eval_every`` steps, a final one. Same
seed, same options: the same numbers in the logs and checkpoints
(``tests/test_multiseed.py`` compares the files).

Why processes, not threads or numba's parallel loops in one process: the
kernels release the GIL, but everything between compiled chunks (episode
records, JSONL, checkpoints, every evaluation on the Python path) holds it;
and a process that dies (a SIGKILL, the OOM killer) takes only its own seed
with it. Workers are spawned (no fork of a process that may hold OpenBLAS
threads or locks), with one BLAS thread each (``OPENBLAS_NUM_THREADS=1`` and
friends, set in the environment the child starts with, before NumPy loads).
``bench/multiseed.py`` measures both ways (README, "Many seeds").

A worker that dies leaves the other seeds untouched (every file of a run is
written atomically); its seed has no ``result.json``, and
:func:`resume_seeds` (``ember-np resume PARENT``) trains the seeds that did
not finish again from the start (a partial attempt is kept, renamed
``seed_<s>.interrupted``), so every seed is still exactly the run
``--seed s`` makes.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from ember_np.checkpoint import atomic_write_text
from ember_np.dqn.config import DqnConfig
from ember_np.training.run import DirectoryLock

__all__ = [
    "MAX_SEED",
    "MAX_SEEDS",
    "MultiSeedResult",
    "SeedResult",
    "SeedSpec",
    "is_multiseed",
    "format_seeds",
    "load_multiseed",
    "parent_lock",
    "parse_seeds",
    "resume_seeds",
    "train_seed",
    "train_seeds",
]

SPEC_FILE = "seeds.json"
RESULT_FILE = "result.json"
#: Environment of every worker: one thread per BLAS / OpenMP library, so W
#: workers use W cores and do not oversubscribe them.
WORKER_THREADS = {
    var: "1"
    for var in (
        "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
        "NUMBA_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
    )
}  # fmt: skip


@dataclass(frozen=True)
class SeedSpec:
    """What every seed of a multi-seed run trains: the options of ``ember-np train``.

    ``env_id`` is the environment actually made (``ember_np/CartPole-v1`` for
    the command line's default); ``preset`` is recorded in each run's
    ``config.json`` as the single-seed command records it.
    """

    env_id: str
    config: DqnConfig
    steps: int
    name: str
    version: str
    preset: str | None = None
    eval_every: int = 10_000
    eval_episodes: int = 10
    checkpoint_freq: int = 10_000
    keep: int = 5

    def run_config(self, seed: int) -> dict[str, Any]:
        """The seed's ``config.json``: what ``ember-np train --seed seed`` writes."""
        return {
            "env_id": self.env_id,
            "preset": self.preset,
            "seed": seed,
            "steps": self.steps,
            "eval_every": self.eval_every,
            "eval_episodes": self.eval_episodes,
            "checkpoint_freq": self.checkpoint_freq,
            "keep": self.keep,
            "dqn": self.config.to_dict(),
        }

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["config"] = self.config.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SeedSpec:
        return cls(**{**data, "config": DqnConfig.from_dict(data["config"])})


@dataclass(frozen=True)
class SeedResult:
    """One finished seed.

    final_reward : float
        Mean reward of the greedy evaluation after the last step.
    best_eval_reward : float
        Best mean of the periodic greedy evaluations (``best.npz``).
    curve : list of (step, mean eval reward, seconds since the seed started)
        Every periodic evaluation, then the final one.
    """

    seed: int
    run_dir: Path
    final_reward: float
    best_eval_reward: float
    curve: list[tuple[int, float, float]] = field(default_factory=list)
    train_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["run_dir"] = str(self.run_dir)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], run_dir: Path) -> SeedResult:
        curve = [(int(s), float(m), float(t)) for s, m, t in data["curve"]]
        return cls(
            int(data["seed"]), run_dir, float(data["final_reward"]),
            float(data["best_eval_reward"]), curve, float(data["train_seconds"]),
        )  # fmt: skip


@dataclass
class MultiSeedResult:
    """The seeds of one multi-seed run: ``runs`` finished (by seed), ``failed`` not."""

    parent: Path
    spec: SeedSpec
    runs: list[SeedResult]
    failed: list[int]
    wall_seconds: float = math.nan

    def scores(self, which: str = "final") -> list[float]:
        """Each finished seed's ``final_reward`` (``"final"``) or ``best_eval_reward``."""
        if which not in ("final", "best"):
            raise ValueError(f"which must be 'final' or 'best', got {which!r}")
        return [r.final_reward if which == "final" else r.best_eval_reward for r in self.runs]

    def summary(self) -> str:
        """A table: IQM [95% CI], median and mean of the final and best rewards."""
        from ember_np.stats import bootstrap_ci, iqm

        n = len(self.runs) + len(self.failed)
        head = (f"{self.spec.env_id}: {len(self.runs)} of {n} seeds finished, "
                f"{self.spec.steps:,} steps each")  # fmt: skip
        if math.isfinite(self.wall_seconds):
            head += f", {self.wall_seconds:.1f} s"
        lines = [head]
        if self.runs:
            lines.append(f"  {'':<6} {'IQM [95% CI]':>28} {'median':>9} {'mean':>9}")
            for which in ("final", "best"):
                x = self.scores(which)
                low, high = bootstrap_ci(x, "iqm")
                ci = f"{iqm(x):.2f} [{low:.2f}, {high:.2f}]"
                lines.append(f"  {which:<6} {ci:>28} {_median(x):>9.2f} {sum(x) / len(x):>9.2f}")
        if self.failed:
            lines.append(
                f"  seeds that did not finish: {format_seeds(self.failed)} "
                f"(ember-np resume {self.parent} trains them)"
            )
        lines.append(f"  runs: {self.parent}/seed_<s>/")
        return "\n".join(lines)


def _median(x: Sequence[float]) -> float:
    s = sorted(x)
    k = len(s) // 2
    return s[k] if len(s) % 2 else (s[k - 1] + s[k]) / 2


def format_seeds(seeds: Iterable[int], most: int = 12) -> str:
    """Seeds as ``--seeds`` takes them, runs of consecutive seeds as ranges: ``0-19``,
    ``1,4,7``, ``0-2,5,9-11``. Beyond ``most`` parts, the first and last few are
    shown around ``...``, with the count (the full list is in ``seeds.json``)."""
    ordered = sorted(seeds)
    parts: list[str] = []
    start = 0
    for i in range(1, len(ordered) + 1):
        if i == len(ordered) or ordered[i] != ordered[i - 1] + 1:
            first, last = ordered[start], ordered[i - 1]
            parts.append(str(first) if first == last else f"{first}-{last}")
            start = i
    if len(parts) <= most:
        return ",".join(parts)
    half = most // 2
    return f"{','.join(parts[:half])},...,{','.join(parts[-half // 2:])} ({len(ordered):,} seeds)"


#: The most seeds one multi-seed run trains (``--seeds``, ``train_seeds``).
MAX_SEEDS = 10_000
#: The largest seed: the largest a checkpoint stores as an int64 (``--seeds`` takes 0..MAX_SEED).
MAX_SEED = 2**63 - 1
_DIGITS = re.compile(r"[0-9]+")  # ASCII digits only (str.isdigit also takes "²")
_HUGE = 10**30  # stands for a number of more than 30 digits: above every bound


def _number(digits: str) -> int:
    """``int(digits)``, without converting thousands of digits that are out of range anyway."""
    return int(digits) if len(digits) <= 30 else _HUGE


def parse_seeds(text: str) -> list[int]:
    """``"20"`` -> seeds 0..19; ``"5-9"`` -> 5..9; ``"1,4,7"`` (ranges allowed in the list).

    At most :data:`MAX_SEEDS` seeds, each in ``0..MAX_SEED``: the count is
    worked out from the ranges before any list is built.

    Raises ValueError naming the text and the accepted forms, or the bound
    it exceeds.
    """
    shown = text if len(text) <= 60 else text[:57] + "..."  # a one-line message, always
    usage = f"--seeds expects a count (20), a range (0-19) or a list (1,4,7), got {shown!r}"
    too_many = ("--seeds {text!r} names {count} seeds, more than the {most:,} one run "
                "trains: give at most {most:,} (e.g. --seeds 0-{last})")  # fmt: skip
    text = text.strip()
    if _DIGITS.fullmatch(text):
        count = _number(text)
        if count < 1:
            raise ValueError(usage)
        if count > MAX_SEEDS:
            shown_count = f"{count:,}" if count < _HUGE else "more than 10**30"
            raise ValueError(too_many.format(text=shown, count=shown_count, most=MAX_SEEDS,
                                             last=MAX_SEEDS - 1))  # fmt: skip
        return list(range(count))
    ranges: list[tuple[int, int]] = []
    count = 0
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not _DIGITS.fullmatch(lo) or (dash and not _DIGITS.fullmatch(hi)):
            raise ValueError(usage)
        hi = hi if dash else lo
        first, last = _number(lo), _number(hi)
        if last > MAX_SEED:
            big = hi if last < _HUGE else "of more than 30 digits"
            raise ValueError(f"--seeds {shown!r}: seed {big} is above the largest seed "
                             f"{MAX_SEED} (2**63 - 1): use seeds 0..{MAX_SEED}")  # fmt: skip
        if last < first:
            raise ValueError(f"{usage} (a range must go up: {first}-{last})")
        ranges.append((first, last))
        count += last - first + 1
        if count > MAX_SEEDS:
            break  # the rest can only add seeds
    if count > MAX_SEEDS:
        total = sum(b - a + 1 for a, b in ranges)  # the ranges read so far
        raise ValueError(too_many.format(text=shown, count=f"{total:,}", most=MAX_SEEDS,
                                         last=MAX_SEEDS - 1))  # fmt: skip
    seeds = [s for first, last in ranges for s in range(first, last + 1)]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds lists a seed twice: {shown!r}")
    return seeds


# -- one seed ---------------------------------------------------------------------


def train_seed(
    spec: SeedSpec,
    seed: int,
    run_dir: str | os.PathLike[str],
    on_steps: Callable[[int], None] | None = None,
) -> SeedResult:
    """Train one seed into the new run directory ``run_dir``; returns its result.

    The same run as ``ember-np train`` with ``--seed seed`` and ``spec``'s
    options: the same env, agent and trainer, chunks of ``PROGRESS_CHUNK``
    steps, a greedy evaluation every ``spec.eval_every`` steps and a final
    one. ``on_steps(n)`` is called after each chunk (progress). Writes
    ``result.json`` into the run directory last.
    """
    import gymnasium as gym

    from ember_np.cli import PROGRESS_CHUNK
    from ember_np.dqn.agent import DqnAgent
    from ember_np.training.run import TrainingRun
    from ember_np.training.trainer import DqnTrainer

    t0 = time.perf_counter()
    env = gym.make(spec.env_id)
    agent = DqnAgent.for_env(env, spec.config, seed=seed)
    run = TrainingRun.create_in(run_dir, spec.name, spec.version)
    run.write_config(spec.run_config(seed))
    trainer = DqnTrainer(env, agent, seed=seed, run=run, checkpoint_freq=spec.checkpoint_freq,
                         keep_checkpoints=spec.keep)  # fmt: skip
    curve: list[tuple[int, float, float]] = []
    next_eval = spec.eval_every
    while agent.total_steps < spec.steps:
        total = agent.total_steps
        chunk = min(PROGRESS_CHUNK, spec.steps - total, next_eval - total)
        trainer.train(chunk)
        if on_steps is not None:
            on_steps(chunk)
        if agent.total_steps >= next_eval:
            report = trainer.eval(spec.eval_episodes)
            curve.append((agent.total_steps, report.mean_reward, time.perf_counter() - t0))
            next_eval += spec.eval_every
    report = trainer.eval(spec.eval_episodes)
    curve.append((agent.total_steps, report.mean_reward, time.perf_counter() - t0))
    result = SeedResult(seed, run.dir, report.mean_reward, trainer.best_eval_reward, curve,
                        time.perf_counter() - t0)  # fmt: skip
    atomic_write_text(run.dir / RESULT_FILE, json.dumps(result.to_dict(), indent=1))
    return result


def _worker_main(conn: Any, spec_dict: dict[str, Any]) -> None:
    """A worker process: train the seeds the parent sends until it sends None."""
    from ember_np._blas import set_blas_threads

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent decides
    set_blas_threads(1)  # already so from OPENBLAS_NUM_THREADS; this BLAS may not read it
    spec = SeedSpec.from_dict(spec_dict)
    try:
        while True:
            job = conn.recv()
            if job is None:
                return
            seed, run_dir = job
            try:
                result = train_seed(spec, seed, run_dir, lambda n: conn.send(("steps", n)))
                conn.send(("done", result.to_dict()))
            except (BrokenPipeError, ConnectionResetError):
                raise
            except BaseException:  # noqa: BLE001  reported to the parent, which goes on
                conn.send(("error", seed, traceback.format_exc(limit=5)))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        # The parent is gone (killed): stop quietly. The seed in progress has no
        # result.json, so ``ember-np resume`` trains it again.
        return


# -- many seeds -------------------------------------------------------------------


def _make_parent(root: str | os.PathLike[str], name: str, version: str) -> Path:
    """``root/name/version/<YYYYMMDD_HHMMSS>[_k]/``, as TrainingRun.create names runs."""
    from ember_np.training.run import _check_name

    _check_name("name", name)
    _check_name("version", version)
    base = Path(root) / name / version
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot create the run directory under {base}: "
                      f"{exc.strerror}") from exc  # fmt: skip
    stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
    k = 0
    while True:
        parent = base / (stamp if k == 0 else f"{stamp}_{k}")
        try:
            parent.mkdir()
            return parent
        except FileExistsError:
            k += 1


def default_workers() -> int:
    """One worker per core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


#: Worker processes allowed per core: the seeds are CPU-bound, so more workers
#: than cores only share them; a few per core is room for a machine whose
#: affinity mask undercounts, not a reason to start thousands of processes.
WORKERS_PER_CORE = 4


def check_workers(workers: Any) -> int:
    """``workers`` as an int in 1 .. WORKERS_PER_CORE x cores, or ValueError saying why."""
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    limit = WORKERS_PER_CORE * default_workers()
    if workers > limit:
        raise ValueError(
            f"workers must be at most {limit} ({WORKERS_PER_CORE} per core on "
            f"{default_workers()} cores), got {workers}: each worker trains on one core, "
            "so more only share the cores; leave --workers out for one per core"
        )
    return int(workers)


def train_seeds(
    env_id: str,
    seeds: Iterable[int],
    *,
    config: DqnConfig | None = None,
    steps: int = 100_000,
    workers: int | None = None,
    root: str | os.PathLike[str] = "runs",
    name: str | None = None,
    version: str = "default",
    progress: bool = True,
    on_start: Callable[[Path], None] | None = None,
    **options: Any,
) -> MultiSeedResult:
    """Train ``seeds`` independently on ``workers`` processes; returns their results.

    Each seed is the run :func:`train_seed` makes (``ember-np train env_id
    --seed s`` with the same options), in ``<root>/<name>/<version>/<time>/seed_<s>/``.

    Parameters
    ----------
    env_id : str
        A gymnasium id, e.g. ``"ember_np/CartPole-v1"`` (compiled, fused training).
    seeds : iterable of int
        Distinct seeds in ``0..MAX_SEED`` (2**63 - 1), at most ``MAX_SEEDS`` (10,000).
    config : DqnConfig, optional
        Default ``DqnConfig()``.
    steps : int
        Env steps per seed.
    workers : int, optional
        Worker processes (default: one per core; never more than the seeds).
    root, name, version
        Where the parent directory goes (name defaults to ``env_id`` with
        ``/`` replaced by ``-``).
    **options
        ``preset`` (recorded in each run's config.json), ``eval_every``,
        ``eval_episodes``, ``checkpoint_freq``, ``keep``: as ``ember-np
        train``'s options (defaults 10,000, 10, 10,000, 5; see :class:`SeedSpec`).
    progress : bool
        One tqdm bar over all seeds' env steps (stderr).
    on_start : callable, optional
        Called with the parent directory once it exists, before training.

    Returns
    -------
    MultiSeedResult
        ``failed`` lists the seeds whose worker died or raised; their partial
        runs stay on disk, and :func:`resume_seeds` finishes them.
    """
    seeds = [int(s) for s in itertools.islice(seeds, MAX_SEEDS + 1)]  # never a huge list
    if not seeds:
        raise ValueError("seeds must name at least one seed, got none")
    if len(seeds) > MAX_SEEDS:
        raise ValueError(f"seeds must be at most {MAX_SEEDS:,} seeds, got more: train them "
                         "in several runs")  # fmt: skip
    if min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct non-negative integers, got "
                         f"{format_seeds(seeds)}")  # fmt: skip
    if max(seeds) > MAX_SEED:
        raise ValueError(f"seeds must be at most {MAX_SEED} (2**63 - 1), got {max(seeds)}")
    known = {"preset", "eval_every", "eval_episodes", "checkpoint_freq", "keep"}
    if set(options) - known:
        raise ValueError(f"unknown options {sorted(set(options) - known)}; train_seeds takes "
                         f"{', '.join(sorted(known))} besides its named parameters")  # fmt: skip
    spec = SeedSpec(env_id, config or DqnConfig(), int(steps), name or env_id.replace("/", "-"),
                    version, **options)  # fmt: skip
    for option, minimum in (("steps", 1), ("eval_every", 1), ("eval_episodes", 1),
                            ("checkpoint_freq", 1), ("keep", 0)):  # fmt: skip
        if getattr(spec, option) < minimum:
            raise ValueError(f"{option} must be an integer >= {minimum}, got "
                             f"{getattr(spec, option)}")  # fmt: skip
    if workers is not None:
        workers = check_workers(workers)
    parent = _make_parent(root, spec.name, spec.version)
    with parent_lock(parent):  # one writer: a `resume PARENT` meanwhile is refused
        atomic_write_text(parent / SPEC_FILE, json.dumps({"spec": spec.to_dict(),
                                                          "seeds": seeds}, indent=1))  # fmt: skip
        if on_start is not None:
            on_start(parent)
        return _run(parent, spec, seeds, workers, progress)


def parent_lock(parent: str | os.PathLike[str]) -> DirectoryLock:
    """The writer lock of a multi-seed run's parent directory (use it as ``with``).

    The same :class:`~ember_np.training.run.DirectoryLock` a single run
    takes: :func:`train_seeds` and :func:`resume_seeds` hold it while they
    train, so a second writer gets :class:`~ember_np.training.run.RunLockedError`
    naming the holder's PID.
    """
    return DirectoryLock(parent, "the multi-seed run")


def is_multiseed(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is the parent directory of a multi-seed run."""
    return (Path(path) / SPEC_FILE).is_file()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _spec_problem(data: Any) -> str | None:
    """What is wrong with the contents of a ``seeds.json``, or None."""
    if not isinstance(data, dict) or not isinstance(data.get("spec"), dict):
        return "expected an object with 'spec' (an object) and 'seeds'"
    spec = data["spec"]
    for key in ("env_id", "name", "version"):
        if not isinstance(spec.get(key), str):
            return f"'{key}' must be a string, found {_short(spec.get(key))}"
    if spec.get("preset") is not None and not isinstance(spec["preset"], str):
        return f"'preset' must be a string or null, found {_short(spec['preset'])}"
    for key, least in (("steps", 1), ("eval_every", 1), ("eval_episodes", 1),
                       ("checkpoint_freq", 1), ("keep", 0)):  # fmt: skip
        if key in spec and not (_is_int(spec[key]) and spec[key] >= least):
            return f"'{key}' must be an integer >= {least}, found {_short(spec[key])}"
    seeds = data.get("seeds")
    if (
        not isinstance(seeds, list) or not 1 <= len(seeds) <= MAX_SEEDS
        or not all(_is_int(x) and 0 <= x <= MAX_SEED for x in seeds)
        or len(set(seeds)) != len(seeds)
    ):  # fmt: skip
        return (f"'seeds' must be distinct integers in 0..{MAX_SEED}, 1 to {MAX_SEEDS:,} of "
                f"them, found {_short(seeds)}")  # fmt: skip
    return None


def _read_spec(parent: Path) -> tuple[SeedSpec, list[int]]:
    path = parent / SPEC_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        problem = _spec_problem(data)
        if problem is None:
            return SeedSpec.from_dict(data["spec"]), list(data["seeds"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        problem = _one_line(exc)
    raise ValueError(f"{path} is not a valid multi-seed description: {problem}") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _result_problem(data: Any, seed: int, steps: int) -> str | None:
    """What is wrong with the contents of seed ``seed``'s ``result.json``, or None."""
    if not isinstance(data, dict):
        return f"holds a JSON {type(data).__name__}, expected an object"
    for key in ("seed", "final_reward", "best_eval_reward", "curve", "train_seconds"):
        if key not in data:
            return f"lacks {key!r}"
    if not _is_int(data["seed"]) or data["seed"] != seed:
        return f"'seed' is {_short(data['seed'])}, but the file is seed {seed}'s"
    for key in ("final_reward", "best_eval_reward"):
        if not _is_finite(data[key]):
            return f"{key!r} must be a finite number, found {_short(data[key])}"
    if not _is_finite(data["train_seconds"]) or data["train_seconds"] < 0:
        found = _short(data["train_seconds"])
        return f"'train_seconds' must be a finite number >= 0, found {found}"
    curve = data["curve"]
    if (
        not isinstance(curve, list) or not curve
        or not all(isinstance(p, list) and len(p) == 3 and _is_int(p[0]) and _is_finite(p[1])
                   and _is_finite(p[2]) for p in curve)
    ):  # fmt: skip
        return f"'curve' must be a non-empty list of [step, reward, seconds], found {_short(curve)}"
    points = [p[0] for p in curve]
    if not all(1 <= a <= steps for a in points) or points != sorted(points):
        return f"'curve' steps must be integers in 1..{steps}, in order, found {_short(points)}"
    if points[-1] != steps:  # the final evaluation: a step every seed's curve has
        return f"'curve' must end at the run's last step {steps}, found {points[-1]}"
    return None


def _read_result(parent: Path, seed: int, steps: int) -> SeedResult | None:
    """Seed ``seed``'s result, or None when it has no ``result.json`` (it did not finish).

    ValueError naming the file, what is wrong and the fix when the file is
    not a result: it is written once, atomically, so it was edited or damaged.
    """
    path = parent / f"seed_{seed}" / RESULT_FILE
    fix = f"restore it, or delete it to train seed {seed} again (ember-np resume {parent})"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot be read ({_one_line(exc)}); {fix}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc}); {fix}") from None
    problem = _result_problem(data, seed, steps)
    if problem is not None:
        raise ValueError(f"{path}: {problem}; {fix}")
    return SeedResult.from_dict(data, path.parent)


def load_multiseed(parent: str | os.PathLike[str]) -> MultiSeedResult:
    """The finished and unfinished seeds of the multi-seed run in ``parent``.

    A seed without ``result.json`` did not finish. Raises ValueError naming
    the file when ``seeds.json`` or a ``result.json`` is not what this module
    writes (wrong types, missing keys, NaN rewards, a curve that does not end
    at the run's last step).
    """
    parent = Path(parent)
    spec, seeds = _read_spec(parent)
    runs, failed = [], []
    for seed in seeds:
        result = _read_result(parent, seed, spec.steps)
        if result is None:
            failed.append(seed)
        else:
            runs.append(result)
    return MultiSeedResult(parent, spec, runs, failed)


def resume_seeds(
    parent: str | os.PathLike[str], workers: int | None = None, progress: bool = True
) -> MultiSeedResult:
    """Train the seeds of ``parent`` that did not finish; returns all its results.

    A seed without ``result.json`` is trained again from the start, so it is
    exactly the run ``--seed s`` makes; its partial directory is kept,
    renamed ``seed_<s>.interrupted`` (``..._1``, ... for later attempts).
    """
    parent = Path(parent)
    with parent_lock(parent):  # before anything is read: one writer per parent
        spec, _ = _read_spec(parent)
        missing = load_multiseed(parent).failed
        for seed in missing:
            partial = parent / f"seed_{seed}"
            if partial.exists():
                # A worker of a killed parent may still be in it for a moment.
                with DirectoryLock(partial, "the run"):
                    k, target = 0, parent / f"seed_{seed}.interrupted"
                    while target.exists():
                        k += 1
                        target = parent / f"seed_{seed}.interrupted_{k}"
                    partial.rename(target)
        if missing:
            _run(parent, spec, missing, workers, progress)
        return load_multiseed(parent)


def _run(
    parent: Path, spec: SeedSpec, seeds: list[int], workers: int | None, progress: bool
) -> MultiSeedResult:
    t0 = time.perf_counter()
    workers = default_workers() if workers is None else check_workers(workers)
    _Pool(parent, spec, seeds, min(workers, len(seeds)), progress).run()
    result = load_multiseed(parent)
    result.wall_seconds = time.perf_counter() - t0
    return result


class _Pool:
    """Worker processes fed one seed at a time through a pipe each.

    Pipes rather than a shared task queue: a worker killed while it holds a
    queue's lock would block every other worker; here a dead worker only
    closes its own pipe, its seed is marked failed and a new worker takes
    over the seeds still waiting.
    """

    def __init__(
        self, parent: Path, spec: SeedSpec, seeds: list[int], workers: int, progress: bool
    ) -> None:
        self.parent = parent
        self.spec = spec
        self.pending = list(seeds)
        self.n_workers = workers
        self.failed: list[int] = []
        self.finished = 0
        from tqdm import tqdm

        self.bar = tqdm(total=spec.steps * len(seeds), unit="step", unit_scale=True,
                        dynamic_ncols=True, disable=not progress, desc=f"{len(seeds)} seeds",
                        smoothing=0.1)  # fmt: skip

    def _start_worker(self, ctx: Any) -> tuple[Any, Any]:
        conn, child = ctx.Pipe()
        saved = {var: os.environ.get(var) for var in WORKER_THREADS}
        os.environ.update(WORKER_THREADS)  # the child starts with them, before NumPy loads
        try:
            process = ctx.Process(target=_worker_main, args=(child, self.spec.to_dict()),
                                  daemon=True)  # fmt: skip
            process.start()
        finally:
            for var, value in saved.items():
                if value is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = value
        child.close()
        return process, conn

    def _assign(self, conn: Any) -> int | None:
        if not self.pending:
            conn.send(None)
            return None
        seed = self.pending.pop(0)
        conn.send((seed, str(self.parent / f"seed_{seed}")))
        return seed

    def _lost(self, seed: int, why: str) -> None:
        self.failed.append(seed)
        message = (f"seed {seed} did not finish: {why}; the other seeds go on "
                   f"(ember-np resume {self.parent} trains it again)")  # fmt: skip
        self.bar.write(message, file=sys.stderr)

    def run(self) -> list[int]:
        import multiprocessing as mp
        from multiprocessing.connection import wait

        ctx = mp.get_context("spawn")
        live: dict[Any, tuple[Any, int | None]] = {}  # conn -> (process, its seed)
        try:
            for _ in range(self.n_workers):
                process, conn = self._start_worker(ctx)
                live[conn] = (process, self._assign(conn))
            while live:
                for conn in wait(list(live)):
                    process, seed = live[conn]
                    try:
                        message = conn.recv()
                    except (EOFError, OSError):  # the worker died
                        process.join()
                        del live[conn]
                        if seed is not None:
                            self._lost(seed, _exit_reason(process.exitcode))
                        if self.pending:
                            process, conn = self._start_worker(ctx)
                            live[conn] = (process, self._assign(conn))
                        continue
                    kind = message[0]
                    if kind == "steps":
                        self.bar.update(message[1])
                        continue
                    if kind == "done":
                        self.finished += 1
                    else:  # "error": the worker is fine, the seed raised
                        self._lost(message[1], f"it raised\n{message[2]}")
                    self.bar.set_postfix(done=self.finished, failed=len(self.failed),
                                         refresh=False)  # fmt: skip
                    live[conn] = (process, self._assign(conn))
                    if live[conn][1] is None:
                        process.join()
                        del live[conn]
        finally:
            self.bar.close()
            for conn, (process, _) in live.items():  # interrupted: stop the rest
                process.terminate()
                process.join()
                conn.close()
        return self.failed


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"its worker was killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"its worker exited with status {code}"


# -- the command line ---------------------------------------------------------------


def cli_train(
    args: Any,
    env_id: str,
    preset: str | None,
    config: DqnConfig,
    steps: int,
    name: str,
    version: str,
) -> int:
    """``ember-np train ENV_ID --seeds K``: the options ``cmd_train`` resolved; exit status."""
    from ember_np.cli import UsageError
    from ember_np.training.run import RunLockedError

    workers = args.workers or default_workers()
    seeds = args.seeds
    started: list[Path] = []

    def announce(parent: Path) -> None:
        started.append(parent)
        print(f"{len(seeds)} seeds ({format_seeds(seeds)}) of {env_id}, preset "
              f"{preset or '(none: DqnConfig defaults)'}, {steps:,} steps each, on "
              f"{min(workers, len(seeds))} worker processes; runs: {parent}/seed_<s>/")  # fmt: skip
        sys.stdout.flush()

    try:
        result = train_seeds(
            env_id, seeds, config=config, steps=steps, workers=workers, root=args.root,
            name=name, version=version, preset=preset, eval_every=args.eval_every,
            eval_episodes=args.eval_episodes, checkpoint_freq=args.checkpoint_freq,
            keep=args.keep, progress=not args.quiet, on_start=announce,
        )  # fmt: skip
    except (RunLockedError, OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt:
        if started:
            _say_interrupted(started[0])
        raise
    print(result.summary())
    return 1 if result.failed else 0


def cli_resume(args: Any) -> int:
    """``ember-np resume PARENT``: train the seeds that did not finish; exit status."""
    from ember_np.cli import UsageError

    if args.steps is not None:
        raise UsageError(
            f"{args.run_path} is a multi-seed run: resume trains its unfinished seeds to their "
            "budget, so drop --steps (to train longer, start a new run with --steps)"
        )
    from ember_np.training.run import RunLockedError

    try:
        with parent_lock(args.run_path):  # refused before anything is printed or moved
            before = load_multiseed(args.run_path)
            if before.failed:
                print(f"{before.parent}: {len(before.runs)} seeds finished; training seeds "
                      f"{format_seeds(before.failed)} again from the start")  # fmt: skip
            else:
                print(f"{before.parent}: all {len(before.runs)} seeds already finished")
            sys.stdout.flush()
            result = resume_seeds(args.run_path, workers=args.workers, progress=not args.quiet)
    except (RunLockedError, OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt:
        _say_interrupted(Path(args.run_path))
        raise
    print(result.summary())
    return 1 if result.failed else 0


def _say_interrupted(parent: Path) -> None:
    """Ctrl-C: which seeds finished, where the runs are and how to go on (one line, stderr).

    Said once the workers have stopped, from the files on disk: a seed counts
    as finished when its ``result.json`` is there.
    """
    how = f"runs: {parent}/seed_<s>/; `ember-np resume {parent}` trains the unfinished seeds"
    try:
        state = load_multiseed(parent)
    except ValueError:  # seeds.json not written yet, or damaged: say where to look
        print(f"interrupted; {how}", file=sys.stderr)
        return
    n = len(state.runs) + len(state.failed)
    done = format_seeds(r.seed for r in state.runs) or "none"
    lost = f", {format_seeds(state.failed)} did not" if state.failed else ""
    print(f"interrupted: {len(state.runs)} of {n} seeds finished ({done}){lost}; {how}",
          file=sys.stderr)  # fmt: skip
