"""One writer per run directory (an OS lock), and JSONL logs with torn or garbage lines.

The lock is tested against a real second process that is killed with SIGKILL;
the logs through every reader: ``read_train_episodes``, ``read_eval_episodes``,
resume's rewind (``DqnTrainer`` with a resumed run, and ``ember-np resume``)
and ``ember-np plot``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from helpers import SMALL_BUFFER_1K, read_line
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember_np import DqnAgent, DqnPolicy, DqnTrainer, TrainingRun
from ember_np.cli import main
from ember_np.training.run import RunLockedError, RunLogWarning

SMALL = SMALL_BUFFER_1K


def new_run(root: Path, steps: int = 300, evals: int = 2) -> TrainingRun:
    """A run as ``ember-np train`` leaves it: config.json, logs, checkpoints."""
    run = TrainingRun.create("r", "v1", root=root)
    run.write_config({"env_id": "CartPole-v1", "seed": 0, "checkpoint_freq": 100, "keep": 3,
                      "eval_every": 10_000, "eval_episodes": 1, "dqn": SMALL.to_dict()})  # fmt: skip
    env = gym.make("CartPole-v1")
    trainer = DqnTrainer(env, DqnAgent.for_env(env, SMALL), run=run, checkpoint_freq=100)
    trainer.train(steps)
    trainer.eval(evals)
    run.unlock()
    return run


# -- the run lock ---------------------------------------------------------------------

_HOLDER = textwrap.dedent(
    """
    import sys, time
    import gymnasium as gym
    from ember_np import DqnAgent, DqnTrainer, TrainingRun
    run = TrainingRun.resume(sys.argv[1])
    env = gym.make("CartPole-v1")
    agent = DqnAgent.from_checkpoint(run.latest_checkpoint_path())
    trainer = DqnTrainer(env, agent, seed=1, run=run, checkpoint_freq=100)
    print("training", flush=True)
    time.sleep(600)
    """
)


def test_a_second_writer_is_refused_naming_the_process_and_readers_still_work(tmp_path, capsys):
    run = new_run(tmp_path)
    script = tmp_path / "holder.py"
    script.write_text(_HOLDER)
    holder = subprocess.Popen([sys.executable, str(script), str(run.dir)],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert read_line(holder, timeout=300).strip() == "training"
        leftover = run.checkpoints_dir / ".latest.npz.0123.tmp"  # as the writer's next save
        leftover.write_bytes(b"half")

        # Readers: reopening, the logs, the checkpoints, eval and plot.
        reopened = TrainingRun.resume(run.dir)
        assert leftover.exists()  # a live writer's temporary file is not "left over"
        assert len(reopened.read_train_episodes()) == run.metadata["total_episodes"]
        DqnPolicy.load(reopened.latest_checkpoint_path())
        assert main(["eval", str(run.dir), "--episodes", "1", "--checkpoint", "latest"]) == 0
        assert main(["plot", str(run.dir), "-o", str(tmp_path / "c.png")]) == 0
        capsys.readouterr()

        # Writers: a DqnTrainer with the run, and `ember-np resume`.
        agent = DqnAgent.from_checkpoint(reopened.latest_checkpoint_path())
        with pytest.raises(RunLockedError, match=f"process {holder.pid} is training") as info:
            DqnTrainer(gym.make("CartPole-v1"), agent, run=reopened)
        assert str(run.dir) in str(info.value) and info.value.pid == holder.pid
        assert main(["resume", str(run.dir), "--steps", "10", "--quiet"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"run {run.dir} is in use: process {holder.pid}" in err[0]
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()

    # The killed holder released the lock: the leftover goes, resume trains.
    TrainingRun.resume(run.dir)
    assert not leftover.exists()
    assert main(["resume", str(run.dir), "--steps", "10", "--quiet"]) == 0
    assert TrainingRun.resume(run.dir).metadata["total_steps"] == 310


def test_the_lock_is_shared_within_a_process_and_released_by_unlock(tmp_path):
    run = new_run(tmp_path, steps=100, evals=1)
    a, b = TrainingRun.resume(run.dir), TrainingRun.resume(run.dir)
    a.lock()
    b.lock()  # the same process: a notebook resuming beside an idle trainer
    assert (run.dir / ".lock").read_text().strip() == str(os.getpid())
    a.unlock()
    b.unlock()
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; from ember_np import TrainingRun; "
         "TrainingRun.resume(sys.argv[1]).lock(); print('locked')", str(run.dir)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert probe.stdout.strip() == "locked", probe.stderr


# -- torn and garbage log lines ---------------------------------------------------------

GARBAGE = [
    '{"total_reward": 12.0, "len',  # torn mid-record
    "\x00\x00\x00\x00",  # a block of zeros, as some filesystems leave after a crash
    "[1, 2, 3]",  # valid JSON, not a record
    '{"total_reward": "lots", "length": 3}',  # a record with a field of the wrong type
    '{"total_reward": 1.0, "length": 2, "total_steps": "x"}',
    "\udcff\udcfe not utf-8",  # raw bytes below
]


def write_bytes_line(path: Path, text: str, where: str, newline: bool) -> list[str]:
    """Put ``text`` at the end (without newline if torn) or in the middle of ``path``."""
    good = path.read_text().splitlines()
    raw = text.encode("utf-8", errors="surrogateescape")
    lines = [line.encode() for line in good]
    if where == "end":
        lines.append(raw)
    else:
        lines.insert(len(lines) // 2, raw)
    data = b"\n".join(lines) + (b"\n" if newline or where != "end" else b"")
    path.write_bytes(data)
    return good


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return new_run(tmp_path_factory.mktemp("template")).dir


def fresh_copy(template: Path, tmp_path: Path) -> Path:
    target = tmp_path / "r" / "v1" / template.name
    shutil.copytree(template, target)
    return target


@pytest.mark.parametrize("where", ["end", "middle"])
@pytest.mark.parametrize("garbage", GARBAGE)
def test_log_readers_skip_bad_lines_and_name_them(template, tmp_path, garbage, where):
    run_dir = fresh_copy(template, tmp_path)
    for name, read in (("train_episodes.jsonl", TrainingRun.read_train_episodes),
                       ("eval_episodes.jsonl", TrainingRun.read_eval_episodes)):  # fmt: skip
        path = run_dir / name
        before = read(TrainingRun.resume(run_dir))
        write_bytes_line(path, garbage, where, newline=False)
        with pytest.warns(RunLogWarning, match=rf"{path}: line \d+ is") as record:
            rows = read(TrainingRun.resume(run_dir))
        assert rows == before  # every good line, nothing else
        # one RunLogWarning for the one bad line (an unrelated warning that the first
        # import of something in this worker may raise inside the block is not counted)
        assert sum(issubclass(w.category, RunLogWarning) for w in record) == 1


@pytest.mark.parametrize("where", ["end", "middle"])
@pytest.mark.parametrize("garbage", GARBAGE[:3])
def test_resume_and_plot_survive_bad_lines_without_losing_good_ones(
    template, tmp_path, garbage, where, capsys
):
    pytest.importorskip("matplotlib")
    run_dir = fresh_copy(template, tmp_path)
    log = run_dir / "train_episodes.jsonl"
    good = write_bytes_line(log, garbage, where, newline=False)
    capsys.readouterr()
    assert main(["plot", str(run_dir), "-o", str(tmp_path / "c.png")]) == 0
    err = capsys.readouterr().err
    assert f"ember-np: warning: {log}: line" in err
    assert main(["resume", str(run_dir), "--steps", "100", "--quiet"]) == 0
    lines = log.read_text().splitlines()
    assert lines[: len(good)] == good  # the good lines, in order, then the new ones
    rows = [json.loads(line) for line in lines]  # every line parses now
    assert [r["episode"] for r in rows] == list(range(len(rows)))
    rolled = (run_dir / "train_episodes.rolled_back.jsonl").read_bytes()
    assert garbage.encode("utf-8", errors="surrogateescape") in rolled  # kept, not deleted


def test_a_trainer_resuming_a_run_with_a_torn_line_continues_the_log(template, tmp_path):
    run_dir = fresh_copy(template, tmp_path)
    log = run_dir / "train_episodes.jsonl"
    good = write_bytes_line(log, GARBAGE[0], "end", newline=False)
    run = TrainingRun.resume(run_dir)
    agent = DqnAgent.from_checkpoint(run.latest_checkpoint_path())
    with pytest.warns(RunLogWarning, match="is a torn last line"):
        trainer = DqnTrainer(gym.make("CartPole-v1"), agent, seed=1, run=run)
    trainer.train(200)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no bad line left
        rows = run.read_train_episodes()
    assert len(rows) > len(good) and log.read_text().splitlines()[: len(good)] == good


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(cut=st.integers(0, 10_000), junk=st.binary(max_size=40))
def test_a_log_cut_anywhere_reads_as_its_whole_lines(template, tmp_path, cut, junk):
    """A write cut at any byte, followed by any bytes: the reader keeps exactly the whole records."""
    source = (template / "train_episodes.jsonl").read_bytes()
    cut = min(cut, len(source))
    data = source[:cut] + junk
    path = tmp_path / "r" / "train_episodes.jsonl"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    run = TrainingRun(path.parent, {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunLogWarning)
        rows = run.read_train_episodes()
    whole = [json.loads(line) for line in source[:cut].decode().split("\n")[:-1]]
    assert rows[: len(whole)] == whole
    assert len(rows) <= len(whole) + 1 + junk.count(b"\n")  # at most the repaired last piece


def test_logging_episodes_together_writes_the_same_bytes_with_one_fsync(tmp_path, monkeypatch):
    """``log_train_episodes`` / ``log_eval_episodes``: the lines one call per episode
    writes, in one write and one flush to disk (a fused chunk's or an evaluation's)."""
    from ember_np.stats import EpisodeRecord
    from ember_np.types import EpisodeStatus

    records = [EpisodeRecord(float(r), r, EpisodeStatus.TERMINATED, {"loss": 0.5 / r})
               for r in (3, 7, 11)]  # fmt: skip
    entries = [(rec, i, 10 * i, None if i else 1) for i, rec in enumerate(records)]
    one, many = (TrainingRun.create("logs", "v", root=tmp_path / name) for name in ("a", "b"))
    for entry in entries:
        one.log_train_episode(*entry)
    for rec in records:
        one.log_eval_episode(rec, 42)
    fsyncs = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: fsyncs.append(fd) or real_fsync(fd))
    many.log_train_episodes(entries)
    many.log_eval_episodes(records, 42)
    many.log_train_episodes([])  # nothing to write: no write, no flush
    assert len(fsyncs) == 2
    for name in ("train_episodes.jsonl", "eval_episodes.jsonl"):
        assert (many.dir / name).read_bytes() == (one.dir / name).read_bytes()
    assert [row["env"] for row in many.read_train_episodes() if "env" in row] == [1]
