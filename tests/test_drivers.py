"""The trainer's four drivers against plain references built from the agent's public API,
the checkpoint schedule against a plain loop, and the layering of dqn/ below training/."""

from __future__ import annotations

import ast
import itertools
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from helpers import saved_state

import ember_np
import ember_np.envs  # noqa: F401
from ember_np import DqnAgent, DqnConfig, DqnTrainer, EpisodeStatus, TrainingRun
from ember_np.dqn.agent_vec import NO_TRANSITION
from ember_np.envs.native import NativeVecEnv, unwrap_native
from ember_np.training.drivers import (
    EndedColumns,
    FusedSingleDriver,
    FusedVectorDriver,
    SingleEnvDriver,
    StepDriver,
    checkpoints_passed,
    next_checkpoint,
)
from ember_np.training.vector import VectorDriver
from ember_np.types import LEARNING_AGENT_MEMBERS

CONFIG = DqnConfig(
    hidden_sizes=(16,), learning_rate=1e-3, batch_size=16, buffer_capacity=3_000,
    min_replay_size=64, target_update_freq=50, epsilon_end=0.05, epsilon_decay_steps=800,
)  # fmt: skip
SEED = 5


# -- references: the agent's public API, step by step ---------------------------------


def reference_single(env, agent, seed: int, n: int) -> list[tuple]:
    """``n`` env steps of one env driven by hand; each ended episode's (reward, length,
    status, total_steps, loss)."""
    rows = []
    obs, _ = env.reset(seed=seed)
    x = agent.encode(obs)
    index = agent.act_encoded(x)
    reward_sum, length = 0.0, 0
    for _ in range(n):
        obs, reward, terminated, truncated, _ = env.step(agent.index_to_action(index))
        code = 1 if terminated else (2 if truncated else 0)
        nx = agent.encode(obs)
        next_index = agent.observe_encoded(x, index, reward, nx, code, code == 0)
        reward_sum += float(reward)
        length += 1
        if code:
            rows.append((reward_sum, length, code, agent.total_steps, agent.last_loss))
            obs, _ = env.reset()
            x = agent.encode(obs)
            index = agent.act_encoded(x)
            reward_sum, length = 0.0, 0
        else:
            x, index = nx, next_index
    return rows


def reference_vector(env: NativeVecEnv, agent, seed: int, until: int) -> list[tuple]:
    """Vector steps of N native envs driven by hand until ``until`` transitions; each
    ended episode's (reward, length, status, total_steps, env, loss)."""
    n = env.num_envs
    agent.set_num_envs(n)
    s = agent.new_vec_step(n)
    x = agent.encode_batch(env.reset(seed=seed))
    s.act_obs[:] = x
    s.statuses[:] = NO_TRANSITION
    s.acting[:] = True
    agent.observe_vector(s)
    s.obs[:] = x
    s.actions[:] = s.next_actions
    rewards, lengths = np.zeros(n), np.zeros(n, np.int64)
    rows = []
    while agent.total_steps < until:
        k = agent.total_steps
        obs, reward, terminated, truncated = env.step(agent.indices_to_actions(s.actions))
        codes = np.where(terminated, 1, np.where(truncated, 2, 0))
        x = agent.encode_batch(obs)
        s.rewards[:] = reward
        s.next_obs[:] = x
        s.act_obs[:] = x
        s.statuses[:] = codes
        done = np.flatnonzero(codes)
        s.next_obs[done] = env.final_obs[done]  # the real last observations
        agent.observe_vector(s)
        for e in range(n):
            k += 1
            rewards[e] += float(reward[e])
            lengths[e] += 1
            if codes[e]:
                rows.append((float(rewards[e]), int(lengths[e]), int(codes[e]), k, e,
                             agent.last_loss))  # fmt: skip
                rewards[e], lengths[e] = 0.0, 0
        s.obs[:] = s.act_obs
        s.actions[:] = s.next_actions
    return rows


def logged(run: TrainingRun, envs: bool = False) -> list[tuple]:
    """The run's train_episodes.jsonl rows in the references' form."""
    out = []
    for r in run.read_train_episodes():
        loss = r["extras"].get("loss", math.nan)
        row = (r["total_reward"], r["length"], EpisodeStatus[r["status"]].value, r["total_steps"])
        out.append((*row, r["env"], loss) if envs else (*row, loss))
    return out


def same_rows(a: list[tuple], b: list[tuple]) -> bool:
    """Equal rows, NaN losses (before the first update) equal to each other."""
    key = [tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in r) for r in a]
    return key == [tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in r)
                   for r in b]  # fmt: skip


# -- one env ----------------------------------------------------------------------------


@pytest.mark.parametrize(("env_id", "fused"), [("CartPole-v1", False),
                                               ("ember_np/CartPole-v1", True)])  # fmt: skip
def test_single_env_drivers_log_the_episodes_of_the_public_api_loop(tmp_path, env_id, fused):
    """The Python single-env driver (gymnasium CartPole) and the fused one (the
    compiled twin) log exactly the episodes a hand-written loop over the agent's
    public API ends, with the same agent state after; with checkpoints every 700
    steps and calls that end off them."""
    steps = 2_300
    reference_agent = DqnAgent.for_env(gym.make(env_id), CONFIG, seed=SEED)
    expected = reference_single(gym.make(env_id), reference_agent, SEED, steps)
    env = gym.make(env_id)
    run = TrainingRun.create("r", "v", root=tmp_path)
    trainer = DqnTrainer(env, DqnAgent.for_env(env, CONFIG, seed=SEED), seed=SEED, run=run,
                         checkpoint_freq=700)  # fmt: skip
    assert trainer.fused is fused
    for n in (1_000, 1, 1_299):
        trainer.train(n)
    assert len(expected) >= 10 and same_rows(logged(run), expected)
    assert saved_state(trainer.agent) == saved_state(reference_agent)
    names = sorted(p.name for p in run.checkpoints_dir.iterdir())
    assert names == ["latest.npz", *(f"step_{k}.npz" for k in (1400, 2100, 700))]


@pytest.mark.parametrize("fused", [False, True])
def test_a_single_env_driver_returns_the_episodes_the_trainer_logs(tmp_path, fused):
    """Driven on its own, each single-env driver returns (as columns) the episodes a
    trainer on the same seed logs."""
    env = gym.make("ember_np/CartPole-v1")
    agent = DqnAgent.for_env(env, CONFIG, seed=SEED)
    driver: StepDriver = SingleEnvDriver(env, agent, SEED, masks=True)
    if fused:
        driver = FusedSingleDriver(driver, unwrap_native(env), agent)  # type: ignore[arg-type]
    ended = driver.run(900)
    ended.extend(driver.run(1_500))
    assert agent.total_steps == 1_500
    other = gym.make("ember_np/CartPole-v1")
    run = TrainingRun.create("r", "v", root=tmp_path)
    DqnTrainer(other, DqnAgent.for_env(other, CONFIG, seed=SEED), seed=SEED, run=run,
               fused=fused).train(1_500)  # fmt: skip
    rows = [(r, n, s, k, loss) for r, n, s, k, _, loss in ended.rows()]
    assert len(rows) >= 5 and same_rows(rows, logged(run))
    assert set(ended.envs) == {0}


def test_steps_of_a_fused_trainer_continue_the_episode_its_driver_left():
    """steps() goes through the Python driver the fused one shares its episode with."""
    a, b = (DqnTrainer(gym.make("ember_np/CartPole-v1"),
                       DqnAgent.for_env(gym.make("CartPole-v1"), CONFIG, seed=1), seed=1,
                       fused=fused) for fused in (False, True))  # fmt: skip
    b.train(333)
    assert list(itertools.islice(a.steps(), 800))[333:] == list(itertools.islice(b.steps(), 467))


# -- N envs ----------------------------------------------------------------------------


@pytest.mark.parametrize("fused", [False, True])
def test_vector_drivers_log_the_episodes_of_the_public_api_loop(tmp_path, fused):
    """The Python vector driver and the fused one on 3 native envs log the episodes a
    hand-written loop over the agent's public vector API ends, with the same state."""
    env = NativeVecEnv("CartPole-v1", 3)
    run = TrainingRun.create("r", "v", root=tmp_path)
    trainer = DqnTrainer(env, DqnAgent.for_env(env, CONFIG, seed=SEED), seed=SEED, run=run,
                         checkpoint_freq=700, fused=fused)  # fmt: skip
    for n in (999, 1, 1_000):  # to 999, 1,002 (a vector step is not cut), 2,004
        trainer.train(n)
    reference_agent = DqnAgent.for_env(env, CONFIG, seed=SEED)
    expected = reference_vector(NativeVecEnv("CartPole-v1", 3), reference_agent, SEED, 2_003)
    assert trainer.agent.total_steps == reference_agent.total_steps == 2_004
    assert len(expected) >= 10 and same_rows(logged(run, envs=True), expected)
    assert saved_state(trainer.agent) == saved_state(reference_agent)
    # a checkpoint after each vector step that reached or passed a multiple of 700
    names = sorted(p.name for p in run.checkpoints_dir.iterdir())
    assert names == ["latest.npz", "latest_envs.npz", "step_1401.npz", "step_702.npz"]


@pytest.mark.parametrize("fused", [False, True])
def test_a_vector_driver_returns_the_episodes_of_the_reference(fused):
    """Driven on its own, each vector driver returns the reference's episodes."""
    env = NativeVecEnv("CartPole-v1", 4)
    agent = DqnAgent.for_env(env, CONFIG, seed=SEED)
    driver: StepDriver = VectorDriver(env, agent, SEED, masks=True)
    if fused:
        driver = FusedVectorDriver(driver, agent)  # type: ignore[arg-type]
    ended = EndedColumns.empty()
    for until in (500, 501, 1_800):
        ended.extend(driver.run(until))
    assert driver.num_envs == 4 and agent.total_steps == 1_800
    reference_agent = DqnAgent.for_env(env, CONFIG, seed=SEED)
    expected = reference_vector(NativeVecEnv("CartPole-v1", 4), reference_agent, SEED, 1_800)
    assert len(expected) >= 10 and same_rows(list(ended.rows()), expected)


# -- the checkpoint schedule -------------------------------------------------------------


def test_checkpoints_passed_is_the_multiples_a_step_reaches():
    """Against a plain scan, over steps of 1 to N transitions from many starts (and a
    NEXT_STEP vector step that adds fewer than N, or none)."""
    rng = np.random.default_rng(0)
    cases = 0
    for freq in (1, 2, 3, 7, 10, 64, 700, 1000):
        for n_envs in (1, 2, 3, 4, 16, 33):
            for before in [0, 1, freq - 1, freq, freq + 1, 5 * freq - 1,
                           *rng.integers(0, 10 * freq + 50, 20).tolist()]:  # fmt: skip
                for added in {0, 1, n_envs - 1, n_envs, int(rng.integers(0, n_envs + 1))}:
                    after = before + added
                    plain = [k for k in range(before + 1, after + 1) if k % freq == 0]
                    assert list(checkpoints_passed(before, after, freq)) == plain
                    first = next(k for k in itertools.count(before + 1) if k % freq == 0)
                    assert next_checkpoint(before, freq) == first
                    cases += 1
    assert cases > 4_000


# -- the agent through its protocol ------------------------------------------------------


class ProtocolOnly:
    """A DqnAgent seen through LearningAgent's members alone."""

    def __init__(self, agent: DqnAgent) -> None:
        self.inner = agent

    def __getattr__(self, name: str):
        if name not in LEARNING_AGENT_MEMBERS:
            raise AttributeError(name)
        return getattr(self.inner, name)


def test_the_trainer_uses_an_agent_through_learning_agent_only(tmp_path):
    """A trainer on an agent that has nothing but LearningAgent's members writes
    the run a DqnAgent does (not fused: the compiled loops need FusableAgent)."""
    runs = [TrainingRun.create(name, "v", root=tmp_path) for name in ("plain", "protocol")]
    agents = [DqnAgent.for_env(gym.make("CartPole-v1"), CONFIG, seed=SEED) for _ in runs]
    wrapped = ProtocolOnly(agents[1])
    assert all(hasattr(wrapped, name) for name in LEARNING_AGENT_MEMBERS)  # as the trainer checks
    for run, agent in zip(runs, (agents[0], wrapped), strict=True):
        DqnTrainer(gym.make("CartPole-v1"), agent, seed=SEED, run=run,  # type: ignore[arg-type]
                   checkpoint_freq=600).train(1_300)  # fmt: skip
    assert runs[0].read_train_episodes() == runs[1].read_train_episodes()
    assert saved_state(agents[0]) == saved_state(agents[1])


class Failing(gym.Wrapper):
    """Raises at its ``fail_at``-th step."""

    def __init__(self, env, fail_at: int) -> None:
        super().__init__(env)
        self.fail_at, self.count = fail_at, 0

    def step(self, action):
        self.count += 1
        if self.count == self.fail_at:
            raise RuntimeError("the env broke")
        return self.env.step(action)


def test_episodes_that_ended_before_a_failed_step_are_logged(tmp_path):
    """A step that raises stops training with its own error; the episodes that ended
    before it in the same driver run are counted and logged all the same."""
    env = Failing(gym.make("CartPole-v1"), 900)
    run = TrainingRun.create("r", "v", root=tmp_path)
    trainer = DqnTrainer(env, DqnAgent.for_env(env, CONFIG, seed=SEED), seed=SEED, run=run,
                         checkpoint_freq=10_000)  # fmt: skip
    with pytest.raises(RuntimeError, match="the env broke"):
        trainer.train(2_000)
    expected = reference_single(gym.make("CartPole-v1"),
                                DqnAgent.for_env(env, CONFIG, seed=SEED), SEED, 899)  # fmt: skip
    assert len(expected) >= 5 and same_rows(logged(run), expected)
    assert trainer.episode == len(expected)


# -- the layers ----------------------------------------------------------------------------


def imported_modules(path: Path) -> set[str]:
    """Every module a source file imports (at any depth, relative imports resolved)."""
    package = "ember_np." + ".".join(path.parent.relative_to(PACKAGE).parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.rstrip(".").split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


PACKAGE = Path(ember_np.__file__).parent


def test_nothing_in_dqn_imports_the_training_layer():
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(m for m in imported_modules(path)
                                               if m.startswith("ember_np.training"))
        for path in sorted((PACKAGE / "dqn").rglob("*.py"))
    }  # fmt: skip
    assert len(offenders) > 10
    assert {k: v for k, v in offenders.items() if v} == {}
    # the check sees an upward import where there is one
    assert "ember_np.training._fused" in imported_modules(PACKAGE / "training" / "drivers.py")
