"""Episode statistics: records, aggregators, a tracker and evaluation reports.

And statistics over runs (seeds), after Agarwal et al. 2021 ("Deep RL at the
edge of the statistical precipice"): :func:`iqm`, :func:`bootstrap_ci`,
:func:`probability_of_improvement`, :func:`performance_profile` and
:func:`iqm_curve`. NumPy only: SciPy's bootstrap does not stratify over tasks
and rliable, which does, was archived in 2025; the few vectorised lines below
replace both.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ember_np.types import EpisodeStatus

__all__ = [
    "Aggregator",
    "Band",
    "EpisodeRecord",
    "EvalReport",
    "Last",
    "Max",
    "Mean",
    "Min",
    "RollingMean",
    "StatsTracker",
    "Std",
    "bootstrap_ci",
    "iqm",
    "iqm_curve",
    "performance_profile",
    "probability_of_improvement",
]


@dataclass(frozen=True)
class EpisodeRecord:
    """The outcome of one episode.

    total_reward : float
        Undiscounted sum of rewards.
    length : int
        Number of env steps.
    status : EpisodeStatus
        TERMINATED or TRUNCATED.
    extras : dict of str to float
        Anything else worth tracking (``StatsTracker.add(name, "key", ...)``).
    """

    total_reward: float
    length: int
    status: EpisodeStatus = EpisodeStatus.TERMINATED
    extras: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (status by name)."""
        return {
            "total_reward": float(self.total_reward),
            "length": int(self.length),
            "status": EpisodeStatus(self.status).name,
            "extras": {k: float(v) for k, v in self.extras.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EpisodeRecord:
        return cls(
            float(data["total_reward"]),
            int(data["length"]),
            EpisodeStatus[data.get("status", "TERMINATED")],
            dict(data.get("extras", {})),
        )


class Aggregator:
    """Folds a stream of numbers into one statistic (NaN until the first value)."""

    def update(self, value: float) -> None:
        raise NotImplementedError

    def update_many(self, values: Sequence[float]) -> None:
        """Fold ``values`` in order: the same statistic as ``update`` on each.

        Subclasses may fold them in one pass (as :class:`Mean` does), with
        the same arithmetic in the same order, so the result is identical.
        """
        for value in values:
            self.update(value)

    def value(self) -> float:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    def fresh(self) -> Aggregator:
        """A new, empty aggregator of the same kind and settings."""
        return type(self)()


class Mean(Aggregator):
    """Arithmetic mean of every value."""

    _n: int
    _sum: float

    def __init__(self) -> None:
        self.reset()

    def update(self, value: float) -> None:
        self._n += 1
        self._sum += value

    def update_many(self, values: Sequence[float]) -> None:
        total = self._sum
        for value in values:  # one add per value, in order: the sum update() makes
            total += value
        self._sum = total
        self._n += len(values)

    def value(self) -> float:
        return self._sum / self._n if self._n else math.nan

    def reset(self) -> None:
        self._n = 0
        self._sum = 0.0


class Max(Aggregator):
    """Largest value."""

    _v: float

    def __init__(self) -> None:
        self.reset()

    def update(self, value: float) -> None:
        self._v = value if math.isnan(self._v) else max(self._v, value)

    def value(self) -> float:
        return self._v

    def reset(self) -> None:
        self._v = math.nan


class Min(Aggregator):
    """Smallest value."""

    _v: float

    def __init__(self) -> None:
        self.reset()

    def update(self, value: float) -> None:
        self._v = value if math.isnan(self._v) else min(self._v, value)

    def value(self) -> float:
        return self._v

    def reset(self) -> None:
        self._v = math.nan


class Last(Aggregator):
    """Most recent value."""

    def __init__(self) -> None:
        self.reset()

    def update(self, value: float) -> None:
        self._v = value

    def value(self) -> float:
        return self._v

    def reset(self) -> None:
        self._v = math.nan


class RollingMean(Aggregator):
    """Mean of the last ``window`` values."""

    def __init__(self, window: int = 100) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be a positive integer, got {window!r}")
        self.window = window
        self._values: deque[float] = deque(maxlen=window)

    def update(self, value: float) -> None:
        self._values.append(value)

    def update_many(self, values: Sequence[float]) -> None:
        self._values.extend(values)

    def value(self) -> float:
        return sum(self._values) / len(self._values) if self._values else math.nan

    def reset(self) -> None:
        self._values.clear()

    def fresh(self) -> RollingMean:
        return RollingMean(self.window)


class Std(Aggregator):
    """Population standard deviation (Welford's algorithm)."""

    def __init__(self) -> None:
        self.reset()

    def update(self, value: float) -> None:
        self._n += 1
        delta = value - self._mean
        self._mean += delta / self._n
        self._m2 += delta * (value - self._mean)

    def value(self) -> float:
        return math.sqrt(self._m2 / self._n) if self._n else math.nan

    def reset(self) -> None:
        self._n = 0
        self._mean = 0.0
        self._m2 = 0.0


Source = str | Callable[[EpisodeRecord], float]


def _extract(source: Source, record: EpisodeRecord) -> float | None:
    if callable(source):
        return float(source(record))
    if source == "reward":
        return float(record.total_reward)
    if source == "length":
        return float(record.length)
    value = record.extras.get(source)
    return None if value is None else float(value)


class StatsTracker:
    """Named statistics over episode records.

    By default tracks ``episode_reward`` and ``episode_length``, both
    :class:`Mean`. ``add(name, source, aggregator)`` tracks more: ``source`` is
    ``"reward"``, ``"length"``, a key of ``record.extras`` (records without
    it are skipped), or a callable on the record.
    """

    def __init__(self, defaults: bool = True) -> None:
        self._stats: dict[str, tuple[Source, Aggregator]] = {}
        if defaults:
            self.add("episode_reward", "reward", Mean())
            self.add("episode_length", "length", Mean())

    def add(self, name: str, source: Source, aggregator: Aggregator) -> StatsTracker:
        """Track ``aggregator`` of ``source`` under ``name``; returns self for chaining."""
        if not isinstance(aggregator, Aggregator):
            raise ValueError(
                f"aggregator must be an Aggregator such as Mean() or RollingMean(100), "
                f"got {aggregator!r}"
            )
        if not (callable(source) or isinstance(source, str)):
            raise ValueError(
                f"source must be 'reward', 'length', an extras key or a callable, got {source!r}"
            )
        self._stats[name] = (source, aggregator)
        return self

    def update(self, record: EpisodeRecord) -> None:
        """Fold one episode into every statistic."""
        for source, agg in self._stats.values():
            value = _extract(source, record)
            if value is not None:
                agg.update(value)

    @property
    def needs_records(self) -> bool:
        """Whether a statistic reads more of an episode than its reward and length
        (an extras key or a callable): then only :meth:`update` can fold it."""
        return any(source not in ("reward", "length") for source, _ in self._stats.values())

    def update_columns(self, rewards: Sequence[float], lengths: Sequence[int]) -> None:
        """Fold many episodes, given as columns, into every statistic: the same
        statistics as :meth:`update` on each episode's record in order, without
        a record per episode.

        rewards : the episodes' total rewards; lengths : their steps (one each,
        same order). Raises ValueError when :attr:`needs_records`.
        """
        if self.needs_records:
            raise ValueError(
                "update_columns folds only 'reward' and 'length' statistics; this tracker "
                "also reads extras keys or callables, so fold each EpisodeRecord with update()"
            )
        if len(rewards) != len(lengths):
            raise ValueError(f"update_columns needs one length per reward, got "
                             f"{len(rewards)} rewards and {len(lengths)} lengths")  # fmt: skip
        columns = {"reward": [float(r) for r in rewards], "length": [float(n) for n in lengths]}
        for source, agg in self._stats.values():
            agg.update_many(columns[source])  # type: ignore[index]

    def summary(self) -> dict[str, float]:
        """Current value of every statistic (NaN before any episode)."""
        return {name: agg.value() for name, (_, agg) in self._stats.items()}

    def reset(self) -> None:
        """Forget every episode (statistics stay registered)."""
        for _, agg in self._stats.values():
            agg.reset()

    def fresh(self) -> StatsTracker:
        """An empty tracker with the same statistics registered."""
        other = StatsTracker(defaults=False)
        for name, (source, agg) in self._stats.items():
            other.add(name, source, agg.fresh())
        return other

    def __repr__(self) -> str:
        return f"StatsTracker({self.summary()})"


@dataclass(frozen=True)
class EvalReport:
    """The result of an evaluation: when it ran, how many episodes, the statistics."""

    total_steps: int
    n_episodes: int
    stats: Mapping[str, float]

    @property
    def mean_reward(self) -> float:
        return float(self.stats.get("episode_reward", math.nan))

    def __str__(self) -> str:
        lines = [f"Eval at step {self.total_steps} ({self.n_episodes} episodes)"]
        width = max((len(k) for k in self.stats), default=0)
        for name, value in self.stats.items():
            lines.append(f"  {name:<{width}}  {value:.4f}")
        return "\n".join(lines)

    def print(self) -> None:
        """Print :meth:`__str__` to stdout."""
        print(str(self))

    def to_dict(self) -> dict[str, Any]:
        return {"total_steps": self.total_steps, "n_episodes": self.n_episodes,
                "stats": dict(self.stats)}  # fmt: skip


def iqm(scores: Any) -> float:
    """The interquartile mean: the mean of the middle 50% of ``scores``.

    Defined for any count ``n >= 1`` as twice the integral of the empirical
    quantile function over [0.25, 0.75]: the i-th smallest score (1-based)
    covers the quantile interval ((i-1)/n, i/n] and is weighted by how much of
    that interval lies inside [0.25, 0.75]. Where ``n`` is a multiple of 4 this
    is ``scipy.stats.trim_mean(scores, 0.25)`` (the mean of the middle n/2
    scores); elsewhere the two boundary scores count in part instead of being
    rounded in or out. ``iqm([x]) == x``.

    Parameters
    ----------
    scores : array_like of float, shape (n,)
        One score per run (seed). Must be non-empty and finite.

    Returns
    -------
    float
    """
    x = np.sort(np.asarray(scores, dtype=np.float64).ravel())
    n = x.size
    if n == 0:
        raise ValueError("iqm needs at least one score (got an empty array)")
    if not np.all(np.isfinite(x)):
        raise ValueError("iqm needs finite scores (got NaN or infinity); drop failed runs first")
    return float(_iqm_weights(n) @ x)


def _iqm_weights(n: int) -> np.ndarray:
    """Weight of the i-th smallest of n scores in the IQM (see :func:`iqm`); sums to 1."""
    lo = np.arange(n) / n
    hi = np.arange(1, n + 1) / n
    return np.clip(np.minimum(hi, 0.75) - np.maximum(lo, 0.25), 0.0, None) * 2.0


class Band(NamedTuple):
    """A statistic with its confidence interval: ``value``, ``low``, ``high``
    (floats, or arrays of one shape for curves and profiles)."""

    value: Any
    low: Any
    high: Any


_STATISTICS = ("iqm", "mean", "median", "optimality_gap")


def _score_matrix(scores: Any, name: str = "scores") -> np.ndarray:
    """``scores`` as a float64 (runs, tasks) matrix: shape (n,) is one task."""
    x = np.asarray(scores, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2:
        raise ValueError(f"{name} must have shape (runs,) or (runs, tasks), got shape {x.shape}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name} needs at least one run (got shape {x.shape})")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} must be finite (got NaN or infinity); drop failed runs first")
    return x


def _check_bootstrap(confidence: float, reps: int) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), e.g. 0.95, got {confidence!r}")
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps must be a positive integer, e.g. 10_000, got {reps!r}")


def _statistic_rows(x: np.ndarray, statistic: str, threshold: float | None) -> np.ndarray:
    """The statistic of each row of ``x`` (shape (rows, k)), vectorised."""
    if statistic == "iqm":
        return np.sort(x, axis=1) @ _iqm_weights(x.shape[1])
    if statistic == "mean":
        return x.mean(axis=1)
    if statistic == "median":
        return np.median(x, axis=1)
    # optimality gap: how far the scores fall short of the threshold, on average
    return np.maximum(threshold - x, 0.0).mean(axis=1)  # type: ignore[operator]


def bootstrap_ci(
    scores: Any,
    statistic: str = "iqm",
    confidence: float = 0.95,
    reps: int = 10_000,
    seed: int = 0,
    threshold: float | None = None,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of a statistic over runs.

    Runs (seeds) are resampled with replacement, never the episodes inside a
    run. With several tasks (``scores`` of shape (runs, tasks), scores on a
    common scale), the bootstrap is stratified: each task's runs are resampled
    within that task, and the statistic is taken over all resampled scores.
    Each repetition draws, task by task, ``rng.integers(0, runs, (reps,
    runs))`` from ``np.random.default_rng(seed)``; the interval is the
    ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of the
    ``reps`` statistics (``np.quantile``, linear).

    Parameters
    ----------
    scores : array_like of float, shape (runs,) or (runs, tasks)
        One score per run (and task); finite.
    statistic : {"iqm", "mean", "median", "optimality_gap"}
        ``"optimality_gap"`` is ``mean(max(threshold - score, 0))`` and needs
        ``threshold``.
    confidence : float
        Coverage of the interval, in (0, 1). Default 0.95.
    reps : int
        Bootstrap repetitions. Default 10,000.
    seed : int
        Seeds the resampling: the same arguments give the same interval.
    threshold : float, optional
        The target score of ``"optimality_gap"``.

    Returns
    -------
    (low, high) : tuple of float
    """
    if statistic not in _STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(_STATISTICS)}, got {statistic!r}")
    if statistic == "optimality_gap" and (threshold is None or not math.isfinite(threshold)):
        raise ValueError(
            "statistic 'optimality_gap' needs a finite threshold (the target score), "
            f"got threshold={threshold!r}"
        )
    _check_bootstrap(confidence, reps)
    x = _score_matrix(scores)
    runs, tasks = x.shape
    rng = np.random.default_rng(seed)
    sample = np.empty((reps, runs * tasks))
    for task in range(tasks):
        sample[:, task * runs : (task + 1) * runs] = x[rng.integers(0, runs, (reps, runs)), task]
    values = _statistic_rows(sample, statistic, threshold)
    low, high = np.quantile(values, [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0])
    return float(low), float(high)


def _improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """C[i, j] = 1 if x_i > y_j, 0.5 if equal, else 0 (shape (n, m))."""
    return (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])


def probability_of_improvement(
    x: Any, y: Any, confidence: float = 0.95, reps: int = 10_000, seed: int = 0
) -> tuple[float, tuple[float, float]]:
    """P(X > Y) + 0.5 P(X = Y) for a run X of one algorithm and a run Y of another.

    ``P = 1/(n m) sum_i sum_j [x_i > y_j] + 0.5 [x_i = y_j]`` (the Mann-Whitney
    U statistic over n m), averaged over tasks when ``x`` and ``y`` have shape
    (runs, tasks). The confidence interval resamples the runs of ``x`` and of
    ``y`` independently (within each task): a resample that draws run i c_i
    times and run j d_j times has ``P = c @ C @ d / (n m)``, so every
    repetition is one matrix product.

    Parameters
    ----------
    x, y : array_like of float, shape (n,) / (m,) or (n, tasks) / (m, tasks)
        Scores of the two algorithms; the run counts may differ.
    confidence, reps, seed
        As in :func:`bootstrap_ci`.

    Returns
    -------
    (p, (low, high))
    """
    _check_bootstrap(confidence, reps)
    a = _score_matrix(x, "x")
    b = _score_matrix(y, "y")
    if a.shape[1] != b.shape[1]:
        raise ValueError(
            f"x and y must cover the same tasks: got {a.shape[1]} and {b.shape[1]} columns"
        )
    n, m = a.shape[0], b.shape[0]
    rng = np.random.default_rng(seed)
    point = 0.0
    boot = np.zeros(reps)
    for task in range(a.shape[1]):
        c = _improvement(a[:, task], b[:, task])
        point += c.mean()
        cx = rng.multinomial(n, np.full(n, 1.0 / n), size=reps)  # times each x run is drawn
        cy = rng.multinomial(m, np.full(m, 1.0 / m), size=reps)
        boot += np.einsum("ri,ij,rj->r", cx, c, cy) / (n * m)
    tasks = a.shape[1]
    low, high = np.quantile(boot / tasks, [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0])
    return float(point / tasks), (float(low), float(high))


def performance_profile(
    scores: Any, taus: Any, confidence: float = 0.95, reps: int = 2_000, seed: int = 0
) -> Band:
    """Fraction of runs whose score exceeds each tau, with a bootstrap CI band.

    Parameters
    ----------
    scores : array_like of float, shape (runs,) or (runs, tasks)
        Scores on a common scale across tasks; the fraction counts every
        (run, task) score; resampling is stratified by task.
    taus : array_like of float, shape (k,)
        Thresholds, e.g. ``np.linspace(lowest, highest, 101)``.
    confidence, reps, seed
        As in :func:`bootstrap_ci`.

    Returns
    -------
    Band of float64 arrays, shape (k,)
        ``value[t]`` = fraction of scores > ``taus[t]``; ``low``, ``high``
        the percentile interval over run resamples.
    """
    _check_bootstrap(confidence, reps)
    x = _score_matrix(scores)
    t = np.asarray(taus, dtype=np.float64).ravel()
    if t.size == 0 or not np.all(np.isfinite(t)):
        raise ValueError(f"taus must be a non-empty array of finite thresholds, got {taus!r}")
    runs, tasks = x.shape
    value = (x.ravel()[:, None] > t[None, :]).mean(axis=0)
    rng = np.random.default_rng(seed)
    sample = np.empty((reps, runs * tasks))
    for task in range(tasks):
        sample[:, task * runs : (task + 1) * runs] = x[rng.integers(0, runs, (reps, runs)), task]
    above = (sample[:, :, None] > t[None, None, :]).mean(axis=1)  # (reps, k)
    low, high = np.quantile(above, [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0], axis=0)
    return Band(value, low, high)


def iqm_curve(curves: Any, confidence: float = 0.95, reps: int = 2_000, seed: int = 0) -> Band:
    """IQM over runs at each point of a learning curve, with a bootstrap CI band.

    One resample draws runs (whole curves) with replacement, the same runs at
    every point, as in Agarwal et al.'s sample-efficiency curves.

    Parameters
    ----------
    curves : array_like of float, shape (runs, points)
        ``curves[r, p]``: run r's score at the p-th evaluation (same steps for
        every run).
    confidence, reps, seed
        As in :func:`bootstrap_ci`.

    Returns
    -------
    Band of float64 arrays, shape (points,)
    """
    _check_bootstrap(confidence, reps)
    x = _score_matrix(curves, "curves")
    runs = x.shape[0]
    weights = _iqm_weights(runs)
    value = np.sort(x, axis=0).T @ weights
    rng = np.random.default_rng(seed)
    sample = x[rng.integers(0, runs, (reps, runs))]  # (reps, runs, points)
    boot = np.einsum("rkp,k->rp", np.sort(sample, axis=1), weights)
    low, high = np.quantile(boot, [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0], axis=0)
    return Band(value, low, high)
