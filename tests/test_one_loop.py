"""The one training loop writes, byte for byte, what the loop it replaced wrote.

``reference_train`` below is the loop ``ember-np train`` ran before issue 24
(``cli._train_loop`` and the final evaluation), written plainly on the public
API only: ``DqnTrainer.train(n)`` in chunks of 1,000 steps that end at every
evaluation step, ``DqnTrainer.eval(k)`` there and once more at the end, a
``TrainingRun`` for the files. The command line now runs
:func:`ember_np.training.loop.train_and_evaluate`; both runs must leave the
same files with the same bytes. The one exception is ``metadata.json``'s
``run_id``, ``started_at`` and ``last_updated``, wall-clock times (compared
without them; every other field of it is compared).

No golden hashes: floating-point bits differ between machines (BLAS
kernels), so both runs happen here, on this machine.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from helpers import files_of

from ember_np import DqnAgent, DqnTrainer, TrainingRun
from ember_np.cli import main
from ember_np.presets import get_preset
from ember_np.stats import RollingMean
from ember_np.training.loop import TRAIN_CHUNK, LoopCallback, train_and_evaluate


def reference_train(env_id: str, preset_name: str, options: dict, root: Path) -> Path:
    """The pre-issue-24 ``ember-np train`` loop on the compiled twin of ``env_id``."""
    preset = get_preset(preset_name, env_id)
    seed, steps, every, episodes = (options[k] for k in ("seed", "steps", "every", "episodes"))
    env = gym.make(f"ember_np/{env_id}")
    config = preset.config_for(steps)  # its schedule against the run's steps, as train does
    agent = DqnAgent.for_env(env, config, seed=seed)
    run = TrainingRun.create("reference", preset.name, root=root)
    run.write_config({
        "env_id": f"ember_np/{env_id}", "preset": preset.name, "seed": seed, "steps": steps,
        "eval_every": every, "eval_episodes": episodes, "checkpoint_freq": options["freq"],
        "keep": options["keep"], "dqn": config.to_dict(),
    })  # fmt: skip
    trainer = DqnTrainer(env, agent, seed=seed, run=run, checkpoint_freq=options["freq"],
                         keep_checkpoints=options["keep"])  # fmt: skip
    trainer.stats.add("recent_reward", "reward", RollingMean(100))
    next_eval = every
    while agent.total_steps < steps:
        chunk = min(1_000, steps - agent.total_steps, next_eval - agent.total_steps)
        trainer.train(chunk)
        if agent.total_steps >= next_eval:
            trainer.eval(episodes)
            next_eval += every
    trainer.eval(episodes)
    return run.dir


@pytest.mark.parametrize(
    "env_id, preset, steps",
    [("CartPole-v1", "rainbow", 2_500), ("Acrobot-v1", "zoo", 1_500)],
    ids=["default-preset-cartpole", "zoo-acrobot"],
)
def test_train_writes_the_files_the_old_loop_wrote(tmp_path, capsys, env_id, preset, steps):
    options = {"seed": 3, "steps": steps, "every": 700, "episodes": 2, "freq": 600, "keep": 2}
    args = [
        "train",
        env_id,
        "--preset",
        preset,
        "--seed",
        "3",
        "--steps",
        str(steps),
        "--eval-every",
        "700",
        "--eval-episodes",
        "2",
        "--checkpoint-freq",
        "600",
        "--keep",
        "2",
        "--root",
        str(tmp_path / "new"),
        "--name",
        "reference",
        "--quiet",
    ]
    assert main(args) == 0  # fmt: skip
    (new,) = (tmp_path / "new" / "reference" / preset).iterdir()
    old = reference_train(env_id, preset, options, tmp_path / "old")
    new_files, old_files = files_of(new), files_of(old)
    assert "checkpoints/best.npz" in new_files and "eval_episodes.jsonl" in new_files
    # rotation kept the last 2 numbered checkpoints of steps // 600
    assert sorted(f for f in new_files if "step_" in f) == sorted(
        f"checkpoints/step_{s}.npz" for s in range(600, steps + 1, 600)[-2:]
    )
    assert sorted(new_files) == sorted(old_files)
    different = [name for name in new_files if new_files[name] != old_files[name]]
    assert not different, f"files that differ: {different}"


class Events(LoopCallback):
    """Records the loop's calls, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []

    def on_chunk(self, trainer, steps):
        self.seen.append(("chunk", trainer.agent.total_steps, steps))

    def on_eval(self, trainer, report, final):
        self.seen.append(("eval", report.total_steps, final))

    def on_training_end(self, trainer):
        self.seen.append(("end", trainer.agent.total_steps))


def test_chunks_end_at_evaluations_and_callbacks_come_in_order():
    env = gym.make("ember_np/CartPole-v1")
    config = get_preset("ember", "CartPole-v1").config
    trainer = DqnTrainer(env, DqnAgent.for_env(env, config, seed=0), seed=0)
    trainer.train(300)  # a resumed run keeps the multiples of eval_every
    events = Events()
    report = train_and_evaluate(trainer, 2_450, 1_200, 1, [events])
    assert events.seen == [
        ("chunk", 1_200, 900), ("eval", 1_200, False),
        ("chunk", 2_200, TRAIN_CHUNK), ("chunk", 2_400, 200), ("eval", 2_400, False),
        ("chunk", 2_750, 350), ("end", 2_750), ("eval", 2_750, True),
    ]  # fmt: skip
    assert report.total_steps == 2_750
    events.seen.clear()
    train_and_evaluate(trainer, 1_500, None, 1, [events])  # no periodic evaluation
    assert events.seen == [("chunk", 3_750, TRAIN_CHUNK), ("chunk", 4_250, 500), ("end", 4_250),
                           ("eval", 4_250, True)]  # fmt: skip


def test_a_tune_trial_scores_what_the_old_interleaved_loop_scored():
    """``evaluate_config``: K trainers side by side, each trained to every mark then evaluated.

    The reference is the loop tune ran before issue 24, plainly: chunks of
    1,000 steps up to each mark, one evaluation per trainer per mark.
    """
    from ember_np.dqn.config import DqnConfig
    from ember_np.training.spec import RunSpec
    from ember_np.tune import TuneSettings, evaluate_config

    config = DqnConfig(hidden_sizes=(32,), batch_size=32, min_replay_size=200,
                       buffer_capacity=5_000, train_freq=4)  # fmt: skip
    run = RunSpec("ember_np/CartPole-v1", config=config, steps=2_500, eval_episodes=2)
    settings = TuneSettings("CartPole-v1", run, 2, 3, 0, {})
    reports: list[tuple[int, float]] = []
    scores = evaluate_config(settings, config, [3, 4], lambda s, v: reports.append((s, v)) or False)

    trainers = []
    for seed in (3, 4):
        env = gym.make("ember_np/CartPole-v1")
        trainers.append(DqnTrainer(env, DqnAgent.for_env(env, config, seed=seed), seed=seed))
    done, expected = 0, []
    for mark in (833, 1_666, 2_500):  # steps * (i + 1) // evals
        expected = []
        for trainer in trainers:
            remaining = mark - done
            while remaining > 0:
                chunk = min(1_000, remaining)
                trainer.train(chunk)
                remaining -= chunk
            expected.append(float(trainer.eval(2).mean_reward))
        done = mark
    assert scores == expected
    assert [step for step, _ in reports] == [833, 1_666]  # every evaluation but the last


class LatestAfterChunks(LoopCallback):
    """The total steps saved in the run's ``latest.npz`` after each chunk (None: no file)."""

    def __init__(self) -> None:
        self.seen: list[int | None] = []

    def on_chunk(self, trainer, steps):
        path = trainer.run.latest_checkpoint_path()
        if not path.exists():
            self.seen.append(None)
            return
        with np.load(path) as saved:
            self.seen.append(int(saved["counters"][0]))  # the agent's total_steps


def test_latest_every_chunk_off_saves_at_checkpoints_and_the_end_into_the_same_files(tmp_path):
    """``latest_every_chunk=False`` (each seed of ``--seeds``): latest.npz is written by the
    numbered checkpoints and the last chunk only, and the run ends with the same files."""
    config = get_preset("ember", "CartPole-v1").config
    dirs, seen = {}, {}
    for every_chunk in (True, False):
        env = gym.make("ember_np/CartPole-v1")
        run = TrainingRun.create("latest", "v", root=tmp_path / str(every_chunk))
        trainer = DqnTrainer(env, DqnAgent.for_env(env, config, seed=1), seed=1, run=run,
                             checkpoint_freq=2_000)  # fmt: skip
        latest = LatestAfterChunks()
        train_and_evaluate(trainer, 3_500, None, 1, [latest], latest_every_chunk=every_chunk)
        dirs[every_chunk], seen[every_chunk] = run.dir, latest.seen
    assert seen[True] == [1_000, 2_000, 3_000, 3_500]
    assert seen[False] == [None, 2_000, 2_000, 3_500]
    assert files_of(dirs[False]) == files_of(dirs[True])


class VectorSteps:
    """A stand-in trainer whose ``train(n)`` takes whole vector steps of N envs until n
    more transitions are counted: N each (``whole``) or 0..N each (gymnasium's
    NEXT_STEP, where a resetting copy adds none)."""

    def __init__(self, n_envs: int, whole: bool, seed: int) -> None:
        self.agent = type("Agent", (), {"total_steps": 0})()
        self.n_envs, self.whole = n_envs, whole
        self.rng = np.random.default_rng(seed)
        self.evals: list[int] = []

    def train(self, n: int, save_latest: bool = True) -> None:
        assert n >= 1  # the loop never asks for an empty or negative chunk
        end = self.agent.total_steps + n
        while self.agent.total_steps < end:
            add = self.n_envs if self.whole else int(self.rng.integers(0, self.n_envs + 1))
            self.agent.total_steps += add

    def eval(self, k: int):
        from ember_np.stats import EvalReport

        self.evals.append(self.agent.total_steps)
        return EvalReport(self.agent.total_steps, k, {"episode_reward": 1.0})


@pytest.mark.parametrize("n_envs", [1, 3, 4, 7])
@pytest.mark.parametrize("whole", [True, False])
@pytest.mark.parametrize("steps, every", [(2002, 1000), (600, 100), (20, 2), (1001, 1)])
def test_the_loop_stops_and_evaluates_where_the_rule_says(n_envs, whole, steps, every):
    """The run ends in stop_steps; each periodic evaluation stands for a multiple of
    eval_every (eval_mark), one per multiple, every multiple up to --steps covered."""
    from ember_np.training.loop import eval_mark, stop_steps

    for seed in range(3):
        trainer = VectorSteps(n_envs, whole, seed)
        train_and_evaluate(trainer, steps, every, 1)
        *periodic, final = trainer.evals
        assert final == trainer.agent.total_steps
        assert final in stop_steps(steps, n_envs, whole or n_envs == 1)
        marks = [eval_mark(s, every, n_envs) for s in periodic]
        assert None not in marks and marks == sorted(set(marks))
        # every multiple of eval_every up to --steps was reached by some evaluation
        reached = {m for s in periodic for m in range(every, s + 1, every)}
        assert reached >= set(range(every, steps + 1, every))
