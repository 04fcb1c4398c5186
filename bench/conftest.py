"""Shared fixtures for the pytest-benchmark suite (run: ``pytest bench``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from streams import fill  # noqa: E402

from ember_np import CircularBuffer, Rng  # noqa: E402

#: The speed-comparison settings: S1 = ember-rl's CartPole
#: network, S2 = the RL Zoo's CartPole network; both use batch 64.
SETTINGS = {"S1": (4, 64, 64, 2), "S2": (4, 256, 256, 2)}
BATCH = 64


def filled_buffer(capacity: int = 10_000, obs_size: int = 4, n: int = 10_000) -> CircularBuffer:
    """A buffer holding ``n`` transitions in episodes of 50 steps."""
    buf = CircularBuffer(capacity, obs_size, 2)
    fill(buf, n, obs_size)
    return buf


@pytest.fixture(scope="session")
def buffer() -> CircularBuffer:
    return filled_buffer()


@pytest.fixture
def rng() -> Rng:
    return Rng(0)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Benchmarks time one process at a time: pyproject's ``-n auto`` (the test
    suite's xdist workers) is turned off for ``pytest bench``, which pytest-benchmark
    would otherwise disable."""
    if getattr(config.option, "numprocesses", None):
        config.option.numprocesses = 0
        config.option.dist = "no"


def pytest_benchmark_update_json(config, benchmarks, output_json) -> None:
    """Keep the statistics, drop each round's raw timing (megabytes, and not needed
    by ``pytest-benchmark compare``)."""
    for bench in output_json["benchmarks"]:
        bench["stats"].pop("data", None)
