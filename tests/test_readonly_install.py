"""A read-only install imports: numba's cache falls back to a private writable directory.

The package is copied into a directory nobody may write, and run with a home
directory nobody may write and no NUMBA_CACHE_DIR, as a service account would
run it. File permissions must really apply: as root, the subprocess runs
under ``setpriv`` without the capabilities that let root ignore them
(``CAP_DAC_OVERRIDE``, ``CAP_DAC_READ_SEARCH``), so it obeys file modes like any
user (``nobody`` itself cannot reach this interpreter, which lives under /root).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ember_np

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or (os.geteuid() == 0 and shutil.which("setpriv") is None),
    reason="needs Linux, and setpriv to drop root's permission override",
)

PACKAGE = Path(ember_np.__file__).parent

# Imports ember_np, runs one small kernel, and says where numba found or put its cache.
PROBE = """
import json, numpy as np, ember_np
from ember_np.rng import Rng, next_double
next_double(Rng(1).state)
s = next_double.stats
print(json.dumps({"file": ember_np.__file__, "path": s.cache_path,
                  "hits": sum(s.cache_hits.values()), "misses": sum(s.cache_misses.values())}))
"""


def install(tmp_path: Path, with_cache: bool) -> Path:
    """Copy the package (with its compiled cache or without) under ``tmp_path/site``."""
    site = tmp_path / "site"
    ignore = ["*.pyc"] if with_cache else ["__pycache__"]
    shutil.copytree(PACKAGE, site / "ember_np", ignore=shutil.ignore_patterns(*ignore))
    return site


def read_only(*paths: Path) -> None:
    for path in paths:
        for root, _, files in os.walk(path):
            for name in files:
                os.chmod(os.path.join(root, name), 0o444)
            os.chmod(root, 0o555)


def run(tmp_path: Path, site: Path, *args: str, restricted: bool = True):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "XDG_"))}
    env.update(HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path / "tmp"), PYTHONPATH=str(site))
    prefix = []
    if restricted and os.geteuid() == 0:
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    return subprocess.run(
        [*prefix, sys.executable, *args], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def probe(tmp_path: Path, site: Path, restricted: bool = True) -> tuple[dict, str]:
    out = run(tmp_path, site, "-c", PROBE, restricted=restricted)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["file"] == str(site / "ember_np" / "__init__.py")  # the copy, not the checkout
    return found, out.stderr


@pytest.fixture
def dirs(tmp_path):
    (tmp_path / "home").mkdir()
    (tmp_path / "tmp").mkdir(mode=0o700)
    read_only(tmp_path / "home")
    yield tmp_path
    for root, _, _ in os.walk(tmp_path):  # let pytest clean up
        os.chmod(root, 0o755)


def assert_one_warning_line(stderr: str, says: str) -> None:
    """One warning on stderr and nothing else. Python 3.13 also prints the source line
    of a warning raised from ``python -c`` code below it, indented: part of that warning."""
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("  ")]
    assert len(lines) == 1 and "CacheWarning" in lines[0] and says in lines[0], stderr


def test_read_only_install_with_a_compiled_cache_uses_it(dirs):
    site = install(dirs, with_cache=True)
    probe(dirs, site, restricted=False)  # an install step that compiled the probe's kernel
    read_only(site)
    helped = run(dirs, site, "-m", "ember_np", "--help")
    assert helped.returncode == 0 and "train" in helped.stdout, helped.stderr
    found, stderr = probe(dirs, site)
    assert_one_warning_line(stderr, "the cache shipped with it is copied there once")
    assert found["path"].startswith(str(dirs / "tmp" / f"ember_np-numba-{os.geteuid()}"))
    assert found["hits"] == 1 and found["misses"] == 0  # loaded, not compiled again


def test_read_only_install_without_a_cache_compiles_once_into_a_private_dir(dirs):
    site = install(dirs, with_cache=False)
    read_only(site)
    helped = run(dirs, site, "-m", "ember_np", "--help")
    assert helped.returncode == 0 and "train" in helped.stdout, helped.stderr
    (first, stderr), (second, _) = probe(dirs, site), probe(dirs, site)
    assert_one_warning_line(stderr, "each kernel compiles once there")
    assert first["misses"] == 1 and second["hits"] == 1 and second["misses"] == 0
    cache = dirs / "tmp" / f"ember_np-numba-{os.geteuid()}"
    assert cache.stat().st_mode & 0o777 == 0o700  # numba's index files are pickles: private


def test_nothing_writable_compiles_without_a_cache_and_says_so(dirs):
    site = install(dirs, with_cache=False)
    blocked = dirs / "blocked"
    blocked.mkdir()
    read_only(site, blocked)
    code = (
        "from pathlib import Path; from ember_np._jit import cache_plan; "
        f"print(cache_plan([Path({str(site / 'ember_np')!r})], [Path({str(blocked)!r}) / 'c']))"
    )
    out = run(dirs, site, "-c", code)
    assert out.returncode == 0, out.stderr
    assert "CachePlan(cache=False, directory=None" in out.stdout
    assert "set NUMBA_CACHE_DIR to a writable directory" in out.stdout
