"""``export -o`` and ``plot -o`` never replace a run's own files.

A run's checkpoints (anything inside its ``checkpoints/``, however the path
is spelled: relative, through ``..`` or a linked directory), any ``.npz``
(the checkpoint format), and the files a run, a multi-seed parent or a tune
directory keeps (``config.json``, ``metadata.json``, the logs,
``result.json``, ...) are refused with one line and exit status 2, and left
as they were.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ember_np.cli import main
from ember_np.training.run import TrainingRun


@pytest.fixture
def run(tmp_path) -> Path:
    """A run with two checkpoints (their bytes are never read: the path is refused first)."""
    made = TrainingRun.create("r", "v1", root=tmp_path / "runs")
    made.write_config({"env_id": "CartPole-v1"})
    for name in ("best.npz", "latest.npz"):
        (made.dir / "checkpoints" / name).write_bytes(b"checkpoint " + name.encode())
    (made.dir / "train_episodes.jsonl").write_text('{"total_reward": 1.0, "length": 1}\n')
    (made.dir / "eval_episodes.jsonl").write_text(
        '{"total_reward": 1.0, "length": 1, "total_steps_at_eval": 1}\n'
    )
    return made.dir


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (but a lock a reader may create) and its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != ".lock"}  # fmt: skip


def refused(argv: list[str], capsys, words: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ember-np: error: ") and err.count("\n") == 1, err
    assert words in err, err
    return err


def test_export_into_a_runs_checkpoints_is_refused_however_spelled(run, tmp_path, capsys,
                                                                   monkeypatch):  # fmt: skip
    before = snapshot(tmp_path)
    (tmp_path / "linked").symlink_to(run / "checkpoints")
    monkeypatch.chdir(run / "checkpoints")
    outputs = [
        run / "checkpoints" / "latest.npz",  # the checkpoint that holds the replay buffer
        run / "checkpoints" / "policy.onnx",  # a new file among the checkpoints
        "latest.npz",  # relative to the checkpoints directory
        "../checkpoints/policy.onnx",
        tmp_path / "linked" / "policy.onnx",  # through a linked directory
        run / "x" / ".." / "checkpoints" / "step_5.onnx",
    ]
    for output in outputs:
        refused(["export", str(run), "--checkpoint", "best", "-o", str(output)], capsys,
                "is inside the run")  # fmt: skip
    assert snapshot(tmp_path) == before  # nothing changed, nothing added
    monkeypatch.chdir(tmp_path)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.npz", "latest.npz"]


def test_export_to_any_npz_is_refused(run, tmp_path, capsys):
    for output in (tmp_path / "policy.npz", tmp_path / "POLICY.NPZ"):
        refused(["export", str(run), "-o", str(output)], capsys, "ends in .npz")
        assert not output.exists()


@pytest.mark.parametrize("name", ["config.json", "metadata.json", "train_episodes.jsonl",
                                  "eval_episodes.jsonl", "result.json", ".lock"])  # fmt: skip
def test_export_onto_a_runs_own_file_is_refused_and_keeps_it(run, tmp_path, capsys, name):
    before = snapshot(tmp_path)
    refused(["export", str(run), "-o", str(run / name)], capsys, f"is {name} of the run")
    assert snapshot(tmp_path) == before


def test_the_files_of_a_multiseed_parent_and_a_tune_directory_are_refused(run, tmp_path, capsys):
    parent, tune = tmp_path / "parent", tmp_path / "tunes" / "t"
    parent.mkdir()
    (parent / "seeds.json").write_text(json.dumps({"seeds": [0]}))
    tune.mkdir(parents=True)
    (tune / "tune.json").write_text("{}")
    before = snapshot(tmp_path)
    for output in (parent / "seeds.json", tune / "tune.json", tune / "best_preset.json",
                   tune / "study.db"):  # fmt: skip
        refused(["export", str(run), "-o", str(output)], capsys, "of the run in")
    assert snapshot(tmp_path) == before


def test_a_new_file_beside_a_runs_files_is_still_an_output(run, tmp_path, capsys):
    # The path passes; the fake checkpoint is what export then refuses.
    err = refused(["export", str(run), "-o", str(run / "policy.onnx")], capsys, "best.npz")
    assert "of the run" not in err and "checkpoints/ (" not in err


def test_plot_into_a_runs_checkpoints_is_refused(run, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    before = snapshot(tmp_path)
    for output in (run / "checkpoints" / "curves.png", run / "checkpoints" / "curves"):
        refused(["plot", str(run), "-o", str(output)], capsys, "is inside the run")
    assert snapshot(tmp_path) == before
    assert main(["plot", str(run), "-o", str(run / "curves.png")]) == 0  # beside them: fine
    assert (run / "curves.png").stat().st_size > 0
