"""The benchmark scripts in bench/ run end to end (tiny budgets; the figures come from full runs)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

from learning import chance_of_bar  # noqa: E402
from streams import episode_stream  # noqa: E402

HAS_SB3 = importlib.util.find_spec("stable_baselines3") is not None


def run(*args: str, timeout: int = 300) -> str:
    out = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=BENCH.parent
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_chance_of_bar_counts_five_seed_subsets():
    assert chance_of_bar([500.0] * 6, 475) == 1.0
    assert chance_of_bar([500.0] * 5 + [0.0], 475) == 1 / 6  # only the subset without the 0
    assert chance_of_bar([500.0] * 4 + [400.0] * 2, 475) == 2 / 6  # at most one 400
    assert np.isnan(chance_of_bar([500.0] * 4, 475))


def test_episode_stream_is_episodic():
    items = list(episode_stream(120, 3, length=50))
    assert len(items) == 120
    for i, (_, _, _, next_obs, status) in enumerate(items[:-1]):
        following = items[i + 1][0]
        assert status == int((i + 1) % 50 == 0)
        # within an episode the next transition starts where this one ended
        assert np.array_equal(following, next_obs) == (status == 0)


def test_learning_bench_writes_its_table(tmp_path):
    out = tmp_path / "learning.md"
    run("bench/learning.py", "--envs", "CartPole-v1", "--seeds", "2", "--jobs", "2",
        "--steps", "2000", "--out", str(out), "--plot", str(tmp_path / "curves.png"))  # fmt: skip
    table = out.read_text()
    assert "--steps 2000" in table
    assert "| CartPole-v1 (2,000) | >= 475 |" in table
    results = json.loads(out.with_suffix(".json").read_text())["CartPole-v1"]
    assert sorted(r["seed"] for r in results) == [0, 1]
    for r in results:
        assert len(r["curve"]) == 10 and 8.0 <= r["final_mean"] <= 500.0


@pytest.mark.parametrize("lib", ["ember_np", "ember_np-fused"])
def test_compare_sb3_speed_worker(lib):
    result = json.loads(
        run("bench/compare_sb3.py", "--worker", "speed", lib, "S1").splitlines()[-1]
    )
    assert result["steps_per_s"] > 0 and result["peak_rss_mb"] > 0


def test_compare_sb3_memory_worker_counts_bytes_of_an_episodic_buffer():
    result = json.loads(run("bench/compare_sb3.py", "--worker", "memory", "ember_np", "8"))
    # 8 floats, uint8 action, reward, status, next_ref; a finals row and its
    # free-stack slot (32 + 8 bytes) per episode
    assert result["bytes_per_transition"] == pytest.approx(32 + 1 + 4 + 1 + 4 + 40 / 50, abs=0.05)


@pytest.mark.skipif(not HAS_SB3, reason="needs the bench extra (torch, stable-baselines3)")
def test_compare_sb3_memory_worker_for_sb3():
    result = json.loads(run("bench/compare_sb3.py", "--worker", "memory", "sb3", "8"))
    assert result["bytes_per_transition"] == 84.0
