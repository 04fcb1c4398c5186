"""The files of a multi-seed run and what they say: its spec, each seed's result, the seeds.

:mod:`ember_np.training.multiseed` trains the seeds; this module reads and
writes what they leave behind (``seeds.json``, each ``seed_<s>/result.json``)
and parses the ``--seeds`` value. :func:`load_multiseed` is what ``ember-np
report`` and ``plot`` read.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ember_np._validate import is_int
from ember_np.algorithms import DEFAULT_ALGORITHM, algorithm_of_config, get_algorithm
from ember_np.training.loop import eval_mark, stop_steps
from ember_np.training.setup import one_line
from ember_np.training.spec import RunSpec

__all__ = [
    "MAX_SEED",
    "MAX_SEEDS",
    "RESULT_FILE",
    "SPEC_FILE",
    "MultiSeedResult",
    "SeedResult",
    "SeedSpec",
    "format_seeds",
    "is_multiseed",
    "load_multiseed",
    "parse_seeds",
    "read_spec",
]

SPEC_FILE = "seeds.json"
RESULT_FILE = "result.json"


@dataclass(frozen=True)
class SeedSpec:
    """What every seed of a multi-seed run trains: a :class:`RunSpec` and where it is filed.

    ``run`` is the spec each seed trains, its ``seed`` replaced by the seed's
    own (``run.env_id`` is the environment actually made,
    ``ember_np/CartPole-v1`` for the command line's default); ``name`` and
    ``version`` file the parent directory (``<root>/<name>/<version>/<time>/``).
    The spec's fields can be read from here too (``spec.steps``, ...).
    """

    run: RunSpec
    name: str
    version: str

    def __getattr__(self, name: str) -> Any:  # spec.steps, spec.env_id, ...: the run's
        if name in _RUN_FIELDS:
            return getattr(self.run, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def run_config(self, seed: int) -> dict[str, Any]:
        """The seed's ``config.json``: what ``ember-np train --seed seed`` writes."""
        return self.run.replace(seed=seed).to_dict()

    def stop_steps(self) -> range:
        """The total steps a seed's run can end at (:func:`~ember_np.training.loop.stop_steps`):
        ``steps``, or with N envs the first vector-step boundary at or past it
        (a native env's copies: exactly the first multiple of N; a gymnasium
        vector env, whose reset rows add no transition: up to N - 1 past it)."""
        run = self.run
        whole = run.num_envs == 1 or run.vectorization is None
        return stop_steps(run.steps, run.num_envs, whole)

    def to_dict(self) -> dict[str, Any]:
        """``seeds.json``'s ``spec``: the run's settings, its config under ``config``
        (``algorithm`` only when it is not DQN: a DQN run's file as before)."""
        run = self.run
        algorithm = {} if run.algorithm == DEFAULT_ALGORITHM else {"algorithm": run.algorithm}
        return {
            **algorithm,
            "env_id": run.env_id, "config": run.config.to_dict(), "steps": run.steps,
            "name": self.name, "version": self.version, "preset": run.preset,
            "eval_every": run.eval_every, "eval_episodes": run.eval_episodes,
            "checkpoint_freq": run.checkpoint_freq, "keep": run.keep,
            "num_envs": run.num_envs, "vectorization": run.vectorization,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SeedSpec:
        """Inverse of :meth:`to_dict`; keys an older ``seeds.json`` lacks take the defaults."""
        unknown = sorted(set(data) - set(_SPEC_KEYS))
        if unknown:
            raise ValueError(f"unknown keys {unknown}")
        settings = {k: data[k] for k in _RUN_FIELDS if k in data and k != "config"}
        config_class = get_algorithm(algorithm_of_config(settings)).config_class
        run = RunSpec(config=config_class.from_dict(data["config"]), **settings)
        return cls(run, data["name"], data["version"])


#: The RunSpec fields a SeedSpec passes on (``spec.steps`` is ``spec.run.steps``).
_RUN_FIELDS = frozenset(f.name for f in fields(RunSpec))
#: The keys of ``seeds.json``'s ``spec``.
_SPEC_KEYS = ("algorithm", "env_id", "config", "steps", "name", "version", "preset", "eval_every",
              "eval_episodes", "checkpoint_freq", "keep", "num_envs", "vectorization")  # fmt: skip


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
                f"{self.spec.steps:,} steps each{self._trained_text()}")  # fmt: skip
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

    def _trained_text(self) -> str:
        """``" (trained 2,004: whole steps of 4 envs)"`` when the seeds stopped past
        ``spec.steps`` (a vector step is never cut); empty otherwise."""
        trained = sorted({r.curve[-1][0] for r in self.runs if r.curve})
        if not trained or trained == [self.spec.steps]:
            return ""
        span = f"{trained[0]:,}" if len(trained) == 1 else f"{trained[0]:,} to {trained[-1]:,}"
        return f" (trained {span}: whole steps of {self.spec.num_envs} envs)"


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
    return f"{','.join(parts[:half])},...,{','.join(parts[-half // 2 :])} ({len(ordered):,} seeds)"


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


def is_multiseed(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is the parent directory of a multi-seed run."""
    return (Path(path) / SPEC_FILE).is_file()


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
    if spec.get("vectorization") not in (None, "sync", "async"):
        found = _short(spec["vectorization"])
        return f"'vectorization' must be null, 'sync' or 'async', found {found}"
    for key, least in (("steps", 1), ("eval_every", 1), ("eval_episodes", 1),
                       ("checkpoint_freq", 1), ("keep", 0), ("num_envs", 1)):  # fmt: skip
        if key in spec and not (is_int(spec[key]) and spec[key] >= least):
            return f"'{key}' must be an integer >= {least}, found {_short(spec[key])}"
    seeds = data.get("seeds")
    if (
        not isinstance(seeds, list) or not 1 <= len(seeds) <= MAX_SEEDS
        or not all(is_int(x) and 0 <= x <= MAX_SEED for x in seeds)
        or len(set(seeds)) != len(seeds)
    ):  # fmt: skip
        return (f"'seeds' must be distinct integers in 0..{MAX_SEED}, 1 to {MAX_SEEDS:,} of "
                f"them, found {_short(seeds)}")  # fmt: skip
    return None


def read_spec(parent: Path) -> tuple[SeedSpec, list[int]]:
    path = parent / SPEC_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        problem = _spec_problem(data)
        if problem is None:
            return SeedSpec.from_dict(data["spec"]), list(data["seeds"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        problem = one_line(exc)
    raise ValueError(f"{path} is not a valid multi-seed description: {problem}") from None


def _result_problem(data: Any, seed: int, spec: SeedSpec) -> str | None:
    """What is wrong with the contents of seed ``seed``'s ``result.json``, or None."""
    if not isinstance(data, dict):
        return f"holds a JSON {type(data).__name__}, expected an object"
    for key in ("seed", "final_reward", "best_eval_reward", "curve", "train_seconds"):
        if key not in data:
            return f"lacks {key!r}"
    if not is_int(data["seed"]) or data["seed"] != seed:
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
        or not all(isinstance(p, list) and len(p) == 3 and is_int(p[0]) and _is_finite(p[1])
                   and _is_finite(p[2]) for p in curve)
    ):  # fmt: skip
        return f"'curve' must be a non-empty list of [step, reward, seconds], found {_short(curve)}"
    return _curve_problem([p[0] for p in curve], spec)


def _curve_problem(points: list[int], spec: SeedSpec) -> str | None:
    """What is wrong with a result's curve steps ``points`` for a run of ``spec``, or None.

    Exactly the steps the loop evaluates at: periodic evaluations each at
    most N - 1 steps past a multiple of ``eval_every`` (N envs; one env: on
    it), one per multiple, then the final one where the run stopped
    (:meth:`SeedSpec.stop_steps`).
    """
    stops = spec.stop_steps()
    last = stops[-1]
    if not all(1 <= a <= last for a in points) or points != sorted(points):
        return f"'curve' steps must be integers in 1..{last}, in order, found {_short(points)}"
    if points[-1] not in stops:  # the final evaluation: a step every seed's curve has
        where = (
            f"{last}"
            if len(stops) == 1
            else f"(one of {stops[0]}..{last}: whole steps of {spec.num_envs} envs)"
        )
        return f"'curve' must end at the run's last step {where}, found {points[-1]}"
    n = spec.num_envs
    whole = len(stops) == 1
    marks = [eval_mark(a, spec.eval_every, n) for a in points[:-1]]
    for a, mark, before in zip(points, marks, [None, *marks]):
        if mark is None or (whole and a % n) or (before is not None and mark <= before):
            return (
                f"'curve' has an evaluation at step {a}, where the run does not evaluate "
                f"(once per multiple of eval_every {spec.eval_every}"
                f"{f', at most {n - 1} steps past it' if n > 1 else ''})"
            )
    return None


def _read_result(parent: Path, seed: int, spec: SeedSpec) -> SeedResult | None:
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
        raise ValueError(f"{path}: cannot be read ({one_line(exc)}); {fix}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc}); {fix}") from None
    problem = _result_problem(data, seed, spec)
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
    spec, seeds = read_spec(parent)
    runs, failed = [], []
    for seed in seeds:
        result = _read_result(parent, seed, spec)
        if result is None:
            failed.append(seed)
        else:
            runs.append(result)
    return MultiSeedResult(parent, spec, runs, failed)
