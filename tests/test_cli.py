"""The ember-np command line: train, eval, resume, plot, and bad arguments."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import SMALL_ARGS

from ember_np import DqnAgent, TrainingRun
from ember_np.cli import main

SMALL = SMALL_ARGS


def train_run(tmp_path, *extra):
    code = main(
        ["train", "CartPole-v1", "--steps", "1500", "--eval-every", "500", "--eval-episodes", "2",
         "--checkpoint-freq", "500", "--root", str(tmp_path), *SMALL, *extra]
    )  # fmt: skip
    assert code == 0
    (run_dir,) = (tmp_path / "CartPole-v1" / "ember").iterdir()
    return run_dir


def test_train_creates_a_run_with_evals_and_checkpoints(tmp_path, capsys):
    run_dir = train_run(tmp_path)
    out = capsys.readouterr().out
    assert "Eval at step 1500" in out and f"run directory: {run_dir}" in out
    config = json.loads((run_dir / "config.json").read_text())
    # the compiled twin of gymnasium's CartPole-v1 (same episodes), with CartPole's name
    assert config["env_id"] == "ember_np/CartPole-v1" and config["preset"] == "ember"
    assert config["dqn"]["min_replay_size"] == 200 and config["dqn"]["hidden_sizes"] == [32]
    run = TrainingRun.resume(run_dir)
    assert [s for s, _ in run.step_checkpoints()] == [500, 1000, 1500]
    assert run.best_checkpoint_path().exists() and run.latest_checkpoint_path().exists()
    evals = run.read_eval_episodes()
    assert {r["total_steps_at_eval"] for r in evals} == {500, 1000, 1500}
    assert run.metadata["total_steps"] == 1500


def test_eval_prints_a_report(tmp_path, capsys):
    run_dir = train_run(tmp_path)
    capsys.readouterr()
    assert main(["eval", str(run_dir), "--episodes", "3", "--checkpoint", "latest"]) == 0
    out = capsys.readouterr().out
    assert "Eval at step 1500 (3 episodes)" in out and "episode_reward" in out
    assert main(["eval", str(run_dir), "--episodes", "1", "--checkpoint", "step_1000"]) == 0
    assert "Eval at step 1000" in capsys.readouterr().out


def test_resume_continues_steps_and_epsilon(tmp_path, capsys):
    run_dir = train_run(tmp_path)
    before = DqnAgent.from_checkpoint(run_dir / "checkpoints" / "latest.npz")
    episodes = TrainingRun.resume(run_dir).metadata["total_episodes"]
    capsys.readouterr()
    assert main(["resume", str(run_dir), "--steps", "500", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"at step 1,500 (epsilon {before.epsilon:.3f}" in out
    assert "500 more steps, to step 2,000" in out  # --steps: more steps, not a total
    after = DqnAgent.from_checkpoint(run_dir / "checkpoints" / "latest.npz")
    assert after.total_steps == 2000 and after.n_updates > before.n_updates
    run = TrainingRun.resume(run_dir)
    assert run.metadata["total_steps"] == 2000
    rows = run.read_train_episodes()
    assert [r["episode"] for r in rows] == list(range(len(rows)))
    assert len(rows) > episodes


def test_resume_steps_means_more_steps_in_the_help_and_in_every_documented_example(capsys):
    # `resume --steps N` trains N more steps. A guide once said "--steps 100000  # on to
    # 100,000 steps" of a run already at 50,000 (it would have ended at 150,000).
    with pytest.raises(SystemExit):
        main(["resume", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--steps N N more env steps, on top of the run's own" in help_text
    root = Path(__file__).resolve().parents[1]
    examples = []
    for page in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        if page.name == "changelog.md":  # history, not instructions
            continue
        for line in page.read_text(encoding="utf-8").splitlines():
            found = re.search(r"ember-np resume \S+.*--steps (\d+)\s*#\s*(.*)", line)
            if found:
                examples.append((page.name, int(found[1]), found[2]))
    assert examples  # the guide's first session resumes a run
    for page, n, comment in examples:
        assert f"{n:,} more steps" in comment, (page, n, comment)


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    a = train_run(tmp_path)
    out = tmp_path / "curves.png"
    assert main(["plot", str(a), str(a), "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_is_one_line_exit_2_as_every_missing_extra(
    tmp_path, monkeypatch, capsys
):
    run_dir = train_run(tmp_path)
    capsys.readouterr()
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    assert main(["plot", str(run_dir), "-o", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err == 'ember-np: error: ember-np plot needs matplotlib: pip install "ember-np[plot]"\n'
    assert not (tmp_path / "x.png").exists()
    monkeypatch.setitem(sys.modules, "onnx", None)  # the same style as export's missing extra
    assert main(["export", str(run_dir), "-o", str(tmp_path / "x.onnx")]) == 2
    assert capsys.readouterr().err.startswith("ember-np: error: ember-np export needs the onnx")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "NoSuchEnv-v0"], "unknown environment 'NoSuchEnv-v0'"),
        (["train", "Pendulum-v1", "--quiet"], "DQN and PPO need a Discrete action space"),
        (["train", "CartPole-v1", "--preset", "nope"], "unknown preset 'nope'; known presets"),
        (["train", "CartPole-v1", "--set", "gama=0.5"], "unknown config key 'gama'"),
        (["train", "CartPole-v1", "--set", "gamma"], "--set expects key=value"),
        (["train", "CartPole-v1", "--set", "gamma=2"], r"gamma must be a number in \[0, 1\]"),
        (["train", "CartPole-v1", "--steps", "0"], "expected a positive integer, got 0"),
        (["eval", "/no/such/run"], "no run directory at /no/such/run"),
        (["resume", "/no/such/run", "--steps", "10"], "no run directory"),
        (["resume", "."], "the following arguments are required: --steps"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments_one_line_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ember-np: error: "), err
    assert __import__("re").search(message, err[0]), err[0]


def test_eval_bad_checkpoint_name(tmp_path, capsys):
    run_dir = train_run(tmp_path)
    capsys.readouterr()
    assert main(["eval", str(run_dir), "--checkpoint", "step_7"]) == 2
    assert "no checkpoint" in capsys.readouterr().err
    assert main(["eval", str(run_dir), "--checkpoint", "worst"]) == 2


def test_python_m_entry_point_and_help(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "ember_np", "--help"], capture_output=True, text=True, check=True
    )
    for command in ("train", "eval", "resume", "plot"):
        assert command in out.stdout
    # a mistake is one line and exit 2, even with nothing compiled yet: no notice that
    # kernels are compiling (once printed before the env id was checked) and no compile
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    for args, says in [(["Nope-v0"], "unknown environment 'Nope-v0'"),
                       (["CartPole-v1", "--preset", "nope"], "nope"),
                       (["CartPole-v1", "--set", "gamma=2"], "gamma")]:  # fmt: skip
        bad = subprocess.run([sys.executable, "-m", "ember_np", "train", *args],
                             capture_output=True, text=True, env=env)  # fmt: skip
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
        assert says in bad.stderr
    assert not list((tmp_path / "cache").rglob("*.nbi"))


def test_train_runs_are_reproducible(tmp_path):
    a = train_run(tmp_path / "a")
    b = train_run(tmp_path / "b")
    pa = DqnAgent.from_checkpoint(a / "checkpoints" / "latest.npz").online.params
    pb = DqnAgent.from_checkpoint(b / "checkpoints" / "latest.npz").online.params
    assert np.array_equal(pa, pb)


def test_progress_bar_shows_the_loss_of_the_chunk_it_reports(capsys):
    """Each redraw carries the values after that chunk (it once showed the chunk before's)."""
    from types import SimpleNamespace

    from ember_np.cli.common import Progress

    agent = SimpleNamespace(epsilon=0.5, last_loss=float("nan"), total_steps=0)
    agent.epsilon_at = lambda step: agent.epsilon  # LearningAgent's: the bar reads it
    trainer = SimpleNamespace(agent=agent)
    recent = SimpleNamespace(value=lambda: 20.0)
    bar = Progress(3_000, 0, disable=False)
    bar.bar.mininterval, bar.bar.miniters, bar.bar.dynamic_miniters = 0, 1, False  # redraw always
    bar.update(trainer, 1_000, recent)
    agent.last_loss, agent.epsilon = 0.25, 0.1
    bar.update(trainer, 1_000, recent)
    agent.last_loss = 0.125
    bar.update(trainer, 1_000, recent)
    bar.close()
    lines = capsys.readouterr().err.replace("\r", "\n").splitlines()
    shown = [line for line in lines if "loss=" in line]
    assert "1.00k/3.00k" in shown[0] and "loss=-" in shown[0]  # no training yet
    assert any("2.00k/3.00k" in line and "loss=0.2500" in line and "eps=0.100" in line
               for line in shown)  # fmt: skip
    assert any("3.00k/3.00k" in line and "loss=0.1250" in line for line in shown)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "MountainCar-v0"])
def test_train_uses_the_compiled_env_and_says_so_in_one_line(env_id, tmp_path, capsys):
    assert main(["train", env_id, "--steps", "300", "--eval-every", "300", "--eval-episodes",
                 "1", "--root", str(tmp_path), *SMALL]) == 0  # fmt: skip
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if f"ember_np/{env_id}" in line]
    assert lines[0].startswith(f"{env_id}: training on ember_np/{env_id}, the compiled env")
    # ember is CartPole's preset: on another env it is filed and recorded as CartPole-v1/ember
    version = "ember" if env_id == "CartPole-v1" else "CartPole-v1_ember"
    (run_dir,) = (tmp_path / env_id / version).iterdir()
    assert json.loads((run_dir / "config.json").read_text())["env_id"] == f"ember_np/{env_id}"


def test_gymnasium_env_opts_out_and_gives_the_same_run(tmp_path, capsys):
    native = train_run(tmp_path / "native")
    assert "training on ember_np/CartPole-v1" in capsys.readouterr().out
    gym_run = train_run(tmp_path / "gym", "--gymnasium-env")
    assert "training on ember_np/" not in capsys.readouterr().out
    assert json.loads((gym_run / "config.json").read_text())["env_id"] == "CartPole-v1"
    # bit for bit gymnasium's dynamics: the same episodes and weights either way
    for log in ("train_episodes.jsonl", "eval_episodes.jsonl"):
        assert (native / log).read_bytes() == (gym_run / log).read_bytes()
    pa = DqnAgent.from_checkpoint(native / "checkpoints" / "latest.npz").online.params
    pb = DqnAgent.from_checkpoint(gym_run / "checkpoints" / "latest.npz").online.params
    assert np.array_equal(pa, pb)
