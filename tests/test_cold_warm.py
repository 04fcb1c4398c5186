"""A run trains to the same bytes whether its kernels were compiled in the process
(an empty numba cache) or loaded from numba's cache.

numba links each compiled kernel into every compiled caller and LLVM optimises it
there again; under fast-math's ``reassoc`` a sum could be vectorised differently in
each copy, and which copy ran depended on what the process compiled and what it
loaded. The default presets of Acrobot-v1 (C51, LayerNorm, dueling) and CartPole-v1
(LayerNorm, dueling, prioritized n-step replay) then wrote other checkpoints and logs
from an empty cache than from a full one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import files_of

#: Short runs of each env's default preset; updates start after 128 steps.
RUNS = {
    "Acrobot-v1": ["--steps", "400", "--set", "min_replay_size=128"],
    "CartPole-v1": ["--steps", "400", "--set", "min_replay_size=128"],
}
COMMON = ["--seed", "5", "--eval-every", "200", "--eval-episodes", "1",
          "--checkpoint-freq", "200", "--quiet"]  # fmt: skip

# One process trains every run (each through the command line's entry point) and
# prints the numba cache's file count, so the test sees it started empty.
_TRAIN = """
import json, sys
from pathlib import Path
from ember_np.cli import main
root = Path(sys.argv[1])
runs = json.loads(sys.argv[2])
for env_id, args in runs.items():
    assert main(["train", env_id, *args, "--root", str(root)]) == 0
"""


def _train_all(root: Path, cache: Path) -> dict[str, dict[str, bytes]]:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    runs = {env_id: [*args, *COMMON] for env_id, args in RUNS.items()}
    out = subprocess.run([sys.executable, "-c", _TRAIN, str(root), json.dumps(runs)],
                         capture_output=True, text=True, env=env, timeout=1500)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    found = {}
    for env_id in RUNS:
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
