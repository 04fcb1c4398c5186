"""Stats: aggregators against NumPy, the tracker, records and reports."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ember_np import (
    EpisodeRecord,
    EpisodeStatus,
    EvalReport,
    Last,
    Max,
    Mean,
    Min,
    RollingMean,
    StatsTracker,
    Std,
)
from ember_np.stats import (
    bootstrap_ci,
    iqm,
    iqm_curve,
    performance_profile,
    probability_of_improvement,
)

VALUES = [3.0, -1.0, 4.0, 1.5, 9.0, 2.0, 6.5]


@pytest.mark.parametrize(
    "agg, expected",
    [
        (Mean(), np.mean(VALUES)),
        (Max(), max(VALUES)),
        (Min(), min(VALUES)),
        (Last(), VALUES[-1]),
        (RollingMean(3), np.mean(VALUES[-3:])),
        (RollingMean(100), np.mean(VALUES)),
        (Std(), np.std(VALUES)),
    ],
)
def test_aggregators_match_numpy(agg, expected):
    assert math.isnan(agg.value())
    for v in VALUES:
        agg.update(v)
    assert agg.value() == pytest.approx(expected)
    agg.reset()
    assert math.isnan(agg.value())
    agg.update(2.0)
    assert agg.value() == pytest.approx(0.0 if isinstance(agg, Std) else 2.0)


def test_rolling_mean_window_validated():
    with pytest.raises(ValueError, match="window must be a positive integer, got 0"):
        RollingMean(0)


def record(reward, length, **extras):
    return EpisodeRecord(reward, length, EpisodeStatus.TERMINATED, extras)


def test_tracker_defaults_and_custom_stats():
    t = StatsTracker()
    t.add("best", "reward", Max()).add("recent", "reward", RollingMean(2))
    t.add("lr", "loss", Last()).add("per_step", lambda r: r.total_reward / r.length, Mean())
    t.update(record(10.0, 5, loss=0.5))
    t.update(record(20.0, 10))
    t.update(record(30.0, 30, loss=0.25))
    s = t.summary()
    assert s["episode_reward"] == pytest.approx(20.0)
    assert s["episode_length"] == pytest.approx(15.0)
    assert s["best"] == 30.0 and s["recent"] == pytest.approx(25.0)
    assert s["lr"] == 0.25  # the record without "loss" was skipped
    assert s["per_step"] == pytest.approx((2 + 2 + 1) / 3)
    fresh = t.fresh()
    assert set(fresh.summary()) == set(s) and all(math.isnan(v) for v in fresh.summary().values())
    t.reset()
    assert all(math.isnan(v) for v in t.summary().values())


def test_update_columns_gives_the_statistics_of_one_record_at_a_time():
    """Episodes folded as columns (a fused chunk's rewards and lengths) give every
    statistic bit for bit what one EpisodeRecord at a time gives, and a Mean is the
    plain left-to-right sum over the count."""
    rng = np.random.default_rng(1)
    rewards = (rng.normal(size=2_000) * 1e3).tolist()  # sums that rounding order would change
    lengths = rng.integers(1, 500, size=2_000).tolist()
    aggregators = {"max": Max, "min": Min, "last": Last, "std": Std,
                   "recent": lambda: RollingMean(7)}  # fmt: skip
    by_columns, by_records = StatsTracker(), StatsTracker()
    for tracker in (by_columns, by_records):
        for name, make in aggregators.items():
            tracker.add(f"{name}_reward", "reward", make()).add(f"{name}_length", "length", make())
    assert not by_columns.needs_records
    by_columns.update_columns(rewards[:700], lengths[:700])  # in two chunks, as a trainer does
    by_columns.update_columns(rewards[700:], lengths[700:])
    for reward, length in zip(rewards, lengths):
        by_records.update(record(reward, length))
    columns, records = by_columns.summary(), by_records.summary()
    assert columns == records
    assert all(type(columns[k]) is type(records[k]) for k in columns)  # floats both ways
    total = 0.0
    for reward in rewards:
        total += reward
    assert columns["episode_reward"] == total / len(rewards)
    assert columns["episode_length"] == sum(map(float, lengths)) / len(lengths)
    assert columns["recent_reward"] == pytest.approx(np.mean(rewards[-7:]))


def test_update_columns_refuses_statistics_that_read_more_than_reward_and_length():
    for source in ("loss", lambda r: r.length):
        tracker = StatsTracker().add("x", source, Mean())
        assert tracker.needs_records
        with pytest.raises(ValueError, match="update_columns folds only 'reward' and 'length'"):
            tracker.update_columns([1.0], [1])
    with pytest.raises(ValueError, match="one length per reward, got 2 rewards and 1 lengths"):
        StatsTracker().update_columns([1.0, 2.0], [1])


def test_tracker_rejects_bad_arguments():
    with pytest.raises(ValueError, match="aggregator must be an Aggregator"):
        StatsTracker().add("x", "reward", max)
    with pytest.raises(ValueError, match="source must be"):
        StatsTracker().add("x", 3, Mean())


def test_record_dict_round_trip():
    r = EpisodeRecord(12.5, 7, EpisodeStatus.TRUNCATED, {"loss": 0.1})
    assert r.to_dict() == {
        "total_reward": 12.5,
        "length": 7,
        "status": "TRUNCATED",
        "extras": {"loss": 0.1},
    }
    assert EpisodeRecord.from_dict(r.to_dict()) == r


def test_eval_report_str_and_print(capsys):
    report = EvalReport(5000, 10, {"episode_reward": 123.4567, "episode_length": 123.0})
    text = str(report)
    assert "step 5000" in text and "10 episodes" in text and "123.4567" in text
    report.print()
    assert capsys.readouterr().out.strip() == text
    assert report.mean_reward == pytest.approx(123.4567)


def _naive_iqm(scores):
    """Middle 50% by sorting and slicing: valid where the count is a multiple of 4."""
    x = sorted(scores)
    n = len(x)
    assert n % 4 == 0
    middle = x[n // 4 : n - n // 4]
    return sum(middle) / len(middle)


def test_iqm_matches_trimmed_mean_when_count_is_multiple_of_four():
    rng = np.random.default_rng(0)
    for n in (4, 8, 20, 100):
        x = rng.normal(size=n) * 100
        assert iqm(x) == pytest.approx(_naive_iqm(list(x)), rel=1e-12)


def test_iqm_general_count_by_hand():
    assert iqm([7.0]) == 7.0
    # n = 2: each score covers half of [0.25, 0.75].
    assert iqm([0.0, 10.0]) == pytest.approx(5.0)
    # n = 5: quantile cells of width 0.2; [0.25, 0.75] takes 0.15 of x2,
    # all of x3, 0.15 of x4 (x sorted): (0.15*2 + 0.2*3 + 0.15*4) * 2 = 3.0.
    assert iqm([5.0, 1.0, 4.0, 3.0, 2.0]) == pytest.approx(3.0)
    # An outlier outside the middle half does not move it.
    assert iqm([1.0, 2.0, 3.0, 1e9]) == pytest.approx(2.5)


def test_iqm_rejects_empty_and_nonfinite():
    with pytest.raises(ValueError, match="at least one score"):
        iqm([])
    with pytest.raises(ValueError, match="finite"):
        iqm([1.0, float("nan")])


# -- statistics over runs ------------------------------------------------------------


def _naive_statistic(values, statistic, threshold=None):
    v = list(values)
    if statistic == "iqm":
        return iqm(v)
    if statistic == "mean":
        return sum(v) / len(v)
    if statistic == "median":
        return float(np.median(v))
    return sum(max(threshold - s, 0.0) for s in v) / len(v)


def _naive_bootstrap_ci(scores, statistic, confidence, reps, seed, threshold=None):
    """One resample at a time, with the documented draws: task by task, (reps, runs) indices."""
    x = np.asarray(scores, dtype=np.float64)
    x = x[:, None] if x.ndim == 1 else x
    runs, tasks = x.shape
    rng = np.random.default_rng(seed)
    draws = [rng.integers(0, runs, (reps, runs)) for _ in range(tasks)]
    values = []
    for r in range(reps):
        pooled = [x[i, t] for t in range(tasks) for i in draws[t][r]]
        values.append(_naive_statistic(pooled, statistic, threshold))
    a = (1 - confidence) / 2
    return tuple(np.quantile(values, [a, 1 - a]))


@pytest.mark.parametrize("statistic", ["iqm", "mean", "median", "optimality_gap"])
@pytest.mark.parametrize("shape", [(7,), (20,), (6, 3)])
def test_bootstrap_ci_matches_a_slow_reference(statistic, shape):
    x = np.random.default_rng(3).normal(size=shape) * 10
    kwargs = {"threshold": 5.0} if statistic == "optimality_gap" else {}
    fast = bootstrap_ci(x, statistic, confidence=0.9, reps=300, seed=7, **kwargs)
    slow = _naive_bootstrap_ci(x, statistic, 0.9, 300, 7, **kwargs)
    assert fast == pytest.approx(slow, rel=1e-12, abs=1e-12)


def test_bootstrap_ci_by_hand():
    assert bootstrap_ci([4.0] * 9) == (4.0, 4.0)
    # Two runs {0, 1}: a resample's mean is 0, 0.5 or 1 with probabilities 1/4, 1/2, 1/4.
    assert bootstrap_ci([0.0, 1.0], "mean", confidence=0.4) == (0.5, 0.5)
    assert bootstrap_ci([0.0, 1.0], "mean", confidence=0.9) == (0.0, 1.0)
    # Optimality gap of runs all at or above the threshold is 0.
    assert bootstrap_ci([5.0, 7.0, 9.0], "optimality_gap", threshold=5.0) == (0.0, 0.0)
    # Same arguments, same interval; another seed, another draw.
    x = np.arange(10.0) ** 2
    assert bootstrap_ci(x, seed=1) == bootstrap_ci(x, seed=1) != bootstrap_ci(x, seed=2)


def test_bootstrap_ci_of_iqm_covers_the_true_iqm():
    """20 runs from Exp(1), 200 times: the 95% interval covers the true IQM >= 90% of the time."""
    # True IQM: 2 * integral over [0.25, 0.75] of the quantile -ln(1 - u) du.
    true = 2 * (0.5 - 0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    rng = np.random.default_rng(11)
    covered = 0
    for rep in range(200):
        low, high = bootstrap_ci(rng.exponential(size=20), "iqm", reps=2_000, seed=rep)
        covered += low <= true <= high
    assert covered >= 180, covered


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"statistic": "max"}, "statistic must be one of iqm, mean, median, optimality_gap"),
        ({"statistic": "optimality_gap"}, "needs a finite threshold"),
        ({"confidence": 95}, r"confidence must be in \(0, 1\)"),
        ({"reps": 0}, "reps must be a positive integer"),
    ],
)
def test_bootstrap_ci_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        bootstrap_ci([1.0, 2.0], **kwargs)


@pytest.mark.parametrize(
    "scores, message",
    [([], "at least one run"), ([1.0, math.nan], "must be finite"), (np.ones((2, 2, 2)), "shape")],
)
def test_bootstrap_ci_bad_scores(scores, message):
    with pytest.raises(ValueError, match=message):
        bootstrap_ci(scores)


def _naive_improvement(x, y):
    total = 0.0
    for a in x:
        for b in y:
            total += 1.0 if a > b else (0.5 if a == b else 0.0)
    return total / (len(x) * len(y))


def test_probability_of_improvement_against_the_direct_formula():
    p, _ = probability_of_improvement([1.0, 2.0], [1.0])
    assert p == 0.75  # (tie 0.5 + win 1) / 2
    rng = np.random.default_rng(5)
    x = rng.integers(0, 6, 15).astype(float)  # many ties
    y = rng.integers(0, 6, 11).astype(float)
    p, (low, high) = probability_of_improvement(x, y, reps=400, seed=3)
    assert p == pytest.approx(_naive_improvement(x, y), abs=1e-15)
    assert low <= p <= high
    # The interval: the documented draws, one resample at a time.
    draw = np.random.default_rng(3)
    cx = draw.multinomial(15, np.full(15, 1 / 15), size=400)
    cy = draw.multinomial(11, np.full(11, 1 / 11), size=400)
    boot = [_naive_improvement(np.repeat(x, cx[r]), np.repeat(y, cy[r])) for r in range(400)]
    assert (low, high) == pytest.approx(tuple(np.quantile(boot, [0.025, 0.975])), abs=1e-12)
    # Symmetry: P(X > Y) + P(Y > X) = 1.
    q, _ = probability_of_improvement(y, x, reps=10)
    assert p + q == pytest.approx(1.0)


def test_probability_of_improvement_over_tasks_averages_them():
    x = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    y = np.array([[2.0, 0.0], [2.0, 0.0]])
    p, _ = probability_of_improvement(x, y, reps=50)
    assert p == pytest.approx((_naive_improvement(x[:, 0], y[:, 0]) + 1.0) / 2)
    with pytest.raises(ValueError, match="same tasks"):
        probability_of_improvement(x, y[:, :1])


def test_performance_profile_counts_runs_above_tau():
    x = np.array([0.0, 1.0, 2.0, 3.0, 3.0])
    taus = [-1.0, 0.0, 2.5, 3.0]
    band = performance_profile(x, taus, reps=500)
    assert band.value.tolist() == [1.0, 0.8, 0.4, 0.0]
    assert np.all(band.low <= band.value) and np.all(band.value <= band.high)
    assert band.low[0] == band.high[0] == 1.0 and band.high[-1] == 0.0
    rng = np.random.default_rng(0)
    draws = rng.integers(0, 5, (500, 5))
    naive = [[sum(x[i] > t for i in draws[r]) / 5 for t in taus] for r in range(500)]
    assert band.low == pytest.approx(np.quantile(naive, 0.025, axis=0))
    assert band.high == pytest.approx(np.quantile(naive, 0.975, axis=0))


def test_iqm_curve_is_the_iqm_at_each_point_with_whole_runs_resampled():
    rng = np.random.default_rng(2)
    curves = rng.normal(size=(9, 4)).cumsum(axis=1)
    band = iqm_curve(curves, reps=300, seed=4)
    assert band.value == pytest.approx([iqm(curves[:, p]) for p in range(4)])
    draws = np.random.default_rng(4).integers(0, 9, (300, 9))
    naive = [[iqm(curves[draws[r], p]) for p in range(4)] for r in range(300)]
    assert band.low == pytest.approx(np.quantile(naive, 0.025, axis=0))
    assert band.high == pytest.approx(np.quantile(naive, 0.975, axis=0))
