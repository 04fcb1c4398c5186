"""``ember-np tune``'s worker processes and signals, with real processes.

Ctrl-C (SIGINT) to the command, or the command killed (SIGTERM, SIGKILL):
its workers end too, each marks its running trial failed on the way, so no
trial is left running in the storage (journal files have no heartbeat to
fail one later), and running the command again finishes exactly --trials.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import helpers
import pytest

optuna = pytest.importorskip("optuna")

from optuna.trial import TrialState  # noqa: E402

from ember_np.tune import open_storage  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TRIALS = 3  # the rerun's --trials
FIRST = 20  # the first command's --trials: its workers, if they outlived it, would run for long
# ~1.5 s a trial: long enough to signal the command while both workers train.
SLOW = ["--steps", "15000", "--seeds", "2", "--evals", "3", "--eval-episodes", "3",
        "--set", "hidden_sizes=[32]", "train_freq=4", "gradient_steps=1", "batch_size=32",
        "--quiet", "--workers", "2", "--pruner", "none"]  # fmt: skip


def storage_for(tmp_path: Path, kind: str) -> str:
    return str(tmp_path / "study.log") if kind == "journal" else f"sqlite:///{tmp_path}/study.db"


def command(tmp_path: Path, storage: str, n_trials: int = FIRST) -> subprocess.Popen:
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    return subprocess.Popen(
        [sys.executable, "-m", "ember_np", "tune", "CartPole-v1", "--dir", str(tmp_path / "t"),
         "--storage", storage, "--trials", str(n_trials), *SLOW],
        cwd=tmp_path, env=env, start_new_session=True,  # signals reach the command only
        preexec_fn=helpers.interruptible,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip


def trials(storage: str) -> list:
    return optuna.load_study(study_name="CartPole-v1", storage=open_storage(storage)).trials


def training_workers(storage: str, proc: subprocess.Popen, n: int = 2) -> list[int]:
    """The PIDs of the workers once ``n`` trials are training (their seeds drawn)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(0.2)
        try:
            running = [t for t in trials(storage) if t.state == TrialState.RUNNING]
        except KeyError:  # the study is not created yet
            continue
        pids = [int(t.user_attrs["worker"].rsplit(":", 1)[1]) for t in running
                if "seeds" in t.user_attrs]  # fmt: skip
        if len(pids) >= n:
            return pids
    raise AssertionError("the workers never started training")


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def all_gone(pids: list[int], within: float = 60.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def finish_and_count(tmp_path: Path, storage: str) -> list:
    """Run the same command again; the study's trials once it is done."""
    rerun = command(tmp_path, storage, TRIALS)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err.decode()[-2000:]
    found = trials(storage)
    assert sum(t.state == TrialState.COMPLETE for t in found) == TRIALS  # exactly --trials
    assert not [t for t in found if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    return found


pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_ctrl_c_fails_the_running_trials_and_a_rerun_reaches_exactly_the_trials(tmp_path, kind):
    storage = storage_for(tmp_path, kind)
    proc = command(tmp_path, storage)
    pids = training_workers(storage, proc)
    os.kill(proc.pid, signal.SIGINT)  # to the command only, not to its workers
    _, err = proc.communicate(timeout=120)
    assert all_gone(pids, within=5)
    found = trials(storage)
    assert not [t for t in found if t.state == TrialState.RUNNING]
    stopped = [t for t in found if int(t.user_attrs.get("worker", ":0").rsplit(":", 1)[1]) in pids
               and t.state == TrialState.FAIL]  # fmt: skip
    assert len(stopped) >= 2  # the two that were training
    assert proc.returncode == 130
    assert "interrupted; the running trials were marked failed" in err.decode()
    finish_and_count(tmp_path, storage)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_end_with_their_command_and_a_rerun_reaches_exactly_the_trials(tmp_path, sig):
    storage = storage_for(tmp_path, "journal")
    proc = command(tmp_path, storage)
    pids = training_workers(storage, proc)
    os.kill(proc.pid, sig)
    proc.wait(timeout=60)  # (not communicate: orphans would hold its stderr open)
    assert all_gone(pids, within=10), "the workers outlived their command"
    # each marked its trial failed on the way: nothing stays running in the journal
    assert not [t for t in trials(storage) if t.state == TrialState.RUNNING]
    finish_and_count(tmp_path, storage)
