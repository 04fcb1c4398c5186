"""TrainingRun: directory layout, metadata, logs, pruning, resume."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from ember_np import EpisodeRecord, EpisodeStatus, TrainingRun


def test_create_layout(tmp_path):
    run = TrainingRun.create("cartpole", "v1", root=tmp_path)
    assert run.dir.parent == tmp_path / "cartpole" / "v1"
    assert re.fullmatch(r"\d{8}_\d{6}", run.dir.name)
    assert (run.dir / "checkpoints").is_dir()
    meta = json.loads((run.dir / "metadata.json").read_text())
    assert {"name", "version", "run_id", "total_steps", "total_episodes", "started_at",
            "last_updated"} <= set(meta)  # fmt: skip
    assert (meta["name"], meta["version"], meta["run_id"]) == ("cartpole", "v1", run.dir.name)
    assert meta["total_steps"] == 0 and meta["total_episodes"] == 0
    assert run.checkpoint_path(500) == run.dir / "checkpoints" / "step_500.npz"
    assert run.latest_checkpoint_path() == run.dir / "checkpoints" / "latest.npz"
    assert run.best_checkpoint_path() == run.dir / "checkpoints" / "best.npz"
    assert (run.dir / "train_episodes.jsonl").exists() and (
        run.dir / "eval_episodes.jsonl"
    ).exists()


def test_runs_in_the_same_second_are_distinct(tmp_path):
    runs = [TrainingRun.create("a", "v1", root=tmp_path) for _ in range(5)]
    assert len({r.dir for r in runs}) == 5
    # resume of the name/version directory picks the newest
    assert TrainingRun.resume(tmp_path / "a" / "v1").dir == runs[-1].dir


def test_write_config_and_metadata(tmp_path):
    run = TrainingRun.create("a", "v1", root=tmp_path)
    run.write_config({"gamma": 0.99, "hidden_sizes": [64, 64]})
    assert json.loads((run.dir / "config.json").read_text())["hidden_sizes"] == [64, 64]
    run.update_metadata(1234, 56)
    meta = json.loads((run.dir / "metadata.json").read_text())
    assert meta["total_steps"] == 1234 and meta["total_episodes"] == 56
    assert run.metadata["total_steps"] == 1234


def test_jsonl_logs(tmp_path):
    run = TrainingRun.create("a", "v1", root=tmp_path)
    run.log_train_episode(
        EpisodeRecord(10.0, 10, EpisodeStatus.TERMINATED), episode=0, total_steps=10
    )
    run.log_train_episode(
        EpisodeRecord(500.0, 500, EpisodeStatus.TRUNCATED), episode=1, total_steps=510
    )
    run.log_eval_episode(EpisodeRecord(200.0, 200, EpisodeStatus.TERMINATED), total_steps=510)
    lines = (run.dir / "train_episodes.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert rows[1] == {"total_reward": 500.0, "length": 500, "status": "TRUNCATED", "extras": {},
                       "episode": 1, "total_steps": 510}  # fmt: skip
    (ev,) = run.read_eval_episodes()
    assert ev["total_steps_at_eval"] == 510 and ev["total_reward"] == 200.0


def test_prune_keeps_highest_steps_and_never_latest_or_best(tmp_path):
    run = TrainingRun.create("a", "v1", root=tmp_path)
    for step in (100, 2000, 300, 1000, 50):
        np.savez(run.checkpoint_path(step), x=np.zeros(1))
    np.savez(run.latest_checkpoint_path(), x=np.zeros(1))
    np.savez(run.best_checkpoint_path(), x=np.zeros(1))
    removed = run.prune_checkpoints(2)
    assert sorted(p.name for p in removed) == ["step_100.npz", "step_300.npz", "step_50.npz"]
    assert [s for s, _ in run.step_checkpoints()] == [1000, 2000]
    run.prune_checkpoints(0)
    assert run.step_checkpoints() == []
    assert run.latest_checkpoint_path().exists() and run.best_checkpoint_path().exists()
    with pytest.raises(ValueError, match="keep must be an integer >= 0"):
        run.prune_checkpoints(-1)


def test_resume_run_directory_keeps_metadata(tmp_path):
    run = TrainingRun.create("a", "v1", root=tmp_path)
    run.update_metadata(700, 9)
    again = TrainingRun.resume(run.dir)
    assert again.dir == run.dir and again.metadata["total_steps"] == 700
    assert again.metadata["total_episodes"] == 9


def test_resume_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no run directory"):
        TrainingRun.resume(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="neither a run directory"):
        TrainingRun.resume(tmp_path / "empty")


@pytest.mark.parametrize("bad", ["", "a/b", "..", 3])
def test_bad_names(tmp_path, bad):
    with pytest.raises(ValueError, match="must be a non-empty name"):
        TrainingRun.create(bad, "v1", root=tmp_path)
