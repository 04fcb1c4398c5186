"""Episode statistics: records, aggregators, a tracker and evaluation reports."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember_np.types import EpisodeStatus

__all__ = [
    "Aggregator",
    "EpisodeRecord",
    "EvalReport",
    "Last",
    "Max",
    "Mean",
    "Min",
    "RollingMean",
    "StatsTracker",
    "Std",
    "iqm",
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

    def value(self) -> float:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    def fresh(self) -> Aggregator:
        """A new, empty aggregator of the same kind and settings."""
        return type(self)()


class Mean(Aggregator):
    """Arithmetic mean of every value."""

    def __init__(self) -> None:
        self.reset()

    def update(self, value: float) -> None:
        self._n += 1
        self._sum += value

    def value(self) -> float:
        return self._sum / self._n if self._n else math.nan

    def reset(self) -> None:
        self._n = 0
        self._sum = 0.0


class Max(Aggregator):
    """Largest value."""

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
    lo = np.arange(n) / n
    hi = np.arange(1, n + 1) / n
    weights = np.clip(np.minimum(hi, 0.75) - np.maximum(lo, 0.25), 0.0, None) * 2.0
    return float(weights @ x)
