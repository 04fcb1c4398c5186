"""The command line's error cases (one line on stderr, exit status 2) and smaller fixes.

Each error names the file or value at fault and the fix; none is a traceback.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from helpers import SMALL_ARGS_16

from ember_np import DqnAgent, DqnConfig, DqnTrainer, TrainingRun
from ember_np.cli import main
from ember_np.envs import NativeVecEnv
from ember_np.presets import PRESETS
from ember_np.training.trainer import make_eval_env

SMALL = SMALL_ARGS_16


def train(root: Path, *extra: str, env_id: str = "CartPole-v1", steps: int = 300) -> int:
    return main(
        ["train", env_id, "--steps", str(steps), "--eval-every", "10000", "--eval-episodes",
         "1", "--checkpoint-freq", "100", "--root", str(root), *SMALL, *extra]
    )  # fmt: skip


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    assert train(root) == 0
    (run_dir,) = (root / "CartPole-v1" / "ember").iterdir()
    return run_dir


@pytest.fixture
def run_dir(template, tmp_path) -> Path:
    target = tmp_path / "CartPole-v1" / "ember" / template.name
    shutil.copytree(template, target)
    return target


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("ember-np: error: "), err
    return err[0]


# -- item 8: errors that were tracebacks ----------------------------------------------------


def test_plot_to_an_unknown_image_format(run_dir, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "x.xyz"
    assert main(["plot", str(run_dir), "-o", str(out)]) == 2
    line = one_error_line(capsys)
    assert f"-o {out}: unknown image format '.xyz'" in line and "-o curves.png" in line
    assert not out.exists()


def restricted(args: list[str]) -> subprocess.CompletedProcess:
    """``python -m ember_np ARGS`` obeying file permissions (root drops its override)."""
    prefix = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv to make root obey file permissions")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    return subprocess.run([*prefix, sys.executable, "-m", "ember_np", *args],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


@pytest.mark.skipif(sys.platform != "linux", reason="file modes and setpriv")
def test_resume_on_a_read_only_run_says_so_and_eval_still_works(run_dir):
    for root, _, files in os.walk(run_dir):
        for name in files:
            os.chmod(os.path.join(root, name), 0o444)
        os.chmod(root, 0o555)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    try:
        resumed = restricted(["resume", str(run_dir), "--steps", "10", "--quiet"])
        evaluated = restricted(["eval", str(run_dir), "--episodes", "1", "--checkpoint", "latest"])
    finally:
        for root, _, _ in os.walk(run_dir):
            os.chmod(root, 0o755)
    assert resumed.returncode == 2, resumed.stderr
    err = resumed.stderr.strip().splitlines()
    assert len(err) == 1, err
    assert f"cannot train in the run {run_dir}: it is not writable (Permission denied)" in err[0]
    assert "copy the run to a writable place" in err[0]
    assert evaluated.returncode == 0 and "Eval at step 300" in evaluated.stdout, evaluated.stderr
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize(
    "command", [["eval", "--checkpoint", "latest"], ["resume", "--steps", "10"]]
)
def test_a_checkpoint_from_another_env_than_config_json(run_dir, command, capsys):
    config = json.loads((run_dir / "config.json").read_text())
    config["env_id"] = "Acrobot-v1"
    (run_dir / "config.json").write_text(json.dumps(config))
    assert main([command[0], str(run_dir), *command[1:]]) == 2
    line = one_error_line(capsys)
    assert "latest.npz was trained on {'type': 'VecEncoder', 'shape': [4]}" in line
    assert "config.json's env 'Acrobot-v1' has {'type': 'VecEncoder', 'shape': [6]}" in line
    assert "set env_id in config.json to the env the run trained on" in line


CORRUPT = {
    "not JSON": (b'{"env_id": "CartPole-v1", ', "is not valid JSON"),
    "not an object": (b"[1, 2]", "holds a JSON list, expected an object"),
    "not UTF-8": (b'{"env_id": "\xff"}', "is not UTF-8 text"),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPT))
@pytest.mark.parametrize(
    "filename, command",
    [("config.json", ["eval"]), ("config.json", ["resume", "--steps", "10"]),
     ("metadata.json", ["eval"]), ("metadata.json", ["resume", "--steps", "10"]),
     ("metadata.json", ["plot", "-o", "c.png"])],  # plot does not read config.json
)  # fmt: skip
def test_a_corrupt_run_file_is_named(run_dir, filename, corruption, command, capsys, monkeypatch):
    monkeypatch.chdir(run_dir.parent)
    data, message = CORRUPT[corruption]
    (run_dir / filename).write_bytes(data)
    assert main([command[0], str(run_dir), *command[1:]]) == 2
    line = one_error_line(capsys)
    assert f"{run_dir / filename} {message}" in line and "restore it from a copy" in line


def test_metadata_with_wrong_values_is_named(run_dir, capsys):
    meta = json.loads((run_dir / "metadata.json").read_text())
    meta["total_steps"] = "lots"
    (run_dir / "metadata.json").write_text(json.dumps(meta))
    assert main(["eval", str(run_dir)]) == 2
    line = one_error_line(capsys)
    assert "'total_steps' must be an integer >= 0, found 'lots'" in line


def test_a_config_json_without_env_id_says_what_to_add(run_dir, capsys):
    (run_dir / "config.json").write_text("{}")
    assert main(["resume", str(run_dir), "--steps", "10"]) == 2
    assert 'add "env_id": "<gymnasium id>" to it' in one_error_line(capsys)


@pytest.mark.parametrize("value", ["10**12", "1000000000000"])
def test_a_replay_buffer_larger_than_memory_is_refused_before_allocating(
    value, tmp_path, capsys, monkeypatch
):
    allocated = []
    real_zeros, real_empty = np.zeros, np.empty

    def watch(alloc):
        def f(shape, *args, **kwargs):
            allocated.append(shape)
            return alloc(shape, *args, **kwargs)

        return f

    monkeypatch.setattr(np, "zeros", watch(real_zeros))
    monkeypatch.setattr(np, "empty", watch(real_empty))
    argv = ["train", "CartPole-v1", "--root", str(tmp_path), "--set", f"buffer_capacity={value}"]
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert "buffer_capacity=1000000000000 needs 23.6 TiB for the replay buffer" in line
    assert re.search(r"more than the [\d.]+ [GMT]iB of memory available: use --set "
                     r"buffer_capacity=N with N <= [\d,]+", line), line  # fmt: skip
    assert not any(np.prod(s) >= 10**12 for s in allocated if isinstance(s, (int, tuple)))
    assert not list(tmp_path.iterdir())  # refused before the run directory was made


def test_a_full_disk_stops_training_with_one_line_and_keeps_what_was_saved(
    tmp_path, capsys, monkeypatch
):
    saves = []
    real_savez = np.savez

    def savez(file, *args, **kwargs):
        saves.append(file)
        if len(saves) > 2:  # step_100.npz and latest.npz fit, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_savez(file, *args, **kwargs)

    monkeypatch.setattr(np, "savez", savez)
    assert train(tmp_path, steps=300) == 2
    line = one_error_line(capsys)
    (run_dir,) = (tmp_path / "CartPole-v1" / "ember").iterdir()
    step_200 = run_dir / "checkpoints" / "step_200.npz"
    assert f"cannot write {step_200}: No space left on device" in line
    assert "stopped at step 200, the checkpoints written before are intact" in line
    assert f"`ember-np resume {run_dir}`" in line
    monkeypatch.undo()
    assert DqnAgent.from_checkpoint(run_dir / "checkpoints" / "latest.npz").total_steps == 100
    assert not list(run_dir.rglob(".*.tmp"))  # no temporary file left behind
    assert main(["resume", str(run_dir), "--steps", "200", "--quiet"]) == 0  # and it goes on


def test_a_full_disk_while_logging_an_episode_names_the_log(tmp_path, capsys, monkeypatch):
    real_fsync = os.fsync

    def fsync(fd):
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if (
            path.name == "train_episodes.jsonl"
            and (path.parent / "checkpoints/step_100.npz").exists()
        ):
            raise OSError(errno.ENOSPC, "No space left on device")  # full after a checkpoint
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    assert train(tmp_path, steps=300) == 2
    (run_dir,) = (tmp_path / "CartPole-v1" / "ember").iterdir()
    line = one_error_line(capsys)
    assert f"cannot write {run_dir / 'train_episodes.jsonl'}: No space left on device" in line
    assert f"then `ember-np resume {run_dir}`" in line
    monkeypatch.undo()
    assert main(["resume", str(run_dir), "--steps", "100", "--quiet"]) == 0


# -- item 9: smaller fixes ------------------------------------------------------------------


def test_native_ids_train_with_their_envs_preset_under_a_valid_name(tmp_path, capsys):
    argv = ["train", "ember_np/CartPole-v1", "--steps", "200", "--eval-every", "10000",
            "--eval-episodes", "1", "--root", str(tmp_path), "--quiet"]  # fmt: skip
    assert main(argv) == 0
    (run_dir,) = (tmp_path / "ember_np_CartPole-v1" / "rainbow").iterdir()
    config = json.loads((run_dir / "config.json").read_text())
    assert config["env_id"] == "ember_np/CartPole-v1" and config["preset"] == "rainbow"
    # the preset's schedule lengths resolved against the run's 200 steps
    assert DqnConfig.from_dict(config["dqn"]) == PRESETS["CartPole-v1"]["rainbow"].config_for(200)


def test_module_ids_pass_through_gym_make(tmp_path, capsys):
    argv = ["train", "gymnasium.envs.classic_control:CartPole-v1", "--root", str(tmp_path),
            "--steps", "200", "--eval-every", "10000", "--eval-episodes", "1", *SMALL]  # fmt: skip
    assert main(argv) == 0
    (run_dir,) = (tmp_path / "gymnasium.envs.classic_control_CartPole-v1" / "ember").iterdir()
    assert TrainingRun.resume(run_dir).metadata["total_steps"] == 200


@pytest.mark.parametrize(
    "env_id, hint",
    [
        ("CartPol-v1", "unknown environment 'CartPol-v1': .*Did you mean: `CartPole`"),
        ("Acrobot-v0", "cannot make 'Acrobot-v0': .*deprecated. Please use `Acrobot-v1`"),
        ("nosuchmodule:Foo-v0", "No module named 'nosuchmodule'"),
    ],
)
def test_gymnasiums_own_hints_are_kept(env_id, hint, capsys):
    assert main(["train", env_id, "--quiet"]) == 2
    assert re.search(hint, one_error_line(capsys))


def test_set_before_the_env_id_does_not_swallow_it(tmp_path, capsys):
    argv = ["train", "--set", "learning_rate=0.0005", "gamma=0.9", "CartPole-v1", "--steps", "100",
            "--eval-every", "10000", "--eval-episodes", "1", "--root", str(tmp_path), "--quiet"]  # fmt: skip
    assert main(argv) == 0
    (run_dir,) = (tmp_path / "CartPole-v1" / "rainbow").iterdir()
    config = json.loads((run_dir / "config.json").read_text())
    assert config["env_id"] == "ember_np/CartPole-v1"  # the compiled twin train now uses
    assert config["dqn"]["learning_rate"] == 0.0005 and config["dqn"]["gamma"] == 0.9


def test_plot_without_a_suffix_prints_the_file_it_wrote(run_dir, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert main(["plot", str(run_dir), "-o", str(tmp_path / "c")]) == 0
    assert f"wrote {tmp_path / 'c.png'}" in capsys.readouterr().out
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_run_files_respect_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        run = TrainingRun.create("r", "v1", root=tmp_path)
        run.write_config({"env_id": "CartPole-v1"})
        env = gym.make("CartPole-v1")
        agent = DqnAgent.for_env(env, DqnConfig(hidden_sizes=(8,), batch_size=8,
                                                min_replay_size=8, buffer_capacity=100))  # fmt: skip
        DqnTrainer(env, agent, run=run, checkpoint_freq=50).train(50)
    finally:
        os.umask(old)
    files = [p for p in run.dir.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"metadata.json", "config.json", "latest.npz",
                                       "step_50.npz", "train_episodes.jsonl", ".lock"}  # fmt: skip
    for path in files:
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask, path


def test_an_unreadable_run_file_is_a_permission_error_not_bad_json(run_dir, monkeypatch):
    real = Path.read_text

    def read_text(self, *args, **kwargs):
        if self.name == "metadata.json":
            raise PermissionError(errno.EACCES, "Permission denied")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    with pytest.raises(PermissionError, match=f"cannot read {run_dir / 'metadata.json'}: "
                                              "Permission denied"):  # fmt: skip
        TrainingRun.resume(run_dir)


def test_a_vectorised_env_after_single_env_transitions_says_what_to_do():
    """Issue 25: vector envs train, each env in a stream of the buffer; a buffer that
    already holds one env's transitions cannot be split, and the error says why."""
    env = gym.make("ember_np/CartPole-v1")
    agent = DqnAgent.for_env(env, DqnConfig(hidden_sizes=(8,)))
    DqnTrainer(env, agent).train(10)
    vec = NativeVecEnv("CartPole-v1", num_envs=4, seed=0)
    with pytest.raises(ValueError, match=r"the buffer holds 10 transitions of 1 env\(s\); it can "
                                         r"only be split into 4 streams while empty"):  # fmt: skip
        DqnTrainer(vec, agent)


def test_load_keeps_the_agents_config_and_warns_when_they_differ(tmp_path):
    env = gym.make("CartPole-v1")
    saved = DqnAgent.for_env(env, DqnConfig(hidden_sizes=(8,), learning_rate=1e-3))
    path = saved.save(tmp_path / "a.npz")
    other = DqnAgent.for_env(env, DqnConfig(hidden_sizes=(8,), learning_rate=5e-4, gamma=0.9))
    with pytest.warns(UserWarning, match=r"a\.npz was saved with another config: gamma 0\.99 "
                                         r"\(this agent: 0\.9\), learning_rate 0\.001 \(this "
                                         r"agent: 0\.0005\); load\(\) keeps this agent's config"):  # fmt: skip
        other.load(path)
    assert other.config.learning_rate == 5e-4
    assert np.array_equal(other.online.params, saved.online.params)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DqnAgent.for_env(env, DqnConfig(hidden_sizes=(8,), learning_rate=1e-3)).load(path)


def test_eval_env_normalizes_with_the_training_statistics_frozen():
    train_env = gym.wrappers.NormalizeObservation(gym.make("CartPole-v1"))
    train_env.reset(seed=0)
    for _ in range(300):
        _, _, terminated, truncated, _ = train_env.step(train_env.action_space.sample())
        if terminated or truncated:
            train_env.reset()
    stats = train_env.obs_rms
    mean, var, count = stats.mean.copy(), stats.var.copy(), stats.count
    eval_env = make_eval_env(train_env)
    raw_env = gym.make("CartPole-v1")  # the same episode, unnormalized
    obs, _ = eval_env.reset(seed=7)
    raw, _ = raw_env.reset(seed=7)
    for step in range(500):
        # What the training wrapper would give for this raw observation, frozen.
        expected = np.float32((raw - mean) / np.sqrt(var + train_env.epsilon))
        assert np.array_equal(obs, expected)
        obs, _, terminated, truncated, _ = eval_env.step(step % 2)
        raw, *_ = raw_env.step(step % 2)
        if terminated or truncated:
            break
    assert step >= 8  # a whole episode compared
    assert np.array_equal(stats.mean, mean) and stats.count == count  # eval did not update them
    # The trainer's default eval env is this one: it follows the training statistics.
    agent = DqnAgent.for_env(train_env, DqnConfig(hidden_sizes=(8,)))
    trainer = DqnTrainer(train_env, agent, seed=0)
    trainer.eval(1)
    assert trainer.eval_env.obs_rms is train_env.obs_rms
    unfrozen = make_eval_env(train_env, frozen_stats=False)
    assert unfrozen.obs_rms is not train_env.obs_rms and unfrozen.update_running_mean


# -- --set takes tuples as the messages write them ------------------------------------------


def tuple_fields() -> list[str]:
    import dataclasses

    return [f.name for f in dataclasses.fields(DqnConfig)
            if isinstance(getattr(DqnConfig(), f.name), tuple)]  # fmt: skip


@pytest.mark.parametrize("text, value", [
    ("(64, 64)", (64, 64)), ("(64,64)", (64, 64)), ("64,64", (64, 64)), ("(64,)", (64,)),
    ("64,", (64,)), (" ( 32 , 16 ) ", (32, 16)), ("[64, 64]", (64, 64)),
])  # fmt: skip
def test_set_reads_a_tuple_as_python_writes_it_for_every_tuple_field(text, value):
    from ember_np.training.setup import parse_sets

    assert tuple_fields()  # hidden_sizes at least
    for name in tuple_fields():
        assert parse_sets([f"{name}={text}"]) == {name: value}


def test_set_hidden_sizes_as_the_error_message_writes_it_trains(tmp_path, capsys):
    for k, text in enumerate(["(16, 8)", "(16,)"]):
        # this --set replaces SMALL's (argparse keeps the last), so hidden_sizes is ours
        assert train(tmp_path / str(k), "--set", f"hidden_sizes={text}", steps=50) == 0
        (config,) = (tmp_path / str(k)).rglob("config.json")
        assert json.loads(config.read_text())["dqn"]["hidden_sizes"] == list(
            json.loads(f"[{text[1:-1].rstrip(',')}]")
        )


@pytest.mark.parametrize("text", ["garbage", "(64)", "(a, b)", ",", "(,)", "(1, [2])", "64,x"])
def test_set_garbage_for_a_tuple_field_is_still_one_clear_line(tmp_path, capsys, text):
    assert train(tmp_path, "--set", f"hidden_sizes={text}", steps=50) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ember-np: error: --set: hidden_sizes must be")
    assert "e.g. (64, 64)" in err and repr(text) in err
    assert not list(tmp_path.iterdir())
