"""A run trains to the same bytes whether its kernels were compiled in the process
(an empty numba cache) or loaded from numba's cache.

numba links each compiled kernel into every compiled caller and LLVM optimises it
there again; under fast-math's ``reassoc`` a sum could be vectorised differently in
each copy, and which copy ran depended on what the process compiled and what it
loaded. CartPole-v1's default preset (LayerNorm) and Acrobot-v1 with a C51 head then
wrote other checkpoints and logs from an empty cache than from a full one. Each run
takes a few seconds; compiling its kernels from nothing takes a minute or two.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import files_of

#: The default preset of CartPole-v1 (LayerNorm, dueling, prioritized n-step replay) and
#: Acrobot-v1's ``zoo`` with a C51 head: short runs, but long enough that an evaluation
#: and a few hundred updates pass (from an empty cache they once diverged after those).
RUNS = {
    "CartPole-v1": ["--steps", "2500"],
    "Acrobot-v1": ["--preset", "zoo", "--steps", "1500",
                   "--set", "distributional=c51", "v_min=-100", "v_max=0"],
}  # fmt: skip
COMMON = ["--seed", "3", "--eval-every", "700", "--eval-episodes", "2",
          "--checkpoint-freq", "600", "--keep", "2", "--quiet"]  # fmt: skip


def _train_all(root: Path, cache: Path) -> dict[str, dict[str, bytes]]:
    """Train every run of RUNS under ``root``, one process each (as ``ember-np train``),
    with ``cache`` as numba's cache; every file each run wrote."""
    # compiled in the run's own process, not by a first run's worker processes (the
    # run would then load every kernel from the cache, as a warm one does)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), EMBER_NP_PRECOMPILE="0")
    found = {}
    for env_id, args in RUNS.items():
        command = [sys.executable, "-m", "ember_np", "train", env_id, *args, *COMMON]
        out = subprocess.run([*command, "--root", str(root)], capture_output=True, text=True,
                             env=env, timeout=1500)  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        (run_dir,) = (p.parent for p in (root / env_id).rglob("config.json"))
        found[env_id] = files_of(run_dir)
    return found


@pytest.mark.timeout(3000)  # compiles every kernel of both runs from scratch
def test_runs_from_an_empty_cache_and_a_full_one_write_the_same_bytes(tmp_path):
    cache = tmp_path / "numba_cache"
    cache.mkdir()
    cold = _train_all(tmp_path / "cold", cache)
    assert list(cache.rglob("*.nbi")), "the first process filled the cache"
    warm = _train_all(tmp_path / "warm", cache)
    for env_id in RUNS:
        assert any(name.endswith(".npz") for name in cold[env_id]), cold[env_id].keys()
        assert sorted(cold[env_id]) == sorted(warm[env_id])
        differ = [name for name in cold[env_id] if cold[env_id][name] != warm[env_id][name]]
        assert differ == [], f"{env_id}: these files differ cold/warm: {differ}"
