"""nox sessions: the test suite on the oldest and the newest supported Python, and the
release check of the built package (https://nox.thea.codes).

    nox                  # all three sessions: package, tests-3.10, tests-3.13
    nox -s tests-3.13    # the suite on one Python; pytest options go after --
    nox -s package       # build, twine check, contents, the wheel in a fresh venv

``tests`` installs the project as a user would: ``python -m build`` makes the sdist and,
from it, the wheel, which pip installs with the test extra. pytest runs from its console
script, so the test process imports that installed copy (the report header says which),
not the checkout.

``package`` builds the sdist and the wheel with ``python -m build``, runs
``twine check --strict`` on both, checks what each holds (the wheel: ember_np/ and its
licenses only; the sdist: every tracked file a packager needs to rebuild and test, and
no caches), then installs the wheel alone in a fresh venv and runs the Quick start's
command there, ``python -m ember_np train CartPole-v1``, shortened to 3,000 steps.

nox finds each Python as ``python3.10`` / ``python3.13`` on PATH. With pyenv, make the
versions visible together first, e.g.
``PYENV_VERSION=3.11.7:3.10.13:3.13.0 nox`` (``.ci/run`` does this).
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import nox

nox.needs_version = ">=2024.3.2"
nox.options.default_venv_backend = "venv"
nox.options.sessions = ["package", "tests"]  # the quick release check first

ROOT = Path(__file__).resolve().parent
OLDEST_AND_NEWEST = ["3.10", "3.13"]  # keep in step with pyproject.toml's classifiers
# The sdist carries these folders whole (MANIFEST.in); CI's own scripts stay out.
SDIST_FOLDERS = ("ember_np/", "tests/", "bench/", "docs/")
SDIST_FILES = ("README.md", "LICENSE", "LICENSE-MIT", "LICENSE-APACHE", "pyproject.toml",
               "MANIFEST.in", "mkdocs.yml", "noxfile.py")  # fmt: skip
CACHES = ("__pycache__/", ".pytest_cache/", ".hypothesis/", ".benchmarks/", ".ci-venv/",
          ".nox/", ".nbi", ".nbc", ".pyc")  # fmt: skip


@nox.session(python=OLDEST_AND_NEWEST)
def tests(session: nox.Session) -> None:
    """The whole test suite against the installed wheel (pytest-xdist, one worker a core)."""
    session.install("build")
    _, wheel = build(session)
    session.install(f"{wheel}[test]")
    session.run("pytest", *session.posargs)


@nox.session(python=OLDEST_AND_NEWEST[-1])
def package(session: nox.Session) -> None:
    """Build, ``twine check --strict``, check the contents, train from the wheel alone."""
    session.install("build", "twine")
    sdist, wheel = build(session)
    tmp = wheel.parent.parent
    session.run("twine", "check", "--strict", str(sdist), str(wheel))
    check_wheel(wheel)
    check_sdist(sdist)
    session.log(f"{wheel.name} and {sdist.name}: contents as expected")

    # A fresh venv with nothing but the wheel and what it requires, used from outside
    # the checkout so that `python -m ember_np` cannot import the sources here.
    venv = tmp / "fresh-venv"
    session.run("python", "-m", "venv", "--clear", str(venv))
    python = str(venv / "bin" / "python")
    session.run(python, "-m", "pip", "install", "--quiet", str(wheel), external=True)
    session.chdir(tmp)
    where = "import ember_np as e, sys; assert e.__file__.startswith(sys.prefix), e.__file__"
    session.run(python, "-c", where, external=True)
    runs = tmp / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    session.run(python, "-m", "ember_np", "train", "CartPole-v1", "--steps", "3000",
                "--root", str(runs), external=True)  # fmt: skip
    (run_dir,) = (runs / "CartPole-v1" / "rainbow").iterdir()
    for name in ("best.npz", "latest.npz"):
        if not (run_dir / "checkpoints" / name).is_file():
            session.error(f"the training from the wheel left no {name} in {run_dir}")


def build(session: nox.Session) -> tuple[Path, Path]:
    """``python -m build``: the sdist, then the wheel built from the unpacked sdist (so no
    stale ``build/`` folder of the checkout can leak into it), in the session's tmp."""
    dist = Path(session.create_tmp()).resolve() / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.run("python", "-m", "build", "--outdir", str(dist), str(ROOT))
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    return sdist, wheel


def check_wheel(wheel: Path) -> None:
    """ember_np/ (with py.typed and the dashboard's page) and its dist-info, nothing else."""
    names = zipfile.ZipFile(wheel).namelist()
    stray = [n for n in names if not n.startswith(("ember_np/", "ember_np-"))]
    cached = [n for n in names if any(c in n for c in CACHES)]
    assert not stray, f"the wheel holds files outside ember_np/: {stray}"
    assert not cached, f"the wheel holds caches: {cached}"
    for need in ("ember_np/py.typed", "ember_np/dashboard/static/index.html"):
        assert need in names, f"the wheel lacks {need}"
    licenses = {n.rsplit("/", 1)[-1] for n in names if "/licenses/" in n}
    assert licenses == {"LICENSE", "LICENSE-MIT", "LICENSE-APACHE"}, licenses


def check_sdist(sdist: Path) -> None:
    """Every tracked file of SDIST_FOLDERS and SDIST_FILES, and no caches."""
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    cached = sorted(n for n in names if any(c in n for c in CACHES))
    assert not cached, f"the sdist holds caches: {cached}"
    missing = [f for f in SDIST_FILES if f not in names]
    assert not missing, f"the sdist lacks {missing}"
    try:  # outside a git checkout (an unpacked sdist), the list above is the check
        tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True,
                                 text=True, check=True).stdout.split()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return
    missing = [f for f in tracked if f.startswith(SDIST_FOLDERS) and f not in names]
    assert not missing, f"the sdist lacks tracked files: {missing}"
