"""The test helpers in naive.py are themselves checked against known values."""

from __future__ import annotations

import naive
import numpy as np
import pytest


@pytest.mark.parametrize(
    "df, statistic, pvalue",
    [(1, 3.841458820694124, 0.05), (6, 12.591587243743977, 0.05), (49, 66.33865826, 0.05),
     (1, 6.6348966010212145, 0.01), (10, 0.0, 1.0)],
)  # fmt: skip
def test_chi_square_pvalue_matches_table(df, statistic, pvalue):
    # build counts with exactly this statistic: k = df + 1 cells around a mean of 1000
    k = df + 1
    expected = 1000.0
    counts = np.full(k, expected)
    if statistic:
        d = np.sqrt(statistic * expected / 2)
        counts[0] += d
        counts[1] -= d
    assert naive.chi_square_pvalue(counts) == pytest.approx(pvalue, rel=1e-5, abs=1e-12)


def test_finite_difference_of_a_quadratic():
    x = np.array([1.0, -2.0, 3.0])
    g = naive.finite_difference_grad(lambda v: float(v @ v), x)
    np.testing.assert_allclose(g, 2 * x, rtol=1e-8)
