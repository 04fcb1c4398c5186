"""Values that were accepted and then killed the run: seeds, rewards, NaN observations.

Property tests (hypothesis) over each class of input:

* seeds: any non-negative integer is accepted everywhere a seed enters and
  stored losslessly (a seed >= 2**63 used to kill training at the first
  checkpoint with an OverflowError); anything else raises ValueError naming
  ``seed`` at the boundary;
* rewards: a reward is stored if and only if it is finite as the float32 it
  is stored in (1e39 is finite in float64, inf in float32), through every
  way a reward enters; a refused reward raises and changes nothing;
* observations: NaN or inf (also after the cast to float32) raises
  ValueError naming the parameter, and the first bad row of a batch, in
  every method that reads observations.
"""

from __future__ import annotations

import tempfile
from functools import partial
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from helpers import TINY_MIN4
from helpers import make_agent as shared_make_agent
from hypothesis import given, settings
from hypothesis import strategies as st

from ember_np import (
    CheckpointError,
    CircularBuffer,
    DqnAgent,
    DqnPolicy,
    DqnTrainer,
    Experience,
    IndexActionMapper,
    QNetwork,
    Rng,
    TrainingRun,
    UpdateOptions,
    VecEncoder,
)
from ember_np.checkpoint import save_arrays, string_array
from ember_np.envs import NativeVecEnv

SETTINGS = settings(max_examples=40, deadline=None)
SMALL = TINY_MIN4
F32_MAX = float(np.finfo(np.float32).max)


make_agent = partial(shared_make_agent, config=SMALL)


def float32_is_finite(x: float) -> bool:
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(np.float32(x)))


# -- seeds ----------------------------------------------------------------------


@SETTINGS
@given(seed=st.one_of(st.integers(0, 2**64 + 10), st.integers(0, 2**300)))
def test_any_non_negative_seed_trains_saves_and_restores_exactly(seed):
    agent = make_agent(seed=seed)
    again = make_agent(seed=seed)
    assert agent.online.state_dict()["w0"].tobytes() == again.online.state_dict()["w0"].tobytes()
    x = np.ones(3, np.float32)
    for i in range(12):
        agent.observe(Experience(x * i, i % 2, 1.0, x * (i + 1), 0))
    with tempfile.TemporaryDirectory() as tmp:
        restored = DqnAgent.from_checkpoint(agent.save(Path(tmp) / "a", include_buffer=True))
    assert restored.seed == seed and type(restored.seed) is int
    a, b = agent.state_arrays(include_buffer=True), restored.state_arrays(include_buffer=True)
    assert all(a[k].tobytes() == b[k].tobytes() for k in a)
    assert (
        QNetwork((3, 2), seed).forward(x).tobytes() == QNetwork((3, 2), seed).forward(x).tobytes()
    )
    NativeVecEnv("CartPole-v1", 2, seed=seed).reset()
    Rng(seed).random()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "ember_np/CartPole-v1"])
def test_a_seed_beyond_int64_survives_training_checkpoints_and_resume(tmp_path, env_id):
    """The reported failure: an OverflowError at the first checkpoint lost the run."""
    seed = 2**64 + 12345
    env = gym.make(env_id)
    run = TrainingRun.create("big_seed", "v1", root=tmp_path)
    agent = DqnAgent.for_env(env, SMALL, seed=seed)
    trainer = DqnTrainer(env, agent, seed=seed, run=run, checkpoint_freq=20)
    trainer.train(60)
    trainer.eval(1)
    resumed = DqnAgent.from_checkpoint(TrainingRun.resume(run.dir).latest_checkpoint_path())
    assert resumed.seed == seed and resumed.total_steps == 60


not_a_seed = st.one_of(
    st.integers(max_value=-1), st.floats(allow_nan=True), st.booleans(), st.text(max_size=3),
    st.none(), st.just(np.float64(3.0)), st.just([1, 2]),
)  # fmt: skip


@SETTINGS
@given(bad=not_a_seed)
def test_anything_but_a_non_negative_integer_seed_raises_naming_it(bad):
    env = gym.make("ember_np/CartPole-v1")
    agent = DqnAgent.for_env(env, SMALL)
    for make in (
        lambda: DqnAgent(VecEncoder(3), IndexActionMapper(2), SMALL, bad),
        lambda: QNetwork((3, 2), bad),
        lambda: Rng(bad),
        lambda: NativeVecEnv("CartPole-v1", 2, seed=bad),
        lambda: DqnTrainer(env, agent, seed=bad),
    ):
        with pytest.raises(ValueError, match="seed"):
            make()


@pytest.mark.parametrize("stored", [string_array("12x"), string_array("-3"), string_array("")])
def test_a_checkpoint_with_an_invalid_seed_is_refused(tmp_path, stored):
    arrays = make_agent().state_arrays()
    arrays["seed"] = stored
    save_arrays(tmp_path / "bad.npz", arrays)
    with pytest.raises(CheckpointError, match="'seed' must be a non-negative integer"):
        DqnAgent.from_checkpoint(tmp_path / "bad.npz")


# -- rewards --------------------------------------------------------------------

rewards = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(F32_MAX * 0.999, F32_MAX * 1.001),  # both sides of float32's overflow
    st.sampled_from([1e39, -1e39, F32_MAX, -F32_MAX, 3.4028235677973362e38, 3.4028235677973366e38]),
    st.integers(-(2**200), 2**200),
)


@SETTINGS
@given(reward=rewards)
def test_a_reward_is_stored_exactly_when_its_float32_is_finite(reward):
    """CircularBuffer.push and DqnAgent.observe (the fused loop stores through the same
    kernel, agent_step -> push_transition, as observe)."""
    x = np.zeros(3, np.float32)
    buf = CircularBuffer(4, 3, 2)
    agent = make_agent()
    for i in range(5):  # the agent has trained once before the reward under test
        agent.observe(Experience(x + i, 0, 1.0, x + i + 1, 0))
    before = agent.state_arrays(include_buffer=True)
    if float32_is_finite(reward):
        buf.push(x, 1, reward, x, 0)
        agent.observe(Experience(x, 1, reward, x, 0))
        assert buf.transition(0)[2] == float(np.float32(reward))
        assert agent.buffer.transition(len(agent.buffer) - 1)[2] == float(np.float32(reward))
        return
    for store in (lambda: buf.push(x, 1, reward, x, 0),
                  lambda: agent.observe(Experience(x, 1, reward, x, 0))):  # fmt: skip
        with pytest.raises(ValueError, match="reward must be finite"):
            store()
    assert len(buf) == 0
    after = agent.state_arrays(include_buffer=True)
    assert all(before[k].tobytes() == after[k].tobytes() for k in before)


@SETTINGS
@given(reward=rewards)
def test_a_batch_reward_beyond_float32_is_refused_by_update(reward):
    net, target = QNetwork((3, 4, 2), seed=0), QNetwork((3, 4, 2), seed=1)
    obs = np.zeros((2, 3), np.float32)
    batch = (obs, [0, 1], np.array([0.0, reward]), obs, np.ones(2))
    kw = dict(gamma=0.9, learning_rate=1e-3)
    params = net.params.copy()
    if float32_is_finite(reward):
        net.update(batch, target, UpdateOptions(**kw))
        assert net.adam_step == 1
        return
    with pytest.raises(ValueError, match="NaN or infinite"):
        net.update(batch, target, UpdateOptions(**kw))
    assert net.params.tobytes() == params.tobytes()


def test_an_env_reward_beyond_float32_stops_training_and_stores_nothing():
    env = gym.wrappers.TransformReward(gym.make("CartPole-v1"), lambda r: 1e39)
    agent = DqnAgent.for_env(env, SMALL)
    with pytest.raises(ValueError, match="reward must be finite, got 1e"):
        DqnTrainer(env, agent, seed=0).train(5)
    assert len(agent.buffer) == 0 and agent.total_steps == 0


# -- NaN / inf observations ----------------------------------------------------------


@st.composite
def poisoned_batch(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    """A (batch, 3) float64 batch with NaN / inf (or a float32 overflow) in some rows; the first."""
    batch = draw(st.integers(1, 5))
    x = np.array(draw(st.lists(st.floats(-10, 10), min_size=3 * batch, max_size=3 * batch)))
    x = x.reshape(batch, 3)
    cells = draw(st.sets(st.tuples(st.integers(0, batch - 1), st.integers(0, 2)), min_size=1))
    for r, c in cells:
        x[r, c] = draw(st.sampled_from([np.nan, np.inf, -np.inf, 1e39, -1e300]))
    return x, min(r for r, _ in cells)


@SETTINGS
@given(case=poisoned_batch(), backend=st.sampled_from(["numpy", "numba"]))
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # NumPy's inf * 0
def test_a_non_finite_observation_raises_naming_parameter_and_row_everywhere(case, backend):
    x, row = case
    agent = make_agent()
    policy = DqnPolicy(agent.online.layer_sizes, agent.online.params, agent.encoder,
                       agent.action_mapper, backend)  # fmt: skip
    net = agent.online
    explore = agent.exploration_rng.state.copy()
    single = {
        "obs": [policy.act, policy.q_values, agent.act, agent.act_epsilon_greedy, net.forward,
                net.greedy_action],
    }  # fmt: skip
    batched = {"obs_batch": [policy.act_batch, policy.q_values_batch],
               "obs": [net.forward, net.greedy_actions]}  # fmt: skip
    for name, methods in single.items():
        for method in methods:
            with pytest.raises(ValueError, match=rf"observation must be finite .* {name}=\["):
                method(x[row])
    for name, methods in batched.items():
        for method in methods:
            with pytest.raises(ValueError, match=rf"{name}\[{row}\]=\[.*\(row {row} of {len(x)}\)"):
                method(x)
    assert agent.exploration_rng.state.tobytes() == explore.tobytes()  # nothing was drawn
    clean = np.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0).clip(-10, 10)  # finite: no error
    assert np.isfinite(policy.q_values_batch(clean)).all() and len(policy.act_batch(clean)) == len(
        x
    )
