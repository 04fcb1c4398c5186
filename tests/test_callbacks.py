"""The loop's public callbacks: their documented order, and the TensorBoard writer built on them.

The order a run calls :class:`ember_np.LoopCallback`'s events in is written
once, in ``ember_np.training.loop.CALL_ORDER``; a recording callback checks a
short run against it. ``ember-np train ... --tensorboard DIR`` is checked by
reading the event files back with TensorBoard's own reader
(``EventAccumulator``) and comparing every scalar with the run's JSONL logs,
and by checking that the run's own files do not change with it. The guide's
W&B and MLflow callbacks (not run by the docs test: neither package is a
dependency) run here against a stand-in module.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from helpers import SMALL_ARGS, files_of

from ember_np import DqnAgent, DqnTrainer, LoopCallback, TrainingRun, train_and_evaluate
from ember_np.cli import main
from ember_np.envs import NativeVecEnv
from ember_np.presets import get_preset
from ember_np.training.loop import CALL_ORDER

ARGS = ["--steps", "1500", "--eval-every", "500", "--eval-episodes", "2",
        "--checkpoint-freq", "500", *SMALL_ARGS]  # fmt: skip


class Recorder(LoopCallback):
    """Every event in the order it came, with the rows the log events carried."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.train_rows: list[dict] = []
        self.eval_rows: list[dict] = []
        self.chunk_end = 0

    def on_training_start(self, trainer):
        self.events.append("on_training_start")

    def on_train_episodes(self, trainer, rows):
        self.events.append("on_train_episodes")
        self.train_rows.extend(rows)
        # episodes the chunk under way ended, reported before its on_chunk
        assert all(self.chunk_end < r["total_steps"] <= trainer.agent.total_steps for r in rows)

    def on_chunk(self, trainer, steps):
        self.events.append("on_chunk")
        self.chunk_end = trainer.agent.total_steps

    def on_eval_episodes(self, trainer, rows):
        self.events.append("on_eval_episodes")
        self.eval_rows.extend(rows)

    def on_eval(self, trainer, report, final):
        self.events.append(f"on_eval({'final' if final else 'periodic'})")

    def on_training_end(self, trainer):
        self.events.append("on_training_end")


def order_pattern() -> re.Pattern[str]:
    """``CALL_ORDER`` as a regular expression over space-separated event names."""
    text = " ".join(CALL_ORDER)
    text = re.sub(r"on_eval\b(?!_)", "on_eval(periodic)", text, count=1)  # in the chunk group
    text = re.sub(r"on_eval$", "on_eval(final)", text)
    parts = []
    for token in re.findall(r"on_[a-z_]+(?:\((?:final|periodic)\))?|[()*?]", text):
        parts.append(f"(?:{re.escape(token + ' ')})" if token.startswith("on_") else token)
    return re.compile("".join(parts))


@pytest.mark.parametrize("how", ["fused", "python", "vector"])
def test_a_run_calls_the_events_in_the_documented_order_and_reports_what_it_logs(tmp_path, how):
    # each way the trainer steps logs its episodes its own way: all reach the callbacks
    env = (
        NativeVecEnv("CartPole-v1", 2, seed=0)
        if how == "vector"
        else gym.make("ember_np/CartPole-v1")
    )
    agent = DqnAgent.for_env(env, get_preset("ember", "CartPole-v1").config, seed=0)
    run = TrainingRun.create("order", "v", root=tmp_path)
    trainer = DqnTrainer(env, agent, seed=0, run=run, checkpoint_freq=1_000,
                         fused=how != "python")  # fmt: skip
    first, second = Recorder(), Recorder()
    train_and_evaluate(trainer, 2_300, 1_000, 2, [first, second])
    names = " ".join(first.events) + " "
    assert order_pattern().fullmatch(names), names
    for wrong in (
        names.replace("on_training_end ", ""),  # the pattern is no wildcard
        names.replace("on_eval_episodes on_eval(final)", "on_eval(final) on_eval_episodes"),
    ):
        assert not order_pattern().fullmatch(wrong)
    assert second.events == first.events  # each event goes to every callback in turn
    # this run's own sequence, as the documented order spells it out for it
    assert names.count("on_chunk") == 3  # to 1,000 and 2,000 (evaluations), then 300
    assert names.count("on_eval(periodic)") == 2 and names.count("on_eval(final)") == 1
    assert names.startswith("on_training_start ")
    assert names.endswith("on_training_end on_eval_episodes on_eval(final) ")
    # the rows are those of the logs, as written
    assert first.train_rows == run.read_train_episodes() and first.train_rows
    assert first.eval_rows == run.read_eval_episodes() and len(first.eval_rows) == 3 * 2
    trainer.eval(1)  # the run is no longer listened to after the loop
    assert len(first.eval_rows) == 6


def test_without_a_run_there_are_no_log_events():
    env = gym.make("ember_np/CartPole-v1")
    trainer = DqnTrainer(env, DqnAgent.for_env(env, get_preset("ember", "CartPole-v1").config,
                                               seed=0), seed=0)  # fmt: skip
    recorder = Recorder()
    train_and_evaluate(trainer, 1_200, 1_000, 1, [recorder])
    assert recorder.events == ["on_training_start", "on_chunk", "on_eval(periodic)", "on_chunk",
                               "on_training_end", "on_eval(final)"]  # fmt: skip


# -- TensorBoard ----------------------------------------------------------------------------


def read_events(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the event files under ``log_dir``: tag -> [(step, value)], in order."""
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    reader = accumulator.EventAccumulator(str(log_dir), size_guidance={"scalars": 0})  # keep all
    reader.Reload()
    return {tag: [(e.step, e.value) for e in reader.Scalars(tag)]
            for tag in reader.Tags()["scalars"]}  # fmt: skip


def as_float32(pairs: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """TensorBoard stores a scalar as float32."""
    return [(int(s), float(np.float32(v))) for s, v in pairs]


def expected_scalars(run_dir: Path, eval_episodes: int,
                     after: int = 0) -> dict[str, list[tuple[int, float]]]:  # fmt: skip
    """What the event files must hold, from the run's JSONL logs alone (NumPy for the means):
    the rows of the steps past ``after`` (a resumed run's)."""
    run = TrainingRun.resume(run_dir)
    train = [r for r in run.read_train_episodes() if r["total_steps"] > after]
    evals = [r for r in run.read_eval_episodes() if r["total_steps_at_eval"] > after]
    out = {
        "train/total_reward": [(r["total_steps"], r["total_reward"]) for r in train],
        "train/length": [(r["total_steps"], r["length"]) for r in train],
        "train/epsilon": [(r["total_steps"], r["extras"]["epsilon"]) for r in train],
        "train/loss": [
            (r["total_steps"], r["extras"]["loss"]) for r in train if "loss" in r["extras"]
        ],  # fmt: skip
        "eval/total_reward": [(r["total_steps_at_eval"], r["total_reward"]) for r in evals],
        "eval/length": [(r["total_steps_at_eval"], r["length"]) for r in evals],
    }
    blocks = [evals[i : i + eval_episodes] for i in range(0, len(evals), eval_episodes)]
    out["eval/mean_reward"] = [
        (b[0]["total_steps_at_eval"], np.mean([r["total_reward"] for r in b])) for b in blocks
    ]
    return {tag: as_float32(pairs) for tag, pairs in out.items()}


def assert_events_match_logs(log_dir: Path, run_dir: Path, after: int = 0) -> None:
    got, want = read_events(log_dir), expected_scalars(run_dir, 2, after)
    assert set(got) == set(want)
    assert all(want.values()), "a short run still logs every kind of scalar"
    for tag in want:
        if tag == "eval/mean_reward":  # a mean: the trainer's running one, or NumPy's
            assert [s for s, _ in got[tag]] == [s for s, _ in want[tag]]
            np.testing.assert_allclose([v for _, v in got[tag]], [v for _, v in want[tag]],
                                       rtol=1e-6)  # fmt: skip
        else:  # the logged values themselves, as float32
            assert got[tag] == want[tag], tag


def test_train_tensorboard_writes_the_logs_scalars_and_changes_no_file_of_the_run(tmp_path, capsys):
    pytest.importorskip("tensorboardX")
    board = tmp_path / "tb"
    runs = {}
    for name, extra in (("plain", []), ("board", ["--tensorboard", str(board)])):
        root = tmp_path / name
        assert main(["train", "CartPole-v1", *ARGS, "--root", str(root), *extra]) == 0
        (runs[name],) = (root / "CartPole-v1" / "ember").iterdir()
    assert files_of(runs["board"]) == files_of(runs["plain"])  # byte for byte
    assert_events_match_logs(board, runs["board"])
    # resume --tensorboard: the resumed steps' scalars, and again no file changes
    for name, extra in (("plain", []), ("board", ["--tensorboard", str(tmp_path / "tb2")])):
        assert main(["resume", str(runs[name]), "--steps", "1000", "--quiet", *extra]) == 0
    assert files_of(runs["board"]) == files_of(runs["plain"])
    assert_events_match_logs(tmp_path / "tb2", runs["board"], after=1_500)


def test_train_seeds_tensorboard_writes_each_seed_under_seed_s(tmp_path, capsys):
    pytest.importorskip("tensorboardX")
    board = tmp_path / "tb"
    assert main(["train", "CartPole-v1", *ARGS, "--seeds", "3,5", "--workers", "1",
                 "--root", str(tmp_path), "--tensorboard", str(board)]) == 0  # fmt: skip
    assert sorted(p.name for p in board.iterdir()) == ["seed_3", "seed_5"]
    (parent,) = (tmp_path / "CartPole-v1" / "ember").iterdir()
    for seed in (3, 5):
        assert_events_match_logs(board / f"seed_{seed}", parent / f"seed_{seed}")
    # resume: only the seed trained again gets new files
    (parent / "seed_5" / "result.json").unlink()
    assert main(["resume", str(parent), "--workers", "1", "--quiet", "--tensorboard",
                 str(tmp_path / "tb2")]) == 0  # fmt: skip
    assert [p.name for p in (tmp_path / "tb2").iterdir()] == ["seed_5"]
    assert_events_match_logs(tmp_path / "tb2" / "seed_5", parent / "seed_5")


def test_tensorboard_without_tensorboardx_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # import tensorboardX: ImportError
    argv = ["train", "CartPole-v1", *ARGS, "--root", str(tmp_path / "r"), "--tensorboard",
            str(tmp_path / "tb")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == ('ember-np: error: TensorBoard logging needs tensorboardX: '
                   'pip install "ember-np[tensorboard]"\n')  # fmt: skip
    assert not (tmp_path / "r").exists() and not (tmp_path / "tb").exists()


# -- the guide's W&B and MLflow callbacks ------------------------------------------------------


def guide_block(first_line: str) -> str:
    """The python block of docs/guides/callbacks.md that starts with ``first_line``."""
    text = (Path(__file__).resolve().parent.parent / "docs/guides/callbacks.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    (block,) = [b for b in blocks if b.startswith(first_line)]
    return block


class Tracker:
    """Stands in for wandb and mlflow (neither is a dependency): records each call."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return self

        return call


@pytest.mark.parametrize("module, name", [("wandb", "WandbCallback"), ("mlflow", "MlflowCallback")])
def test_the_guides_tracker_callbacks_log_the_runs_rewards(tmp_path, monkeypatch, module, name):
    """The skipped W&B and MLflow blocks run against a stand-in module and log what the
    JSONL logs hold: each training episode's return at its step, each evaluation's mean."""
    tracker = Tracker()
    monkeypatch.setitem(sys.modules, module, tracker)
    namespace: dict = {}
    exec(guide_block(f"import {module}\n"), namespace)  # noqa: S102 - the guide's own code
    env = gym.make("ember_np/CartPole-v1")
    agent = DqnAgent.for_env(env, get_preset("ember", "CartPole-v1").config, seed=0)
    run = TrainingRun.create("tracker", "v", root=tmp_path)
    trainer = DqnTrainer(env, agent, seed=0, run=run)
    train_and_evaluate(trainer, 1_200, 500, 2, [namespace[name]()])
    logged = []
    for method, args, kwargs in tracker.calls:
        if method == "log":  # wandb: run.log({tag: value}, step=...)
            ((tag, value),) = args[0].items()
            logged.append((tag, kwargs["step"], value))
        elif method == "log_metric":  # mlflow.log_metric(tag, value, step=...)
            logged.append((args[0], kwargs["step"], args[1]))
    train = [("train/total_reward", r["total_steps"], r["total_reward"])
             for r in run.read_train_episodes()]  # fmt: skip
    assert [x for x in logged if x[0].startswith("train/")] == train and train
    means = [x for x in logged if x[0] == "eval/mean_reward"]
    assert [step for _, step, _ in means] == [500, 1_000, 1_200]
    rows = run.read_eval_episodes()
    for (_, step, mean), k in zip(means, range(0, len(rows), 2)):
        assert step == rows[k]["total_steps_at_eval"]
        assert mean == pytest.approx(np.mean([r["total_reward"] for r in rows[k : k + 2]]))
    methods = [m for m, _, _ in tracker.calls]
    assert methods[0] in ("init", "start_run") and methods[-1] in ("finish", "end_run")
