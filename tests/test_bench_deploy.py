"""bench/deploy.py runs end to end (one process per path, few calls; the figures come from full runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_deploy_bench_writes_its_table(tmp_path):
    pytest.importorskip("onnxruntime")
    out = tmp_path / "deploy.md"
    res = subprocess.run(
        [sys.executable, "bench/deploy.py", "--runs", "1", "--calls", "200",
         "--paths", "numpy,onnxruntime", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    table = out.read_text()
    assert table.startswith("`python bench/deploy.py --runs 1 --calls 200")
    assert "| ember_np, NumPy only" in table and "| onnxruntime, exported `.onnx`" in table
    results = json.loads(out.with_suffix(".json").read_text())
    assert set(results) == {"numpy", "onnxruntime"}
    for r in results.values():
        assert 0 < r["import_s"] < r["first_action_s"]
        assert r["peak_rss_mb"] > 10 and r["installed_mb"] > 10 and r["per_call_us"] > 0
    # the NumPy-only path installs less than onnxruntime with its dependencies
    assert results["numpy"]["installed_mb"] < results["onnxruntime"]["installed_mb"]
