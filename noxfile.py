"""nox sessions: the release check of the built package, and the test suite on it, on
the oldest and the newest supported Python (https://nox.thea.codes).

    nox                  # tests-3.10 and tests-3.13: the suite on each, from the wheel
    nox -s tests-3.13    # one Python; pytest options go after --: nox -s tests-3.13 -- -x
    nox -s package-3.10  # the release check alone (~2 minutes from cold)
    nox -s readme-3.10   # the README's test command, verbatim, in a venv of 3.10
    nox -s lint          # ruff check and ruff format --check: ember_np, tests, bench
    nox -s typecheck     # mypy over ember_np (pyproject.toml's [tool.mypy]), zero errors

Each ``tests`` session starts with the release check (``package``): ``python -m build``
makes the sdist and, from it, the wheel; ``twine check --strict`` checks both; their
contents are checked (the wheel: ember_np/ with py.typed, the dashboard's page and the
license files, nothing else; the sdist: every tracked file a packager needs to rebuild
and test, and no caches). The wheel alone then goes into the session's new venv, which
runs the Quick start's command, ``python -m ember_np train CartPole-v1``, for 3,000 steps.
Then the test extra is installed beside it and pytest runs from its console script, so
the test process imports the installed wheel (the report header says which copy).

nox finds each Python as ``python3.10`` / ``python3.13`` on PATH. With pyenv, make the
versions visible together first, e.g.
``PYENV_VERSION=3.11.7:3.10.13:3.13.0 nox``. ``.ci/run`` runs
``nox -s lint typecheck readme-3.10 tests-3.13 package-3.10``: the checks of the
sources, the README's test command verbatim on 3.10 (the ``readme`` session, from the
checkout) and the suite on 3.13 from the wheel, each once from an empty numba cache, and
the release check on both. ``lint`` and ``typecheck`` run on the newest Python only
(mypy checks against the oldest, 3.10, whatever runs it: ``python_version``).
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
nox.options.sessions = ["tests"]  # each begins with the release check (package)

ROOT = Path(__file__).resolve().parent
OLDEST_AND_NEWEST = ["3.10", "3.13"]  # keep in step with pyproject.toml's classifiers
NEWEST = OLDEST_AND_NEWEST[-1]
LINTED = ("ember_np", "tests", "bench")  # what ruff checks (CONTRIBUTING.md)
# The optional extras whose packages ember_np imports: mypy checks against their types.
TYPED_EXTRAS = "lint,onnx,tune,dask,plot,tensorboard"
# The sdist carries these folders whole (MANIFEST.in); CI's own scripts stay out.
SDIST_FOLDERS = ("ember_np/", "tests/", "bench/", "docs/")
SDIST_FILES = ("README.md", "CONTRIBUTING.md", "LICENSE", "LICENSE-MIT", "LICENSE-APACHE",
               "pyproject.toml", "MANIFEST.in", "mkdocs.yml", "noxfile.py")  # fmt: skip
CACHES = ("__pycache__/", ".pytest_cache/", ".hypothesis/", ".benchmarks/", ".ci-venv/",
          ".nox/", ".nbi", ".nbc", ".pyc")  # fmt: skip


@nox.session(python=OLDEST_AND_NEWEST)
def tests(session: nox.Session) -> None:
    """The release check, then the whole test suite against the installed wheel."""
    wheel = release_check(session)
    session.install(f"{wheel}[test]")
    session.run("pytest", *session.posargs)


@nox.session(python=OLDEST_AND_NEWEST)
def readme(session: nox.Session) -> None:
    """The README's test command, verbatim, in the session's venv: an editable install of
    the checkout with the test extra, then the suite (what a newcomer runs; needs the
    checkout's ``.ci/readme_command.py``, which reads the command from README.md)."""
    command = subprocess.run([session.virtualenv.bin + "/python", str(ROOT / ".ci" /
                              "readme_command.py"), "test-command"], capture_output=True,
                             text=True, check=True).stdout.strip()  # fmt: skip
    session.chdir(ROOT)
    session.run("bash", "-c", command, external=True)  # `python` is the session venv's


@nox.session(python=OLDEST_AND_NEWEST)
def package(session: nox.Session) -> None:
    """The release check alone (the tests sessions start with it)."""
    release_check(session)


@nox.session(python=NEWEST)
def lint(session: nox.Session) -> None:
    """``ruff check`` and ``ruff format --check`` over the package, the tests and the
    benchmarks (pyproject.toml's [tool.ruff]); ruff is the lint extra's."""
    extras = nox.project.load_toml(ROOT / "pyproject.toml")["project"]["optional-dependencies"]
    session.install(*(req for req in extras["lint"] if req.startswith("ruff")))
    session.chdir(ROOT)
    session.run("ruff", "check", *LINTED)
    session.run("ruff", "format", "--check", *LINTED)


@nox.session(python=NEWEST)
def typecheck(session: nox.Session) -> None:
    """mypy over ember_np with zero errors (pyproject.toml's [tool.mypy]), in a venv that
    holds the package's dependencies and the extras it imports, so their types count."""
    session.install("-e", f"{ROOT}[{TYPED_EXTRAS}]")
    session.chdir(ROOT)
    session.run("mypy")


def release_check(session: nox.Session) -> Path:
    """Build, ``twine check --strict``, check the contents; install the wheel alone in the
    session's new venv and run the Quick start's command there; return the wheel.

    Outside the checkout, so that ``python -m ember_np`` cannot import the sources here.
    This first training also compiles the training kernels once, in one process, before
    the test suite's workers and their subprocesses would all compile them at once.
    """
    tmp = Path(session.create_tmp()).resolve()
    tools = tmp / "tools"  # build and twine stay out of the venv the wheel goes into
    session.run("python", "-m", "venv", "--clear", str(tools))
    session.run(str(tools / "bin" / "python"), "-m", "pip", "install", "--quiet", "build",
                "twine", external=True)  # fmt: skip
    dist = tmp / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    # the sdist, then the wheel from the unpacked sdist: no stale build/ of the checkout
    session.run(str(tools / "bin" / "python"), "-m", "build", "--outdir", str(dist), str(ROOT),
                external=True)  # fmt: skip
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    session.run(str(tools / "bin" / "twine"), "check", "--strict", str(sdist), str(wheel),
                external=True)  # fmt: skip
    check_wheel(wheel)
    check_sdist(sdist)
    session.log(f"{wheel.name} and {sdist.name}: contents as expected")

    session.install(str(wheel))
    session.chdir(tmp)
    where = "import ember_np as e, sys; assert e.__file__.startswith(sys.prefix), e.__file__"
    session.run("python", "-c", where)
    runs = tmp / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    session.run("python", "-m", "ember_np", "train", "CartPole-v1", "--steps", "3000",
                "--root", str(runs))  # fmt: skip
    (run_dir,) = (runs / "CartPole-v1" / "rainbow").iterdir()
    for name in ("best.npz", "latest.npz"):
        if not (run_dir / "checkpoints" / name).is_file():
            session.error(f"the training from the wheel left no {name} in {run_dir}")
    session.chdir(ROOT)
    return wheel


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
