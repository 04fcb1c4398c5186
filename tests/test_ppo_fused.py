"""PPO's compiled loop over native vector envs: the same run as the Python loop, bit for
bit (weights, Adam state, counters, rollout, normaliser, random streams, episode rows,
run files), and a run resumed from a checkpoint continues as the run straight through."""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest
from helpers import files_of

import ember_np.envs  # noqa: F401  (registers ember_np/CartPole-v1)
from ember_np import DqnTrainer, TrainingRun
from ember_np.encoding import IndexActionMapper, encoder_for_space
from ember_np.envs import NativeVecEnv
from ember_np.ppo.agent import PPOAgent
from ember_np.ppo.config import PPOConfig
from ember_np.ppo.rollout import RolloutBuffer
from ember_np.stats import StatsTracker
from ember_np.training.loop import train_and_evaluate

#: Small rollouts, both normalisations, linear schedules, an entropy bonus and value
#: clipping: every branch of a rollout. Episodes are cut at 30 steps (truncations).
SMALL = PPOConfig(n_steps=16, batch_size=24, n_epochs=3, learning_rate=3e-3,
                  lr_schedule="linear", clip_schedule="linear", normalize_obs=True,
                  normalize_reward=True, ent_coef=0.01, clip_range_vf=0.2,
                  schedule_steps=500)  # fmt: skip
MAX_STEPS = 30


class Recorder(StatsTracker):
    """A StatsTracker that also keeps every episode record it is given (so the trainer
    hands it each record, never folded columns)."""

    needs_records = True

    def __init__(self) -> None:
        super().__init__()
        self.records: list = []

    def update(self, record) -> None:  # noqa: ANN001
        super().update(record)
        self.records.append(record)


def make_agent(env, config=SMALL, seed=4) -> PPOAgent:  # noqa: ANN001
    return PPOAgent(encoder_for_space(env.observation_space),
                    IndexActionMapper.for_space(env.action_space), config, seed=seed)  # fmt: skip


def make_trainer(config=SMALL, n_envs=3, fused=None, seed=4, **kw) -> DqnTrainer:  # noqa: ANN001
    env = NativeVecEnv("CartPole-v1", n_envs, max_steps=MAX_STEPS)
    return DqnTrainer(env, make_agent(env, config, seed), seed=seed, fused=fused, **kw)


def agent_state(agent: PPOAgent) -> dict[str, object]:
    """Everything a PPOAgent learns or draws with, as comparable values."""
    state: dict[str, object] = {
        "total_steps": agent.total_steps, "n_updates": agent.n_updates,
        "last_loss": repr(agent.last_loss), "last_stats": repr(sorted(agent.last_stats.items())),
        "trained": agent.last_step_trained,
        "rng_act": agent.act_rng.state.tobytes(), "rng_update": agent.update_rng.state.tobytes(),
    }  # fmt: skip
    for key, value in agent.net.state._asdict().items():
        state[f"net/{key}"] = value.tobytes()
    for key, value in agent.buffer.arrays._asdict().items():
        state[f"buffer/{key}"] = value.tobytes() if isinstance(value, np.ndarray) else value
    if agent.normalizer is not None:
        for key, value in agent.normalizer.state_arrays().items():
            state[f"normalizer/{key}"] = value.tobytes()
    return state


def same_state(a: PPOAgent, b: PPOAgent) -> None:
    sa, sb = agent_state(a), agent_state(b)
    assert sa.keys() == sb.keys()
    differ = [k for k in sa if sa[k] != sb[k]]
    assert not differ, f"differ: {differ}"


def env_state(trainer: DqnTrainer) -> tuple[bytes, ...]:
    env = trainer.env
    return env.states.tobytes(), env.counters.tobytes(), env.rng_states.tobytes()


def test_the_compiled_loop_drives_ppo_on_native_vector_envs_only():
    assert make_trainer().fused
    assert not make_trainer(fused=False).fused
    vec = NativeVecEnv("CartPole-v1", 2)
    agent = make_agent(vec)
    assert agent.can_fuse(vec)
    assert not agent.can_fuse(gym.make("ember_np/CartPole-v1"))  # one env: through Python
    assert not agent.can_fuse(NativeVecEnv("Acrobot-v1", 2))  # other sizes
    assert not DqnTrainer(gym.make("ember_np/CartPole-v1"), agent, seed=0).fused


@pytest.mark.parametrize(
    "config",
    [SMALL, SMALL.replace(normalize_obs=False, normalize_reward=False, shared_trunk=True,
                          lr_schedule="constant", clip_schedule="constant", target_kl=0.01,
                          schedule_steps=None),
     SMALL.replace(normalize_obs=False)],
    ids=["both-normalisations-linear", "no-normalisation-constant-kl", "rewards-only"],
)  # fmt: skip
def test_the_compiled_loop_equals_the_python_loop_bit_for_bit(config):
    """Over 3 envs with truncations, in chunks that end mid-rollout, the compiled loop and
    the trainer's Python loop end with the same agent, envs and episode records."""
    python = make_trainer(config, fused=False, stats=Recorder())
    fused = make_trainer(config, stats=Recorder())
    assert fused.fused and not python.fused
    for n in (37, 1, 500):  # ends mid-rollout and mid-episode
        python.train(n)
        fused.train(n)
        same_state(python.agent, fused.agent)
        assert env_state(python) == env_state(fused)
    total = fused.agent.total_steps
    assert total == python.agent.total_steps == 543  # whole vector steps: 39, 42, 543
    rollouts = total // (config.n_steps * 3)
    if config.target_kl is None:
        assert fused.agent.n_updates == rollouts * config.n_epochs
    else:
        assert rollouts <= fused.agent.n_updates <= rollouts * config.n_epochs
    assert fused.stats.records == python.stats.records  # reward, length, status, extras
    statuses = {r.status.name for r in fused.stats.records}
    assert {"TERMINATED", "TRUNCATED"} <= statuses, statuses
    assert len(fused.stats.records) > 20
    # the next vector step through Python continues both alike
    assert next(python.steps()) == next(fused.steps())
    same_state(python.agent, fused.agent)


def test_the_python_steps_and_the_compiled_loop_interleave():
    a, b = make_trainer(fused=False), make_trainer()
    ma = list(itertools.islice(a.steps(), 300))
    mb = list(itertools.islice(b.steps(), 60))
    b.train(120)  # 120 transitions: 40 vector steps, in the compiled loop
    mb += list(itertools.islice(b.steps(), 120))
    assert ma[:60] + ma[180:] == mb
    same_state(a.agent, b.agent)


def run_files(root, steps: int, fused) -> tuple[dict[str, bytes], DqnTrainer]:  # noqa: ANN001
    run = TrainingRun.create("ppo", "env", root=root)
    trainer = make_trainer(run=run, checkpoint_freq=100, keep_checkpoints=2, fused=fused)
    train_and_evaluate(trainer, steps, 250, 2)
    return files_of(run.dir), trainer


def test_the_compiled_loop_writes_the_python_loops_files(tmp_path):
    fused_files, fused = run_files(tmp_path / "f", 520, None)
    python_files, python = run_files(tmp_path / "p", 520, False)
    assert fused.fused and not python.fused
    assert sorted(fused_files) == sorted(python_files)
    assert "checkpoints/latest_envs.npz" in fused_files
    assert [name for name in fused_files if fused_files[name] != python_files[name]] == []
    same_state(python.agent, fused.agent)


def test_a_run_resumed_from_a_checkpoint_continues_as_the_run_straight_through(tmp_path):
    """Stopped mid-rollout at a checkpoint and resumed (a new agent from latest.npz, new
    envs from latest_envs.npz), the compiled loop ends where the straight run ends."""
    straight_files, straight = run_files(tmp_path / "straight", 520, None)
    run = TrainingRun.create("ppo", "env", root=tmp_path / "parts")
    first = make_trainer(run=run, checkpoint_freq=100, keep_checkpoints=2)
    train_and_evaluate(first, 250, 250, 2)
    assert 0 < first.agent.buffer.pos < SMALL.n_steps  # a rollout in progress
    del first
    run = TrainingRun.resume(run.dir)
    agent = PPOAgent.from_checkpoint(run.latest_checkpoint_path())
    env = NativeVecEnv("CartPole-v1", 3, max_steps=MAX_STEPS)
    second = DqnTrainer(env, agent, seed=4, run=run, checkpoint_freq=100, keep_checkpoints=2)
    assert second.fused and second.restore_env_state()
    train_and_evaluate(second, 520 - agent.total_steps, 250, 2)
    same_state(straight.agent, second.agent)
    assert env_state(straight) == env_state(second)
    resumed_files = files_of(run.dir)
    for name in ("train_episodes.jsonl", "checkpoints/latest.npz", "checkpoints/latest_envs.npz"):
        assert resumed_files[name] == straight_files[name], name


def test_the_loop_record_layout_is_the_drivers():
    """The compiled loop fills the driver's FusedVecLoop at the driver's indices."""
    from ember_np.ppo import fused
    from ember_np.training import _fused

    assert (fused.VEC_EPISODE, fused.VEC_N_RECORDS) == (_fused.VEC_EPISODE, _fused.VEC_N_RECORDS)


def test_a_diverged_network_is_a_value_error_in_both_loops():
    """Non-finite values are refused before they are stored, by either loop."""
    for fused in (False, None):
        trainer = make_trainer(fused=fused)
        trainer.train(3)
        trainer.agent.net.params[:] = np.nan
        with pytest.raises(ValueError, match="NaN|finite"):
            trainer.train(30)


def test_the_fused_rollout_matches_a_fresh_buffer_layout():
    """The compiled loop fills the agent's own RolloutBuffer (the one a checkpoint saves)."""
    trainer = make_trainer()
    trainer.train(30)  # 10 vector steps of 16
    buffer = trainer.agent.buffer
    assert isinstance(buffer, RolloutBuffer) and buffer.pos == 10
    assert buffer.arrays.valid[:10].all() and buffer.n_samples == 30


_FUSED_PPO_ONLY = """
import sys
from numba.core.registry import CPUDispatcher
from ember_np import DqnTrainer
from ember_np.encoding import IndexActionMapper, encoder_for_space
from ember_np.envs import NativeVecEnv
from ember_np.ppo.agent import PPOAgent
from ember_np.ppo.config import PPOConfig

env = NativeVecEnv("CartPole-v1", 2)
agent = PPOAgent(encoder_for_space(env.observation_space),
                 IndexActionMapper.for_space(env.action_space),
                 PPOConfig(n_steps=16, batch_size=16, n_epochs=2), seed=0)
trainer = DqnTrainer(env, agent, seed=0)
trainer.train(100)
used = sorted({f"{d.py_func.__module__}.{d.py_func.__qualname__}"
               for name, module in list(sys.modules.items()) if name.startswith("ember_np.")
               for d in vars(module).values() if isinstance(d, CPUDispatcher) and d.overloads})
print(trainer.fused, agent.n_updates, " ".join(used))
"""


def test_a_compiled_ppo_run_compiles_no_dqn_kernel():
    """The compiled loop (and what starts it) compiles PPO's, the envs' and the shared
    network kernels, not one of DQN's or of DQN's compiled loops (a process of its own)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _FUSED_PPO_ONLY], capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    fused, updates, *used = out.stdout.strip().splitlines()[-1].split(" ")
    assert fused == "True" and int(updates) > 0
    assert "ember_np.ppo.fused.fused_ppo_steps" in used, used
    dqn = [n for n in used if n.startswith(("ember_np.dqn.", "ember_np.training._fused."))]
    assert not dqn, dqn


def test_fused_on_one_native_env_says_what_a_ppo_agent_needs():
    import gymnasium as gym

    from ember_np import DqnTrainer, PPOAgent, PPOConfig

    env = gym.make("ember_np/CartPole-v1")
    agent = PPOAgent.for_env(env, PPOConfig(n_steps=16, batch_size=16))
    with pytest.raises(ValueError, match="a PPOAgent without action masks on a NativeVecEnv"):
        DqnTrainer(env, agent, seed=0, fused=True)
