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
from ember_np.stats import iqm

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
