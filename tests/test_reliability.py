"""Reliability: crash-safe checkpoints, exact resume, hostile files, bad input."""

from __future__ import annotations

import errno
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from functools import partial
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from helpers import SMALL, read_line
from helpers import make_agent as shared_make_agent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember_np import (
    CheckpointError,
    DqnAgent,
    DqnPolicy,
    DqnTrainer,
    EpisodeStatus,
    Experience,
    IndexActionMapper,
    TrainingRun,
    VecEncoder,
)
from ember_np.dqn.checkpoint_format import FORMAT_VERSION

make_agent = partial(shared_make_agent, obs_size=4)


def transitions(n, seed=0):
    """Episodes as an env gives them: each next_obs is the following obs until an episode ends."""
    data = np.random.default_rng(seed)
    out = []
    obs = data.standard_normal(4).astype(np.float32)
    for _ in range(n):
        status = EpisodeStatus(int(data.choice(3, p=[0.9, 0.07, 0.03])))
        next_obs = obs + np.float32(0.1)
        out.append(Experience(obs, int(data.integers(2)), float(data.standard_normal()),
                              next_obs, status))  # fmt: skip
        continuing = status == EpisodeStatus.CONTINUING
        obs = next_obs if continuing else data.standard_normal(4).astype(np.float32)
    return out


def assert_same_transitions(a, b):
    """Two replay buffers hold the same transitions in the same slots, at the same cursor."""
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert sa[key].tobytes() == sb[key].tobytes(), key


def counters(agent):
    """The agent's step and update counts, as a checkpoint's ``counters`` holds them."""
    return np.array([agent.total_steps, agent.n_updates], dtype=np.int64)


def assert_identical(a, b):
    sa, sb = a.online.state_dict(), b.online.state_dict()
    for x, y in [
        (a.online.params, b.online.params), (a.target.params, b.target.params),
        (sa["adam_m"], sb["adam_m"]), (sa["adam_v"], sb["adam_v"]),
        (sa["adam_t"], sb["adam_t"]), (counters(a), counters(b)),
        (a.exploration_rng.state, b.exploration_rng.state),
        (a.replay_rng.state, b.replay_rng.state),
    ]:  # fmt: skip
        assert x.tobytes() == y.tobytes()
    assert_same_transitions(a.buffer, b.buffer)


# -- 2. exact resume --------------------------------------------------------------


def test_restored_agent_continues_bit_identically_for_1000_steps(tmp_path):
    agent = make_agent(seed=3)
    for e in transitions(700, seed=1):  # wraps the 500-slot buffer
        agent.observe(e)
    path = agent.save(tmp_path / "a.npz", include_buffer=True)
    restored = DqnAgent.from_checkpoint(path)
    assert_identical(agent, restored)
    later = transitions(1000, seed=2)
    x = np.zeros(4, np.float32)
    for e in later:
        assert agent.observe(e) == restored.observe(e)
        assert agent.act_epsilon_greedy(x) == restored.act_epsilon_greedy(x)
    assert agent.n_updates > 900
    assert_identical(agent, restored)


def test_large_buffer_saves_as_plain_arrays(tmp_path):
    config = SMALL.replace(buffer_capacity=300_000)
    agent = make_agent(config=config)
    buf = agent.buffer
    n = 300_000
    obs = np.repeat(np.arange(4, dtype=np.float32)[None], n, axis=0)
    buf.load_state_dict({
        "obs": obs, "next_obs": obs + 1, "action": np.ones(n, np.int32),
        "reward": np.ones(n, np.float32), "status": np.zeros(n, np.uint8),
        "cursor": np.array([12_345, n, n]),
    })  # fmt: skip
    path = agent.save(tmp_path / "big.npz", include_buffer=True)
    with zipfile.ZipFile(path) as z:
        assert "buffer/obs.npy" in z.namelist()
    with np.load(path, allow_pickle=False) as data:
        assert data["buffer/obs"].shape == (300_000, 4)
    back = DqnAgent.from_checkpoint(path)
    assert back.buffer.position == 12_345 and len(back.buffer) == 300_000
    assert_same_transitions(back.buffer, buf)


def test_resumed_run_continues_steps_episodes_and_epsilon(tmp_path):
    run = TrainingRun.create("r", "v1", root=tmp_path)
    env = gym.make("CartPole-v1")
    trainer = DqnTrainer(env, DqnAgent.for_env(env, SMALL), seed=0, run=run, checkpoint_freq=100)
    trainer.train(450)  # last numbered checkpoint at 400; latest.npz at 450
    episodes = trainer.episode
    again = TrainingRun.resume(run.dir)
    agent = DqnAgent.from_checkpoint(again.latest_checkpoint_path())
    resumed = DqnTrainer(gym.make("CartPole-v1"), agent, seed=9, run=again, checkpoint_freq=100)
    assert resumed.episode == episodes and agent.total_steps == 450
    assert agent.epsilon == SMALL.epsilon_at(450)
    first = next(resumed.steps())
    assert first.total_steps == 451 and first.episode == episodes
    assert first.epsilon == SMALL.epsilon_at(450)


def test_resume_from_an_older_checkpoint_rewinds_the_logs_without_losing_them(tmp_path):
    run = TrainingRun.create("r", "v1", root=tmp_path)
    env = gym.make("CartPole-v1")
    trainer = DqnTrainer(env, DqnAgent.for_env(env, SMALL), seed=0, run=run, checkpoint_freq=100)
    trainer.train(300)
    trainer.eval(1)
    trainer.train(150)  # episodes logged after step 300, then "the process dies"
    rows = run.read_train_episodes()
    after = [r for r in rows if r["total_steps"] > 300]
    assert after
    agent = DqnAgent.from_checkpoint(run.checkpoint_path(300))
    resumed = DqnTrainer(env, agent, seed=1, run=TrainingRun.resume(run.dir), checkpoint_freq=100)
    kept = run.read_train_episodes()
    assert all(r["total_steps"] <= 300 for r in kept) and len(kept) == len(rows) - len(after)
    rolled = [
        json.loads(x)
        for x in (run.dir / "train_episodes.rolled_back.jsonl").read_text().splitlines()
    ]
    assert rolled == after
    assert resumed.episode == len(kept)
    assert json.loads((run.dir / "metadata.json").read_text())["total_steps"] == 300


def test_a_fresh_agent_refuses_a_run_that_has_history(tmp_path):
    run = TrainingRun.create("r", "v1", root=tmp_path)
    env = gym.make("CartPole-v1")
    DqnTrainer(env, DqnAgent.for_env(env, SMALL), run=run).train(200)
    with pytest.raises(ValueError, match="already holds .* training episodes"):
        DqnTrainer(env, DqnAgent.for_env(env, SMALL), run=TrainingRun.resume(run.dir))


# -- 1. crash safety ----------------------------------------------------------------

_ZYGOTE = textwrap.dedent(
    """
    import os
    import sys
    import tempfile
    from pathlib import Path
    import gymnasium as gym
    from ember_np import DqnAgent, DqnConfig, DqnTrainer, TrainingRun

    root = Path(sys.argv[1])
    config = DqnConfig(hidden_sizes=(16,), learning_rate=1e-3, batch_size=16,
                       buffer_capacity=2_000, min_replay_size=32, target_update_freq=20,
                       epsilon_decay_steps=500)

    def trainer_for(root, name):
        env = gym.make("CartPole-v1")
        if (root / name).exists():
            run = TrainingRun.resume(root / name / "v1")
            agent = DqnAgent.from_checkpoint(run.latest_checkpoint_path())
        else:
            run = TrainingRun.create(name, "v1", root=root)
            agent = DqnAgent.for_env(env, config, seed=0)
        return DqnTrainer(env, agent, seed=agent.total_steps, run=run, checkpoint_freq=25,
                          keep_checkpoints=3)

    # Load every kernel the worker runs (training, evaluation, resuming) once, here, so
    # that each forked worker starts at once instead of paying numba's start-up again.
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(2):
            warm = trainer_for(Path(scratch), "warm")
            warm.train(60)
            warm.eval(1)
    print("warm", flush=True)
    for _ in sys.stdin:
        pid = os.fork()
        if pid == 0:  # the worker: resume the run (or start it) and train until killed
            trainer = trainer_for(root, "crash")
            print("ready", os.getpid(), flush=True)
            while True:
                trainer.train(60)
                trainer.eval(1)
        os.waitpid(pid, 0)
        print("dead", flush=True)
    """
)


def check_run_files(run_dir: Path) -> tuple[int, int]:
    """Every file of the run loads and says what it should; returns the steps in
    latest.npz and in metadata.json."""
    agent = DqnAgent.from_checkpoint(run_dir / "checkpoints" / "latest.npz")
    assert agent.total_steps > 0
    obs = np.zeros((1, 4), dtype=np.float32)
    if (run_dir / "checkpoints" / "best.npz").exists():
        best = DqnPolicy.load(run_dir / "checkpoints" / "best.npz")
        q = best.q_values_batch(obs)
        assert q.shape == (1, 2) and np.isfinite(q).all()
    for step, path in TrainingRun.resume(run_dir).step_checkpoints():
        assert DqnAgent.from_checkpoint(path).total_steps == step  # step_<N>.npz holds step N
        q = DqnPolicy.load(path).q_values_batch(obs)
        assert q.shape == (1, 2) and np.isfinite(q).all()
    meta = json.loads((run_dir / "metadata.json").read_text())
    # latest.npz is written before metadata.json, so the metadata never runs ahead of it
    assert 0 <= meta["total_steps"] <= agent.total_steps
    for log in run_dir.glob("*.jsonl"):
        for line in log.read_text().splitlines():
            assert isinstance(json.loads(line), dict)
    return agent.total_steps, meta["total_steps"]


def test_sigkill_at_20_random_moments_never_breaks_the_run(tmp_path):
    """20 worker processes, each resuming the run the previous one left, SIGKILLed at a
    random moment. The workers are forked from one process that has loaded the kernels
    (one numba start-up instead of 20); each is still a real process killed by a real
    signal in the middle of whatever it was writing."""
    rng = random.Random(1234)
    script = tmp_path / "zygote.py"
    script.write_text(_ZYGOTE)
    work = tmp_path / "work"
    work.mkdir()
    # one BLAS thread: a process that forks must not hold a pool of BLAS threads
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    zygote = subprocess.Popen([sys.executable, str(script), str(work)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        assert read_line(zygote, timeout=600).strip() == "warm"
        resumed_from = 0
        for attempt in range(20):
            zygote.stdin.write("go\n")
            zygote.stdin.flush()
            word, pid = read_line(zygote).split()
            assert word == "ready"
            if attempt == 0:  # the very first run: wait for its first checkpoint
                deadline = time.time() + 60
                while not list(work.glob("crash/v1/*/checkpoints/latest.npz")):
                    assert time.time() < deadline and zygote.poll() is None
                    time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.5))
            os.kill(int(pid), signal.SIGKILL)
            assert read_line(zygote).strip() == "dead"
            (run_dir,) = (work / "crash" / "v1").iterdir()
            latest_steps, meta_steps = check_run_files(run_dir)
            # the child printed "ready" after resuming, which sets the metadata to the
            # checkpoint it resumed from: never lost, whatever the moment of the kill
            assert meta_steps >= resumed_from
            resumed_from = latest_steps
    finally:
        zygote.kill()
        zygote.wait()
    final = DqnAgent.from_checkpoint(run_dir / "checkpoints" / "latest.npz")
    assert final.total_steps > 200  # the run made progress across the kills


def test_failed_checkpoint_write_keeps_the_old_file_and_says_why(tmp_path, monkeypatch):
    run = TrainingRun.create("r", "v1", root=tmp_path)
    env = gym.make("CartPole-v1")
    trainer = DqnTrainer(env, DqnAgent.for_env(env, SMALL), run=run, checkpoint_freq=100)
    trainer.train(100)
    latest = run.latest_checkpoint_path()
    before = latest.read_bytes()

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "savez", disk_full)
    with pytest.raises(OSError, match="No space left on device"):
        trainer.train(100)
    monkeypatch.undo()
    assert latest.read_bytes() == before
    assert not list(run.checkpoints_dir.glob(".*.tmp"))  # the temporary file was removed
    assert trainer.agent.total_steps == 200  # the failed write came at step 200's checkpoint
    assert DqnAgent.from_checkpoint(latest).total_steps == 100  # the old file, still loadable


def test_unusable_run_root_fails_at_creation(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(OSError, match="cannot create the run directory"):
        TrainingRun.create("r", "v1", root=blocker / "runs")


def test_resume_removes_leftover_temporary_files(tmp_path):
    run = TrainingRun.create("r", "v1", root=tmp_path)
    leftover = run.checkpoints_dir / ".latest.npz.abc123.tmp"
    leftover.write_bytes(b"half a checkpoint")
    TrainingRun.resume(run.dir)
    assert not leftover.exists()


# -- 3. hostile and broken files --------------------------------------------------------


@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory) -> bytes:
    agent = make_agent()
    for e in transitions(60):
        agent.observe(e)
    path = agent.save(tmp_path_factory.mktemp("ck") / "good.npz", include_buffer=True)
    return path.read_bytes()


def rewrite(path: Path, mutate) -> Path:
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    mutate(arrays)
    out = path.with_name("mutated.npz")
    np.savez(out, **arrays)
    return out


def load_all_ways(path: Path) -> None:
    DqnAgent.from_checkpoint(path)
    make_agent().load(path)
    DqnPolicy.load(path)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda a: a.pop("online/w1"), "missing key 'online/w1'"),
        (lambda a: a.pop("format"), "not an ember_np checkpoint"),
        (lambda a: a.update(format_version=np.array(FORMAT_VERSION + 1)), "unknown format version 2"),
        (lambda a: a.update(format=np.array("something.else")), "expected a 'ember_np.dqn_agent'"),
        (lambda a: a.update({"online/w0": a["online/w0"][:, :8]}), r"'online/w0': expected shape \(4, 16\), found \(4, 8\)"),
        (lambda a: a.update({"online/w0": a["online/w0"].astype(np.float64)}), "expected dtype float32, found float64"),
        (lambda a: a["online/b0"].__setitem__(0, np.nan), "NaN or infinite"),
        (lambda a: a.update(config=np.array("{not json")), "invalid JSON"),
        (lambda a: a.update({"rng/replay": np.zeros(4, np.uint64)}), "not a valid PCG64 state"),
        (lambda a: a.update({"buffer/cursor": np.array([3, 70, 500])}), "replay buffer"),
    ],
)  # fmt: skip
def test_broken_checkpoints_raise_checkpoint_error_naming_file_and_problem(
    good_checkpoint, tmp_path, mutate, message
):
    path = tmp_path / "good.npz"
    path.write_bytes(good_checkpoint)
    bad = rewrite(path, mutate)
    with pytest.raises(CheckpointError, match=message) as info:
        DqnAgent.from_checkpoint(bad)
    assert str(bad) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_architecture_mismatch_names_expected_and_found(good_checkpoint, tmp_path):
    path = tmp_path / "good.npz"
    path.write_bytes(good_checkpoint)
    other = DqnAgent(VecEncoder(4), IndexActionMapper(2), SMALL.replace(hidden_sizes=(8,)), 0)
    with pytest.raises(
        CheckpointError,
        match=r"this agent has layer_sizes \(4, 8, 2\), the checkpoint has \(4, 16, 2\)",
    ):
        other.load(path)


@pytest.mark.parametrize("keep", [0, 10, 100, 1000, -100, -1])
def test_truncated_file(good_checkpoint, tmp_path, keep):
    path = tmp_path / "t.npz"
    path.write_bytes(good_checkpoint[:keep] if keep >= 0 else good_checkpoint[:keep])
    with pytest.raises(CheckpointError, match=str(path)):
        load_all_ways(path)


def test_foreign_files(tmp_path):
    npy = tmp_path / "x.npz"
    np.save(tmp_path / "x.npy", np.zeros(3))
    (tmp_path / "x.npy").rename(npy)
    text = tmp_path / "notes.npz"
    text.write_text("hello")
    foreign = tmp_path / "other.npz"
    np.savez(foreign, weights=np.zeros(3))
    for path in (npy, text, foreign, tmp_path / "missing.npz"):
        with pytest.raises(CheckpointError, match=str(path)):
            load_all_ways(path)


def test_object_arrays_are_never_unpickled(good_checkpoint, tmp_path):
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (Path.touch, (marker,))

    path = tmp_path / "good.npz"
    path.write_bytes(good_checkpoint)
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["online/w0"] = np.array([Exploit()], dtype=object)
    evil = tmp_path / "evil.npz"
    np.savez(evil, **arrays)  # np.savez pickles object arrays
    assert pickle.dumps(Exploit())  # the payload is real
    with pytest.raises(CheckpointError, match="Object arrays cannot be loaded"):
        load_all_ways(evil)
    assert not marker.exists()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_random_corruption_loads_or_raises_checkpoint_error(good_checkpoint, tmp_path, data):
    blob = bytearray(good_checkpoint)
    if data.draw(st.booleans(), label="truncate"):
        blob = blob[: data.draw(st.integers(0, len(blob) - 1), label="length")]
    for _ in range(data.draw(st.integers(1, 8), label="flips")):
        if blob:
            i = data.draw(st.integers(0, len(blob) - 1), label="position")
            blob[i] = data.draw(st.integers(0, 255), label="byte")
    path = tmp_path / "corrupt.npz"
    path.write_bytes(bytes(blob))
    for load in (DqnAgent.from_checkpoint, DqnPolicy.load, lambda p: make_agent().load(p)):
        try:
            load(path)
        except CheckpointError:
            pass


# -- 4. bad runtime input ---------------------------------------------------------------


@pytest.mark.parametrize(
    "experience, message",
    [
        (Experience([np.nan, 0, 0, 0], 0, 1.0, np.zeros(4), 0), "obs must be finite"),
        (Experience(np.zeros(4), 0, 1.0, [0, np.inf, 0, 0], 0), "next_obs must be finite"),
        (Experience(np.zeros(4), 0, float("nan"), np.zeros(4), 0), "reward must be finite"),
        (Experience(np.zeros(4), 0, "lots", np.zeros(4), 0), "reward must be a number"),
        (Experience(np.zeros(3), 0, 1.0, np.zeros(4), 0), r"expected an observation of shape \(4,\), got \(3,\)"),
        (Experience(["a", "b", "c", "d"], 0, 1.0, np.zeros(4), 0), "expected an observation of shape"),
        (Experience(np.zeros((2, 2)), 0, 1.0, np.zeros(4), 0), r"got \(2, 2\)"),
        (Experience(np.zeros(4), 2, 1.0, np.zeros(4), 0), r"action must be in \[0, 2\), got 2"),
        (Experience(np.zeros(4), 0.5, 1.0, np.zeros(4), 0), "an action must be an integer"),
        (Experience(np.zeros(4), 0, 1.0, np.zeros(4), 9), "status must be an EpisodeStatus"),
        (Experience(np.zeros(4), 0, 1.0, np.zeros(4), "done"), "status must be an EpisodeStatus"),
    ],
)  # fmt: skip
def test_bad_observe_input_raises_value_error_and_stores_nothing(experience, message):
    agent = make_agent()
    for e in transitions(40):
        agent.observe(e)
    buf = agent.buffer

    def state():
        arrays = (buf.storage, buf.finals, buf.kernel_state.cursor, agent.online.params)
        return [a.tobytes() for a in arrays] + [agent.total_steps]

    before = state()
    with pytest.raises(ValueError, match=message):
        agent.observe(experience)
    assert state() == before


def test_act_on_bad_observations_never_leaks_a_numba_error():
    agent = make_agent()
    policy = agent.into_policy()
    for obs in (np.zeros(5), "text", [[1, 2], [3, 4]], None):
        for act in (agent.act, agent.act_epsilon_greedy, policy.act):
            with pytest.raises(ValueError, match="expected an observation of shape"):
                act(obs)
    for obs in (np.array([None] * 4), [0.0, np.inf, 0.0, 0.0]):  # None converts to NaN
        for act in (agent.act, agent.act_epsilon_greedy, policy.act):
            with pytest.raises(ValueError, match="observation must be finite"):
                act(obs)


def test_non_discrete_and_non_box_envs_are_refused():
    with pytest.raises(ValueError, match="DQN and PPO need a Discrete action space"):
        DqnAgent.for_env(gym.make("MountainCarContinuous-v0"))
    with pytest.raises(ValueError, match="DQN and PPO need a Box observation space"):
        DqnAgent.for_env(gym.make("Blackjack-v1"))  # a Tuple of Discrete spaces
    # a Discrete observation space is one-hot encoded
    assert DqnAgent.for_env(gym.make("FrozenLake-v1")).online.layer_sizes[0] == 16


def test_invalid_config_values():
    for field, value in [("gamma", -1), ("batch_size", 0), ("tau", 2.0), ("hidden_sizes", (0,))]:
        with pytest.raises(ValueError, match=field):
            SMALL.replace(**{field: value})


def test_env_returning_nan_stops_training_with_a_clear_error():
    class NanEnv(gym.Wrapper):
        def step(self, action):
            obs, r, term, trunc, info = self.env.step(action)
            if self.env.unwrapped.steps_beyond_terminated is None and np.random.rand() < 0.05:
                obs = obs.copy()
                obs[0] = np.nan
            return obs, r, term, trunc, info

    np.random.seed(0)
    env = NanEnv(gym.make("CartPole-v1"))
    trainer = DqnTrainer(env, DqnAgent.for_env(env, SMALL), eval_env=gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match="next_obs must be finite"):
        trainer.train(1_000)
    stored = trainer.agent.buffer.state_dict()
    assert (
        np.isfinite(stored["next_obs"]).all()
        and len(trainer.agent.buffer) == trainer.agent.total_steps
    )


def test_files_are_written_atomically_through_one_helper(tmp_path, monkeypatch):
    """Every checkpoint and metadata write goes through os.replace of a fsynced temp file."""
    calls = []
    real_replace, real_fsync = os.replace, os.fsync
    monkeypatch.setattr(
        os, "replace", lambda a, b: (calls.append(("replace", Path(b).name)), real_replace(a, b))[1]
    )
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(("fsync", fd)), real_fsync(fd))[1])
    run = TrainingRun.create("r", "v1", root=tmp_path)
    env = gym.make("CartPole-v1")
    DqnTrainer(env, DqnAgent.for_env(env, SMALL), run=run, checkpoint_freq=50).train(50)
    replaced = [name for kind, name in calls if kind == "replace"]
    assert {"metadata.json", "step_50.npz", "latest.npz"} <= set(replaced)
    for i, (kind, _) in enumerate(calls):
        if kind == "replace":
            assert calls[i - 1][0] == "fsync"  # the data reached the disk before the rename


def test_a_bad_replay_buffer_in_a_checkpoint_changes_nothing(good_checkpoint, tmp_path):
    path = tmp_path / "good.npz"
    path.write_bytes(good_checkpoint)
    bad = rewrite(path, lambda a: a.update({"buffer/status": np.full_like(a["buffer/status"], 7)}))
    agent = make_agent(seed=5)
    for e in transitions(40, seed=3):
        agent.observe(e)
    before = [
        agent.online.params.tobytes(),
        counters(agent).tobytes(),
        agent.buffer.storage.tobytes(),
        agent.buffer.finals.tobytes(),
        agent.buffer.kernel_state.cursor.tobytes(),
    ]
    with pytest.raises(CheckpointError, match="'status' has values outside"):
        agent.load(bad)
    assert [
        agent.online.params.tobytes(),
        counters(agent).tobytes(),
        agent.buffer.storage.tobytes(),
        agent.buffer.finals.tobytes(),
        agent.buffer.kernel_state.cursor.tobytes(),
    ] == before
