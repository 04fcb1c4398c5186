"""Prioritized replay: sampling frequencies, importance weights, priorities,
the sum tree against a list model, save/restore, and an agent training with it."""

from __future__ import annotations

import copy
import pickle

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember_np.envs  # noqa: F401
from ember_np import DqnAgent, DqnConfig, DqnTrainer, PrioritizedBuffer, Rng


def filled(n, capacity=None, alpha=0.6, eps=1e-6, obs_size=2):
    """A PrioritizedBuffer holding n transitions; obs[0] is the push number."""
    buf = PrioritizedBuffer(capacity or n, obs_size, 2, alpha=alpha, eps=eps)
    for t in range(n):
        obs = np.full(obs_size, t, np.float32)
        buf.push(obs, t % 2, float(t), obs + 1, 0)
    return buf


def naive_priority(td, alpha, eps):
    return (abs(float(np.float32(td))) + eps) ** alpha


def test_new_transitions_get_the_largest_priority_so_far():
    buf = filled(4, capacity=6)
    assert buf.max_priority == 1.0 and np.array_equal(buf.priorities(), np.ones(4))
    buf.update_priorities([1, 2], [3.0, 0.5])
    top = naive_priority(3.0, 0.6, 1e-6)
    assert buf.max_priority == pytest.approx(top, rel=1e-12)
    buf.update_priorities([1], [0.0])  # lowering a priority keeps the largest seen
    assert buf.max_priority == pytest.approx(top, rel=1e-12)
    buf.push(np.zeros(2, np.float32), 0, 0.0, np.ones(2, np.float32), 0)
    assert buf.priorities()[4] == buf.max_priority
    assert buf.total_priority == pytest.approx(buf.priorities().sum(), rel=1e-12)


def test_update_priorities_sets_the_formula_and_rejects_bad_input():
    buf = filled(5, alpha=0.7, eps=0.01)
    td = np.array([0.5, -2.0, 0.0], np.float32)
    buf.update_priorities(np.array([4, 0, 2]), td)
    want = [naive_priority(x, 0.7, 0.01) for x in td]
    got = buf.priorities()[[4, 0, 2]]
    assert np.allclose(got, want, rtol=1e-6)
    before = buf.priorities()
    for indices, errors, match in [
        ([5], [1.0], r"indices must be stored slots in \[0, 5\)"),
        ([-1], [1.0], "indices must be stored slots"),
        ([0, 1], [1.0], "td_errors must match indices"),
        ([0], [np.nan], "td_errors must be finite"),
        ([0.5], [1.0], "indices must be integers"),
    ]:
        with pytest.raises(ValueError, match=match):
            buf.update_priorities(indices, errors)
    assert np.array_equal(buf.priorities(), before)  # nothing changed


def test_sampling_frequencies_follow_priorities_chi_square():
    """Counts over many stratified batches against P(i) = p_i / sum p (alpha applied)."""
    n = 12
    buf = filled(n, alpha=0.6)
    td = np.linspace(0.0, 5.0, n).astype(np.float32)
    buf.update_priorities(np.arange(n), td)
    p = np.array([naive_priority(x, 0.6, 1e-6) for x in td])
    expected_share = p / p.sum()
    counts = np.zeros(n)
    rng = Rng(11)
    draws = 0
    for _ in range(400):
        batch = buf.sample(8, rng, beta=0.5)
        counts += np.bincount(batch.indices, minlength=n)
        draws += 8
        assert np.array_equal(batch.obs[:, 0].astype(int), batch.indices)  # gathered the slots
    expected = expected_share * draws
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 40.0, (chi2, counts, expected)  # df = 11; p < 1e-4 would be ~35
    # and not uniform: the largest priority is drawn far more than the smallest
    assert counts[-1] > 3 * counts[0]


@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_weights_match_the_formula(beta):
    buf = filled(10, alpha=0.5)
    buf.update_priorities(np.arange(10), np.arange(10, dtype=np.float32) ** 2)
    batch = buf.sample(6, Rng(3), beta=beta)
    p = buf.priorities()
    n_prob = 10 * p[batch.indices] / p.sum()
    w = n_prob ** (-beta)
    assert batch.weights.dtype == np.float32 and batch.indices.dtype == np.int64
    assert np.allclose(batch.weights, w / w.max(), rtol=1e-6)
    assert batch.weights.max() == 1.0


def test_sample_checks_beta_and_batch_size():
    buf = filled(4)
    with pytest.raises(ValueError, match=r"beta must be a number in \[0, 1\]"):
        buf.sample(2, Rng(0), beta=1.5)
    with pytest.raises(ValueError, match="cannot sample 5 transitions"):
        buf.sample(5, Rng(0))
    with pytest.raises(ValueError, match="alpha must be"):
        PrioritizedBuffer(4, 2, 2, alpha=-1)
    with pytest.raises(ValueError, match="eps must be"):
        PrioritizedBuffer(4, 2, 2, eps=0)
    for field, value in [("per_alpha", -0.1), ("per_beta_start", 1.5), ("per_beta_steps", -1),
                         ("per_eps", 0.0), ("prioritized_replay", 1)]:  # fmt: skip
        with pytest.raises(ValueError, match=field):
            DqnConfig(**{field: value})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    capacity=st.integers(1, 9),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("push"), st.integers(0, 0), st.floats(0, 0)),
            st.tuples(st.just("update"), st.integers(0, 8), st.floats(-50, 50, width=32)),
        ),
        min_size=1,
        max_size=40,
    ),
)
def test_tree_against_a_list_model(capacity, ops):
    """Pushes that overwrite (wrap-around) and priority updates: the buffer's
    priorities, total and largest priority against a plain list."""
    buf = PrioritizedBuffer(capacity, 1, 2, alpha=0.6, eps=1e-3)
    model: list[float] = []
    largest = 1.0
    pos = 0
    for kind, slot, td in ops:
        if kind == "push":
            buf.push(np.zeros(1, np.float32), 0, 0.0, np.ones(1, np.float32), 0)
            if len(model) < capacity:
                model.append(largest)
            else:
                model[pos] = largest
            pos = (pos + 1) % capacity
        elif model:
            slot %= len(model)
            buf.update_priorities([slot], [td])
            model[slot] = naive_priority(td, 0.6, 1e-3)
            largest = max(largest, model[slot])
        assert np.allclose(buf.priorities(), model, rtol=1e-9)
        assert buf.total_priority == pytest.approx(sum(model), rel=1e-9)
        assert buf.max_priority == pytest.approx(largest, rel=1e-9)
    if model:
        drawn = buf.sample(len(model), Rng(1)).indices
        assert all(0 <= i < len(model) for i in drawn)


def test_save_restore_and_copies_are_exact():
    buf = filled(30, capacity=20)
    rng = Rng(5)
    for _ in range(5):
        batch = buf.sample(8, rng, beta=0.6)
        buf.update_priorities(batch.indices, batch.rewards - 3.0)
    other = PrioritizedBuffer(20, 2, 2)
    other.load_state_dict(buf.state_dict())
    twins = [other, copy.deepcopy(buf), pickle.loads(pickle.dumps(buf))]
    for twin in twins:
        assert np.array_equal(twin.priorities(), buf.priorities())
        assert twin.total_priority == buf.total_priority  # the rebuilt tree has the same bits
        assert twin.max_priority == buf.max_priority
        for got, want in zip(twin.sample(10, Rng(9), 0.7), buf.sample(10, Rng(9), 0.7)):
            assert np.array_equal(got, want)
    bad = buf.state_dict()
    bad["priorities"] = -bad["priorities"]
    with pytest.raises(ValueError, match="'priorities' must be finite and > 0"):
        other.load_state_dict(bad)
    # a uniform buffer's state loads with priority 1 for every transition
    uniform = {k: v for k, v in buf.state_dict().items() if "priorit" not in k}
    other.load_state_dict(uniform)
    assert np.array_equal(other.priorities(), np.ones(20)) and other.max_priority == 1.0


def test_clear_forgets_priorities():
    buf = filled(6)
    buf.update_priorities([0], [9.0])
    buf.clear()
    assert len(buf) == 0 and buf.total_priority == 0.0 and buf.max_priority == 1.0


CONFIG = DqnConfig(
    hidden_sizes=(32, 32), learning_rate=1e-3, batch_size=32, buffer_capacity=3_000,
    min_replay_size=100, target_update_freq=50, epsilon_decay_steps=2_000, max_grad_norm=10.0,
    prioritized_replay=True, per_beta_steps=1_000,
)  # fmt: skip


def test_agent_with_per_trains_on_the_fused_path_like_the_python_path():
    runs = []
    for fused in (None, False):
        env = gym.make("ember_np/CartPole-v1")
        t = DqnTrainer(env, DqnAgent.for_env(env, CONFIG, seed=2), seed=2, fused=fused)
        assert t.fused == (fused is None)
        for _ in t.steps() if fused is False else ():
            if t.agent.total_steps >= 1_500:
                break
        if fused is None:
            t.train(1_500)
        runs.append(t.agent)
    a, b = runs
    assert a.total_steps == b.total_steps == 1_500 and a.n_updates > 1_000
    assert np.isfinite(a.last_loss)
    assert np.array_equal(a.online.params, b.online.params)
    assert np.array_equal(a.buffer.priorities(), b.buffer.priorities())
    p = a.buffer.priorities()
    assert len(np.unique(p)) > 100 and a.buffer.max_priority >= p.max()
    # a config for another replay does not fit this agent's buffer
    with pytest.raises(ValueError, match="does not match the buffer"):
        a.config = CONFIG.replace(prioritized_replay=False)
    with pytest.raises(ValueError, match="does not match the buffer"):
        a.config = CONFIG.replace(per_alpha=0.3)
