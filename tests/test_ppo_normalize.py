"""PPO's running normalisation against Stable-Baselines3's formulas, written plainly here.

``PlainRunningMeanStd`` is SB3's ``RunningMeanStd`` (count starts at 1e-4, mean 0,
variance 1; Chan et al.'s parallel update from a batch's mean, variance and count),
and ``plain_vec_normalize_step`` is what SB3's ``VecNormalize.step_wait`` does to one
vector step's observations and rewards.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from ember_np.ppo.normalize import STATE_KEYS, VecNormalizer, normalize_obs_numpy


class PlainRunningMeanStd:
    def __init__(self, shape=()):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = 1e-4

    def update(self, batch):
        batch_mean = np.mean(batch, axis=0)
        batch_var = np.var(batch, axis=0)
        batch_count = batch.shape[0]
        delta = batch_mean - self.mean
        total = self.count + batch_count
        new_mean = self.mean + delta * batch_count / total
        m_2 = self.var * self.count + batch_var * batch_count + np.square(
            delta) * self.count * batch_count / total  # fmt: skip
        self.mean, self.var, self.count = new_mean, m_2 / total, total


def plain_obs(obs, rms, clip=10.0, eps=1e-8):
    return np.clip((obs - rms.mean) / np.sqrt(rms.var + eps), -clip, clip).astype(np.float32)


def test_observation_statistics_follow_sb3s_formula_and_all_the_data():
    rng = np.random.default_rng(0)
    norm = VecNormalizer(3, 4)
    plain = PlainRunningMeanStd((3,))
    seen = []
    for size in [4, 4, 1, 7, 4, 13, 2] * 20:
        batch = (rng.normal(size=(size, 3)) * [1.0, 5.0, 0.1] + [2.0, -3.0, 0.5]).astype(np.float32)
        out = norm.normalize_obs(batch)
        plain.update(batch.astype(np.float64))
        seen.append(batch)
        np.testing.assert_allclose(out, plain_obs(batch, plain), rtol=1e-6, atol=1e-6)
    s = norm.state_arrays()
    np.testing.assert_allclose(s["obs_mean"], plain.mean, rtol=1e-12)
    np.testing.assert_allclose(s["obs_var"], plain.var, rtol=1e-11)
    assert s["counts"][0] == pytest.approx(plain.count, rel=1e-15)
    # against all the data at once: the start (mean 0, var 1, count eps) merged with it
    data = np.concatenate(seen).astype(np.float64)
    n, eps = len(data), 1e-4
    m, v = data.mean(axis=0), data.var(axis=0)
    np.testing.assert_allclose(s["obs_mean"], m * n / (n + eps), rtol=1e-12)
    np.testing.assert_allclose(
        s["obs_var"], (eps + v * n + m**2 * eps * n / (n + eps)) / (n + eps), rtol=1e-11
    )
    # and so within eps / n of NumPy's own mean and variance
    np.testing.assert_allclose(s["obs_mean"], m, atol=2 * eps / n * np.abs(m).max())
    np.testing.assert_allclose(s["obs_var"], v, atol=2 * eps / n * (1 + v + m**2).max())


def test_update_rows_and_training_flag_choose_what_is_counted():
    rng = np.random.default_rng(1)
    norm = VecNormalizer(2, 3)
    plain = PlainRunningMeanStd((2,))
    batch = rng.normal(size=(3, 2)).astype(np.float32)
    rows = np.array([True, False, True])
    out = norm.normalize_obs(batch, update_rows=rows)
    plain.update(batch[rows].astype(np.float64))
    np.testing.assert_allclose(norm.stats.obs_mean, plain.mean, rtol=1e-12)
    np.testing.assert_allclose(out, plain_obs(batch, plain), rtol=1e-6, atol=1e-6)
    before = norm.state_arrays()
    norm.normalize_obs(batch, update_rows=np.zeros(3, bool))  # no row: nothing changes
    frozen = norm.apply_obs(batch * 3)  # apply never counts
    norm.training = False
    assert not norm.training
    norm.normalize_obs(batch * 5)
    norm.normalize_reward([1.0, 2.0, 3.0], [False] * 3, [False] * 3)
    after = norm.state_arrays()
    for key in STATE_KEYS:
        assert np.array_equal(before[key], after[key]), key
    np.testing.assert_allclose(frozen, plain_obs(batch * 3, plain), rtol=1e-6, atol=1e-6)


def test_clip_and_the_numpy_path_agree_with_the_compiled_one():
    rng = np.random.default_rng(2)
    norm = VecNormalizer(3, 2, clip_obs=2.5)
    for _ in range(10):
        norm.normalize_obs(rng.normal(size=(2, 3)).astype(np.float32))
    x = rng.normal(size=(50, 3)).astype(np.float32) * 3
    x[0] = [1e6, -1e6, 0.0]
    compiled = norm.apply_obs(x)
    numpy_path = norm.obs_numpy(x)
    s = norm.stats
    assert np.array_equal(numpy_path, normalize_obs_numpy(x, s.obs_mean, s.obs_var, 2.5))
    np.testing.assert_allclose(compiled, numpy_path, rtol=1e-6, atol=1e-7)
    assert compiled[0, 0] == 2.5 and compiled[0, 1] == -2.5
    assert np.abs(compiled).max() == 2.5 and numpy_path.dtype == np.float32


def plain_vec_normalize_rewards(steps, n_envs, gamma, clip=10.0, eps=1e-8):
    """SB3's VecNormalize reward path, step by step: returns float64 per step."""
    rms = PlainRunningMeanStd(())
    returns = np.zeros(n_envs)
    outs = []
    for rewards, dones, skip in steps:
        keep = ~skip
        returns[keep] = returns[keep] * gamma + rewards[keep]
        if keep.any():
            rms.update(returns[keep])
        out = np.clip(rewards / np.sqrt(rms.var + eps), -clip, clip)
        out[skip] = 0.0
        outs.append(out)
        returns[dones & keep] = 0
    return outs, rms, returns


@pytest.mark.parametrize("with_skips", [False, True], ids=["same_step", "next_step_skips"])
def test_reward_normalisation_matches_a_slow_reference(with_skips):
    rng = np.random.default_rng(3)
    n = 4
    steps = []
    ended = np.zeros(n, bool)
    for _ in range(300):
        skip = ended.copy() if with_skips else np.zeros(n, bool)
        rewards = np.where(skip, 0.0, rng.normal(1.0, 3.0, n))
        dones = ~skip & (rng.random(n) < 0.1)
        steps.append((rewards, dones, skip))
        ended = dones
    norm = VecNormalizer(1, n, gamma=0.95, clip_reward=1.5)
    want, rms, returns = plain_vec_normalize_rewards(steps, n, 0.95, clip=1.5)
    terminated = [d & (rng.random(n) < 0.5) for _, d, _ in steps]  # any split: both end
    for (rewards, dones, skip), term, expected in zip(steps, terminated, want):
        got = norm.normalize_reward(rewards, term, dones & ~term, skip=skip)
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)
    s = norm.state_arrays()
    np.testing.assert_allclose(s["ret_mean"][0], rms.mean, rtol=1e-12)
    np.testing.assert_allclose(s["ret_var"][0], rms.var, rtol=1e-11)
    assert s["counts"][1] == pytest.approx(rms.count, rel=1e-15)
    np.testing.assert_allclose(s["returns"], returns, rtol=1e-12)
    assert np.abs(np.concatenate(want)).max() == 1.5  # the clip was reached


def test_switched_off_parts_pass_through():
    norm = VecNormalizer(2, 2, norm_obs=False, norm_reward=False)
    x = np.array([[100.0, -3.0], [0.5, 7.0]], np.float32)
    assert np.array_equal(norm.normalize_obs(x), x)
    assert np.array_equal(norm.obs_numpy(x), x)
    rewards = norm.normalize_reward([50.0, -2.0], [False, True], [False, False])
    assert rewards.tolist() == [50.0, -2.0]
    assert norm.stats.counts[0] == 1e-4  # observations not counted


def test_state_round_trip_continues_identically_and_bad_state_changes_nothing():
    rng = np.random.default_rng(4)
    a = VecNormalizer(3, 2)
    for _ in range(5):
        a.normalize_obs(rng.normal(size=(2, 3)))
        a.normalize_reward(rng.normal(size=2), [False, True], [False, False])
    saved = a.state_arrays()
    b = VecNormalizer(3, 2)
    b.load_state_arrays(saved)
    x, r = rng.normal(size=(2, 3)), rng.normal(size=2)
    assert np.array_equal(a.normalize_obs(x), b.normalize_obs(x))
    assert np.array_equal(a.normalize_reward(r, [True, False], [False, False]),
                          b.normalize_reward(r, [True, False], [False, False]))  # fmt: skip
    for key in STATE_KEYS:
        assert np.array_equal(a.state_arrays()[key], b.state_arrays()[key])
    before = b.state_arrays()
    bad_cases = [
        (
            {**saved, "obs_var": np.ones(4)},
            r"'obs_var': expected float64 \(3,\), got float64 \(4,\)",
        ),
        ({**saved, "obs_mean": np.zeros(3, np.float32)}, "'obs_mean': expected float64"),
        (
            {k: v for k, v in saved.items() if k != "returns"},
            "'returns': expected float64 .* got missing",
        ),
        ({**saved, "ret_var": np.array([-1.0])}, "'ret_var' are negative"),
        ({**saved, "counts": np.array([0.0, 1.0])}, "'counts' are not positive"),
        ({**saved, "obs_mean": np.array([0.0, np.inf, 0.0])}, "hold NaN or inf"),
    ]
    for arrays, match in bad_cases:
        with pytest.raises(ValueError, match=match):
            b.load_state_arrays(arrays)
        for key in STATE_KEYS:
            assert np.array_equal(before[key], b.state_arrays()[key])


def test_bad_input_says_what_was_expected():
    with pytest.raises(ValueError, match="obs_dim must be a positive integer, got 0"):
        VecNormalizer(0, 2)
    with pytest.raises(ValueError, match="clip_obs must be a positive finite number"):
        VecNormalizer(2, 2, clip_obs=-1.0)
    with pytest.raises(ValueError, match=r"gamma must be a number in \[0, 1\]"):
        VecNormalizer(2, 2, gamma=1.5)
    norm = VecNormalizer(2, 3)
    with pytest.raises(ValueError, match=r"expected obs of shape \(batch, 2\), got shape \(3, 4\)"):
        norm.normalize_obs(np.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"expected update_rows as 3 booleans"):
        norm.normalize_obs(np.zeros((3, 2)), update_rows=[True])
    with pytest.raises(ValueError, match=r"expected rewards as 3 real numbers"):
        norm.normalize_reward([1.0, 2.0], [False] * 3, [False] * 3)
    with pytest.raises(ValueError, match="rewards hold NaN"):
        norm.normalize_reward([1.0, np.nan, 0.0], [False] * 3, [False] * 3)
    assert norm.stats.counts.tolist() == [1e-4, 1e-4]  # nothing counted by refused calls


def test_the_deployed_policys_normalisation_imports_no_numba():
    code = (
        "import sys, numpy as np\n"
        "from ember_np.ppo.normalize_stats import norm_stats, normalize_obs_numpy\n"
        "s = norm_stats(3, 1)\n"
        "normalize_obs_numpy(np.ones((1, 3)), s.obs_mean, s.obs_var)\n"
        "assert 'numba' not in sys.modules, 'numba imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
