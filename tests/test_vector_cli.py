"""``--num-envs N`` on the command line (issue 25): train, resume, --seeds and tune.

A native env's N copies run in the compiled vector loop and resume exactly
(their state is saved beside latest.npz); a gymnasium env's copies come from
``gymnasium.make_vec`` and resume on fresh episodes, saying so.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import SMALL_ARGS_16, saved_state

from ember_np import DqnAgent, TrainingRun
from ember_np.cli import main
from ember_np.training.multiseed import load_multiseed

SMALL = SMALL_ARGS_16


def train(root: Path, steps: int, *extra: str, env_id: str = "CartPole-v1") -> Path:
    assert main(["train", env_id, "--steps", str(steps), "--eval-every", "400",
                 "--eval-episodes", "1", "--checkpoint-freq", "400", "--root", str(root),
                 *SMALL, *extra]) == 0  # fmt: skip
    (run_dir,) = (root / env_id / "ember").iterdir()
    return run_dir


def latest(run_dir: Path) -> DqnAgent:
    return DqnAgent.from_checkpoint(run_dir / "checkpoints" / "latest.npz")


def train_rows(run_dir: Path) -> list[dict]:
    rows = TrainingRun.resume(run_dir).read_train_episodes()
    for row in rows:
        row.pop("timestamp", None)
    return rows


def test_native_num_envs_trains_in_the_compiled_loop_and_records_it(tmp_path, capsys):
    run_dir = train(tmp_path, 800, "--num-envs", "4")
    out = capsys.readouterr().out
    assert "800 steps, seed 0, 4 envs (compiled, one loop)" in out
    config = json.loads((run_dir / "config.json").read_text())
    assert config["env_id"] == "ember_np/CartPole-v1"
    assert config["num_envs"] == 4 and config["vectorization"] is None
    agent = latest(run_dir)
    assert agent.total_steps == 800 and agent.buffer.num_envs == 4
    rows = train_rows(run_dir)
    assert {r["env"] for r in rows} == {0, 1, 2, 3}  # every env's episodes, each marked
    assert (run_dir / "checkpoints" / "latest_envs.npz").exists()


def test_native_vector_resume_is_exact(tmp_path, capsys):
    """800 steps, then resume 800: the same agent (buffer, networks, streams,
    counters) and the same training episodes as 1,600 steps in one go."""
    whole = train(tmp_path / "whole", 1600, "--num-envs", "4")
    part = train(tmp_path / "part", 800, "--num-envs", "4")
    capsys.readouterr()
    assert main(["resume", str(part), "--steps", "800", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "4 envs continue their episodes in progress" in out
    assert saved_state(latest(part)) == saved_state(latest(whole))
    assert train_rows(part) == train_rows(whole)
    with (
        np.load(part / "checkpoints" / "latest_envs.npz") as a,
        np.load(whole / "checkpoints" / "latest_envs.npz") as b,
    ):
        assert a.files == b.files
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_native_vector_resume_without_saved_envs_starts_fresh_and_says_so(tmp_path, capsys):
    part = train(tmp_path, 800, "--num-envs", "2")
    (part / "checkpoints" / "latest_envs.npz").unlink()
    capsys.readouterr()
    assert main(["resume", str(part), "--steps", "400", "--quiet"]) == 0
    assert "2 envs start fresh episodes: no env state was saved at step 800" in (
        capsys.readouterr().out
    )
    assert latest(part).total_steps == 1200


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_gymnasium_num_envs_trains_and_resumes_on_fresh_episodes(tmp_path, capsys,
                                                                 vectorization):  # fmt: skip
    run_dir = train(tmp_path, 400, "--num-envs", "2", "--gymnasium-env", "--vectorization",
                    vectorization)  # fmt: skip
    config = json.loads((run_dir / "config.json").read_text())
    assert config["env_id"] == "CartPole-v1"
    assert (config["num_envs"], config["vectorization"]) == (2, vectorization)
    assert {r["env"] for r in train_rows(run_dir)} == {0, 1}
    assert not (run_dir / "checkpoints" / "latest_envs.npz").exists()
    capsys.readouterr()
    assert main(["resume", str(run_dir), "--steps", "400", "--quiet"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "fresh episodes" in line]
    assert lines == [f"2 gymnasium envs ({vectorization}) start fresh episodes: a gymnasium "
                     "vector env's state cannot be saved, so the episodes in progress are "
                     "dropped"]  # fmt: skip
    # NEXT_STEP autoreset: a vector step after an episode end carries 1 transition, not 2
    assert 800 <= latest(run_dir).total_steps <= 801


def test_gymnasium_num_envs_defaults_to_sync(tmp_path):
    run_dir = train(tmp_path, 200, "--num-envs", "3", "--gymnasium-env")
    assert json.loads((run_dir / "config.json").read_text())["vectorization"] == "sync"


def test_async_copies_are_never_forked_from_the_training_process():
    """A fork copies the parent's threads' locks, held or not (a test worker's Dask client,
    tqdm's monitor, ...): the copies start in a fresh process (a fork server) instead."""
    import multiprocessing as mp

    from ember_np.training.setup import ASYNC_START_METHOD, make_train_env

    assert ASYNC_START_METHOD in ("forkserver", "spawn")
    vec = make_train_env("CartPole-v1", 2, "async")
    try:
        started = {type(p) for p in vec.processes}
        assert started == {type(mp.get_context(ASYNC_START_METHOD).Process())}
        assert vec.reset(seed=0)[0].shape == (2, 4)
    finally:
        vec.close()


def test_seeds_with_num_envs_are_the_single_seed_runs(tmp_path):
    """--seeds K --num-envs N: each seed is the run --seed s --num-envs N makes."""
    common = ["--steps", "400", "--eval-every", "200", "--eval-episodes", "1",
              "--checkpoint-freq", "200", *SMALL, "--num-envs", "2"]  # fmt: skip
    assert main(["train", "CartPole-v1", "--seeds", "0,1", "--workers", "1",
                 "--root", str(tmp_path / "many"), *common]) == 0  # fmt: skip
    (parent,) = (tmp_path / "many" / "CartPole-v1" / "ember").iterdir()
    assert json.loads((parent / "seeds.json").read_text())["spec"]["num_envs"] == 2
    assert main(["train", "CartPole-v1", "--seed", "1", "--root", str(tmp_path / "one"),
                 *common]) == 0  # fmt: skip
    (single,) = (tmp_path / "one" / "CartPole-v1" / "ember").iterdir()
    assert (json.loads((parent / "seed_1" / "config.json").read_text())
            == json.loads((single / "config.json").read_text()))  # fmt: skip
    assert saved_state(latest(parent / "seed_1")) == saved_state(latest(single))
    assert train_rows(parent / "seed_1") == train_rows(single)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--num-envs", "0"], "argument --num-envs: expected a positive integer, got 0"),
        (["--num-envs", "2000"], "--num-envs must be an integer in [1, 1024], got 2000"),
        (["--vectorization", "thread", "--num-envs", "2"],
         "argument --vectorization: invalid choice: 'thread'"),
        (["--vectorization", "async"], "--vectorization async needs --num-envs N with N > 1"),
        (["--vectorization", "async", "--num-envs", "2"],
         "--vectorization async is for gymnasium envs: ember_np/CartPole-v1's 2 copies run "
         "in one compiled loop; drop --vectorization, or add --gymnasium-env"),
    ],
)  # fmt: skip
def test_bad_num_envs_and_vectorization_are_one_line_exit_2(tmp_path, capsys, extra, message):
    code = main(["train", "CartPole-v1", "--steps", "10", "--root", str(tmp_path), *SMALL,
                 *extra])  # fmt: skip
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1 and message in err[0], err
    assert not (tmp_path / "CartPole-v1").exists()  # refused before a run was made


def test_tune_with_num_envs_trains_trials_on_n_envs(tmp_path, capsys):
    pytest.importorskip("optuna")
    from ember_np.tune import TuneSettings, settings_for

    settings = settings_for("CartPole-v1", (200, 1, 1, 1), 0, ["hidden_sizes=[8]"],
                            num_envs=4)  # fmt: skip
    assert settings.run.num_envs == 4 and settings.run.vectorization is None
    assert TuneSettings.from_dict(settings.to_dict()) == settings
    old = settings.to_dict()
    del old["num_envs"], old["vectorization"]  # a study made before --num-envs
    assert TuneSettings.from_dict(old).run.num_envs == 1
    assert main(["tune", "CartPole-v1", "--trials", "1", "--seeds", "1", "--steps", "200",
                 "--evals", "1", "--eval-episodes", "1", "--workers", "1", "--num-envs", "4",
                 "--dir", str(tmp_path / "t"), "--set", "hidden_sizes=[8]",
                 "min_replay_size=64"]) == 0  # fmt: skip
    tune_json = json.loads((tmp_path / "t" / "tune.json").read_text())
    assert tune_json["settings"]["num_envs"] == 4
    assert "on ember_np/CartPole-v1 (4 envs)" in capsys.readouterr().out


def test_tune_takes_gymnasium_env_and_its_trials_train_on_gymnasiums_env(tmp_path, capsys):
    # The refusal of --vectorization on a compiled env says "add --gymnasium-env": tune
    # takes it as train does, and every trial then steps gymnasium's own env's copies.
    optuna = pytest.importorskip("optuna")
    assert main(["tune", "CartPole-v1", "--trials", "1", "--seeds", "1", "--steps", "200",
                 "--evals", "1", "--eval-episodes", "1", "--workers", "1", "--num-envs", "2",
                 "--vectorization", "async", "--gymnasium-env", "--dir", str(tmp_path / "t"),
                 "--set", "hidden_sizes=[8]", "min_replay_size=64", "--quiet"]) == 0  # fmt: skip
    settings = json.loads((tmp_path / "t" / "tune.json").read_text())["settings"]
    assert settings["train_env_id"] == "CartPole-v1" and settings["vectorization"] == "async"
    assert "on CartPole-v1 (2 envs)" in capsys.readouterr().out
    study = optuna.load_study(study_name="CartPole-v1",
                              storage=f"sqlite:///{tmp_path / 't' / 'study.db'}")  # fmt: skip
    assert [t.state.name for t in study.trials] == ["COMPLETE"]


# -- where a run of N envs stops: the first vector-step boundary at or past --steps -------


SEEDS = ["--eval-every", "100", "--eval-episodes", "1", "--checkpoint-freq", "100",
         "--workers", "1", *SMALL]  # fmt: skip


def train_parent(root: Path, steps: int, *extra: str) -> Path:
    assert main(["train", "CartPole-v1", "--seeds", "0-1", "--steps", str(steps),
                 "--root", str(root), *SEEDS, *extra]) == 0  # fmt: skip
    (parent,) = (root / "CartPole-v1" / "ember").iterdir()
    return parent


def last_steps(parent: Path) -> list[int]:
    return [json.loads((parent / f"seed_{s}" / "result.json").read_text())["curve"][-1][0]
            for s in (0, 1)]  # fmt: skip


def assert_reported_and_resumed(parent: Path, capsys) -> str:
    """report prints the IQM table, resume has nothing to train, plot draws: the seeds' own
    result.json files are accepted. Returns report's output."""
    capsys.readouterr()
    assert main(["report", str(parent)]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 seeds finished" in out and "IQM [95% CI]" in out
    assert main(["resume", str(parent), "--quiet"]) == 0
    assert "all 2 seeds already finished" in capsys.readouterr().out
    return out


def test_seeds_of_native_envs_with_steps_not_a_multiple_of_n_finish_and_report(tmp_path,
                                                                              capsys):  # fmt: skip
    """--steps 202 with 4 compiled envs: every seed stops at 204 (51 whole vector steps),
    its curve says so, and the parent is reported and resumed rather than refused."""
    parent = train_parent(tmp_path / "m", 202, "--num-envs", "4")
    assert last_steps(parent) == [204, 204]
    for s in (0, 1):
        meta = json.loads((parent / f"seed_{s}" / "metadata.json").read_text())
        assert meta["total_steps"] == 204
    out = assert_reported_and_resumed(parent, capsys)
    assert "202 steps each (trained 204: whole steps of 4 envs)" in out
    pytest.importorskip("matplotlib")
    assert main(["plot", str(parent), "-o", str(tmp_path / "c.png")]) == 0


def test_seeds_of_gymnasium_next_step_envs_finish_and_report(tmp_path, capsys):
    """gymnasium's NEXT_STEP autoreset: a reset row adds no transition, so a seed stops
    anywhere in steps..steps+N-1; here one of the two seeds stops past --steps."""
    parent = train_parent(tmp_path / "m", 300, "--num-envs", "2", "--gymnasium-env",
                          "--vectorization", "sync")  # fmt: skip
    ends = last_steps(parent)
    assert all(300 <= e <= 301 for e in ends) and max(ends) == 301, ends
    assert_reported_and_resumed(parent, capsys)
    from ember_np.report import curve_matrix

    steps, rewards = curve_matrix(load_multiseed(parent))  # lined up at the steps asked for
    assert steps.tolist() == [100, 200, 300] and rewards.shape == (2, 3)


def test_seeds_with_async_vectorization_run_in_the_seed_workers(tmp_path, capsys):
    """AsyncVectorEnv starts a process per copy, inside each seed's worker process."""
    parent = train_parent(tmp_path / "m", 200, "--num-envs", "2", "--gymnasium-env",
                          "--vectorization", "async")  # fmt: skip
    assert all(200 <= e <= 201 for e in last_steps(parent))
    assert_reported_and_resumed(parent, capsys)


@pytest.mark.parametrize(
    ("n", "vectorization", "last", "ok"),
    [(4, None, 204, True), (4, None, 202, False), (4, None, 208, False),
     (2, "sync", 202, True), (2, "sync", 203, True), (2, "sync", 201, False),
     (2, "sync", 204, False)],
)  # fmt: skip
def test_result_json_is_accepted_exactly_where_the_rule_stops(tmp_path, n, vectorization, last,
                                                              ok):  # fmt: skip
    """--steps 202: native copies stop at 204 only; 2 gymnasium copies at 202 or 203."""
    from ember_np.dqn.config import DqnConfig
    from ember_np.training.seeds import SPEC_FILE, SeedSpec
    from ember_np.training.spec import RunSpec

    run = RunSpec("ember_np/CartPole-v1" if vectorization is None else "CartPole-v1",
                  config=DqnConfig(), steps=202, eval_every=100, num_envs=n,
                  vectorization=vectorization)  # fmt: skip
    spec = SeedSpec(run, "x", "v")
    (tmp_path / SPEC_FILE).write_text(json.dumps({"spec": spec.to_dict(), "seeds": [0]}))
    (tmp_path / "seed_0").mkdir()
    curve = [[100, 1.0, 0.1], [200, 2.0, 0.2], [last, 3.0, 0.3]]
    (tmp_path / "seed_0" / "result.json").write_text(json.dumps(
        {"seed": 0, "final_reward": 3.0, "best_eval_reward": 3.0, "curve": curve,
         "train_seconds": 1.0}))  # fmt: skip
    if ok:
        assert load_multiseed(tmp_path).runs[0].curve[-1][0] == last
    else:
        with pytest.raises(ValueError, match="'curve' (must end at the run's last step|steps)"):
            load_multiseed(tmp_path)


def test_the_closing_line_says_the_steps_trained(tmp_path, capsys):
    """--steps 401 on 3 envs: 134 vector steps, 402 transitions, said so."""
    run_dir = train(tmp_path, 401, "--num-envs", "3")
    out = capsys.readouterr().out
    assert "trained 402 steps (401 asked; a step of 3 envs is never cut)" in out
    assert "Eval at step 402" in out and latest(run_dir).total_steps == 402


def test_a_vector_step_past_several_evaluation_steps_evaluates_once(tmp_path, capsys):
    """eval_every 2 with 4 envs: each vector step passes two multiples of 2 and is
    evaluated once (one episode each), then the final evaluation at 20."""
    run_dir = train(tmp_path / "r", 20, "--num-envs", "4", "--eval-every", "2")
    steps = [r["total_steps_at_eval"] for r in TrainingRun.resume(run_dir).read_eval_episodes()]
    assert steps == [4, 8, 12, 16, 20, 20]


def test_tune_stretches_end_at_their_marks_not_past_the_overshoot(monkeypatch):
    """3 evaluations of 1,002 steps on 4 envs: the stretches end at 336, 668 and 1,004
    (each mark's first vector-step boundary), not at 336, 672 and 1,008."""
    pytest.importorskip("optuna")
    import ember_np.training.loop as loop
    from ember_np.dqn.config import DqnConfig
    from ember_np.tune import evaluate_config, settings_for

    settings = settings_for("CartPole-v1", (1002, 1, 3, 1), 0, ["hidden_sizes=[8]"],
                            num_envs=4)  # fmt: skip
    ends = []
    real = loop.train_and_evaluate

    def recording(trainer, *args, **kwargs):
        report = real(trainer, *args, **kwargs)
        ends.append(trainer.agent.total_steps)
        return report

    monkeypatch.setattr(loop, "train_and_evaluate", recording)
    evaluate_config(settings, DqnConfig(hidden_sizes=(8,), min_replay_size=64), [0])
    assert ends == [336, 668, 1004]


def make_async_copies(queue) -> None:
    """In a daemonic process: what make_train_env says for async copies."""
    from ember_np.training.setup import SetupError, make_train_env

    try:
        make_train_env("CartPole-v1", 2, "async").close()
        queue.put("made")
    except SetupError as exc:
        queue.put(str(exc))


def test_async_copies_in_a_daemonic_process_are_one_line_naming_the_setting():
    """A Dask nanny's worker is daemonic: one line saying how to start it, not a traceback."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(target=make_async_copies, args=(queue,), daemon=True)
    process.start()
    said = queue.get(timeout=120)
    process.join()
    assert said.startswith("--vectorization async starts a process per env copy")
    assert "DASK_DISTRIBUTED__WORKER__DAEMON=False" in said and "\n" not in said
