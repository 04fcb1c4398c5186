"""The test helpers in naive.py are themselves checked against known values."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import helpers
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


# -- the bounded waits on child processes ----------------------------------------------


def child(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def test_read_line_returns_a_line_and_kills_a_silent_child_after_its_timeout():
    talker = child("print('hello', flush=True); import time; time.sleep(60)")
    try:
        assert helpers.read_line(talker, timeout=60) == "hello\n"
    finally:
        talker.kill()
        talker.wait()
    silent = child("import time; time.sleep(60)")
    with pytest.raises(AssertionError, match="no line from .* within 0.5 s; killed it"):
        helpers.read_line(silent, timeout=0.5)
    assert silent.wait(timeout=10) == -signal.SIGKILL


def test_still_running_fails_with_the_output_of_an_exited_or_overdue_child():
    waiting = child("import time; time.sleep(60)")
    helpers.still_running(waiting, time.time() + 60, "nothing")  # alive, in time: returns
    with pytest.raises(AssertionError, match="waiting for a result, the process was still"):
        helpers.still_running(waiting, time.time() - 1, "a result")
    assert waiting.returncode == -signal.SIGKILL
    done = child("import sys; print('out'); print('why', file=sys.stderr); sys.exit(3)")
    done.wait(timeout=30)
    with pytest.raises(AssertionError, match=r"exited with 3:\nout\n\nwhy"):
        helpers.still_running(done, time.time() + 60, "a result")
