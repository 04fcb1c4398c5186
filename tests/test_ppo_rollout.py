"""PPO's rollout buffer: GAE(lambda) against a slow reference, both autoreset modes,
truncation bootstrapping, the minibatch order, and bad input.

The reference here knows nothing of the buffer's rows: it keeps each env's real
transitions as gymnasium hands them out and sums each advantage explicitly,
``A_t = sum_l (gamma lambda)^l delta_{t+l}`` up to the episode's end, with
``delta = r + gamma V(next) - V(s)``, V(next) = 0 after a termination and the
critic's value of the real last observation after a truncation.
"""

from __future__ import annotations

import gymnasium as gym
import numba
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from ember_np.ppo.normalize import VecNormalizer
from ember_np.ppo.normalize_kernels import normalize_obs_rows, normalize_rewards
from ember_np.ppo.rollout import (
    RolloutArrays,
    RolloutBuffer,
    autoreset_next,
    compute_gae,
    rollout_arrays,
    shuffled_indices,
    store_step,
    truncation_bootstrap_obs,
)
from ember_np.rng import Rng

GAMMA, LAMBDA = 0.97, 0.9
MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP]


class ScriptedEnv(gym.Env):
    """obs = [env id, episode, step, noise]; episode k of env i lasts 2 + (i + k) % 4
    steps and ends terminated when (i + k) is even, else truncated (the time limit is
    the env's own: ``truncated`` True). Reward: a number drawn per step."""

    observation_space = spaces.Box(-1e6, 1e6, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, env_id: int) -> None:
        self.env_id = env_id
        self.episode = -1
        self.t = 0
        self.draws = np.random.default_rng(100 + env_id)

    def _obs(self) -> np.ndarray:
        return np.array([self.env_id, self.episode, self.t, self.draws.normal()], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        k = self.env_id + self.episode
        length = 2 + k % 4
        assert self.t < length, "stepped past the end of an episode"
        self.t += 1
        end = self.t == length
        reward = float(self.draws.normal()) + float(action)
        return self._obs(), reward, end and k % 2 == 0, end and k % 2 == 1, {}


def critic(obs: np.ndarray) -> np.ndarray:
    """A fixed 'critic': V(s) = tanh of a fixed linear map (float32, like a network's)."""
    obs = np.asarray(obs, np.float64)
    w = np.linspace(0.3, -0.2, obs.shape[-1])
    return np.tanh(obs @ w * 0.1 + 0.05).astype(np.float32)


def reference_advantages(log, last_value, gamma, lam):
    """Explicit GAE sums over one env's real transitions (v, r, terminated, truncated,
    V(real last obs)), in order; the episode in progress at the end bootstraps from
    ``last_value``."""
    out = []
    for t in range(len(log)):
        total, coef = 0.0, 1.0
        for u in range(t, len(log)):
            v, r, term, trunc, v_final = log[u]
            if term:
                next_v = 0.0
            elif trunc:
                next_v = v_final
            elif u + 1 < len(log):
                next_v = log[u + 1][0]
            else:
                next_v = last_value
            total += coef * (r + gamma * next_v - v)
            if term or trunc:
                break
            coef *= gamma * lam
        out.append(total)
    return np.array(out)


def run_rollouts(env, mode, n_steps, n_rollouts, counts, seed=0, policy=None):
    """Collect rollouts as a PPO loop would; yield (buffer, per-env reference logs,
    last values) after each rollout's GAE; ``counts`` (a dict) gets the terminations,
    truncations and reset rows seen."""
    n = env.num_envs
    obs, info = env.reset(seed=seed)
    dim = int(np.prod(env.single_observation_space.shape))
    buf = RolloutBuffer(n_steps, n, dim, gamma=GAMMA, gae_lambda=LAMBDA, autoreset=mode)
    buf.restart()
    ended = np.zeros(n, bool)  # the reference's own tracking of NEXT_STEP reset rows
    rng = np.random.default_rng(seed)
    counts.update(terminated=0, truncated=0, skipped=0)
    for _ in range(n_rollouts):
        buf.reset()
        logs = [[] for _ in range(n)]
        for t in range(n_steps):
            x = np.asarray(obs, np.float32).reshape(n, dim)
            v = critic(x)
            actions = rng.integers(0, 2, n) if policy is None else policy(x, t)
            next_obs, rewards, term, trunc, info = env.step(actions)
            envs, rows = truncation_bootstrap_obs(mode, next_obs, term, trunc, info)
            final_values = np.zeros(n, np.float32)
            if envs.size:
                final_values[envs] = critic(np.asarray(rows, np.float32).reshape(len(envs), dim))
            buf.store(x, actions, v, np.zeros(n), rewards, term, trunc, final_values)
            for e in range(n):
                if ended[e]:  # NEXT_STEP: this step reset env e; no transition
                    assert rewards[e] == 0 and not term[e] and not trunc[e]
                    counts["skipped"] += 1
                    continue
                if mode == AutoresetMode.SAME_STEP and (term[e] or trunc[e]):
                    last = info["final_obs"][e]
                else:
                    last = next_obs[e]
                v_final = float(critic(np.asarray(last, np.float32)[None])[0])
                logs[e].append((float(v[e]), float(rewards[e]), bool(term[e]), bool(trunc[e]),
                                v_final))  # fmt: skip
                counts["terminated"] += bool(term[e])
                counts["truncated"] += bool(trunc[e] and not term[e])
            if mode == AutoresetMode.NEXT_STEP:
                ended = ~ended & (term | trunc)
            obs = next_obs
        last_values = critic(np.asarray(obs, np.float32).reshape(n, dim))
        buf.compute_gae(last_values)
        yield buf, logs, last_values


def check_against_reference(buf, logs, last_values):
    a = buf.arrays
    for e, log in enumerate(logs):
        rows = np.flatnonzero(a.valid[:, e])
        assert len(rows) == len(log), f"env {e}: {len(rows)} transitions stored, {len(log)} real"
        want = reference_advantages(log, float(last_values[e]), GAMMA, LAMBDA)
        np.testing.assert_allclose(a.advantages[rows, e], want, rtol=2e-5, atol=2e-6)
        np.testing.assert_allclose(a.returns[rows, e], want + a.values[rows, e], rtol=2e-5,
                                   atol=2e-6)  # fmt: skip
        skipped = np.flatnonzero(~a.valid[:, e])
        assert (a.advantages[skipped, e] == 0).all()
        assert (a.returns[skipped, e] == a.values[skipped, e]).all()
    assert buf.n_samples == sum(len(log) for log in logs)


@pytest.mark.parametrize("mode", MODES, ids=["next_step", "same_step"])
def test_gae_matches_the_reference_on_scripted_episodes(mode):
    env = SyncVectorEnv([lambda i=i: ScriptedEnv(i) for i in range(3)], autoreset_mode=mode)
    counts = {}
    for buf, logs, last_values in run_rollouts(env, mode, 7, 4, counts):
        check_against_reference(buf, logs, last_values)
    assert counts["terminated"] >= 5 and counts["truncated"] >= 5
    assert (counts["skipped"] > 0) == (mode == AutoresetMode.NEXT_STEP)


@pytest.mark.parametrize("mode", MODES, ids=["next_step", "same_step"])
def test_gae_matches_the_reference_on_cartpole_with_a_short_time_limit(mode):
    """CartPole-v1 cut at 12 steps: env 0 always pushes left (terminates in about 9
    steps), the others act at random (mostly truncated at 12)."""
    env = SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=12) for _ in range(4)],
        autoreset_mode=mode,
    )
    rng = np.random.default_rng(5)

    def policy(x, t):
        a = rng.integers(0, 2, len(x))
        a[0] = 0
        return a

    counts = {}
    for buf, logs, last_values in run_rollouts(env, mode, 16, 3, counts, seed=3, policy=policy):
        check_against_reference(buf, logs, last_values)
    assert counts["terminated"] >= 3 and counts["truncated"] >= 3


def test_truncation_bootstraps_and_termination_does_not():
    """Same step, same reward: truncated adds gamma * V(real last obs), terminated
    (also when truncated at once) does not."""
    results = {}
    for how in ("terminated", "truncated", "both", "neither"):
        buf = RolloutBuffer(1, 1, 2, gamma=0.9, gae_lambda=0.8, autoreset="same")
        buf.store(np.zeros((1, 2)), [0], [1.0], [0.0], [2.0], [how in ("terminated", "both")],
                  [how in ("truncated", "both")], final_values=[5.0])  # fmt: skip
        buf.compute_gae([7.0])  # the next episode's first observation's value: never used
        results[how] = float(buf.arrays.advantages[0, 0])
    assert results["terminated"] == pytest.approx(2.0 - 1.0)
    assert results["both"] == results["terminated"]  # terminated wins, as SB3's TimeLimit.truncated
    assert results["truncated"] == pytest.approx(2.0 + 0.9 * 5.0 - 1.0)
    assert results["neither"] == pytest.approx(2.0 + 0.9 * 7.0 - 1.0)


def test_sb3_recursion_on_random_arrays_lambda_edges():
    """Random dones, rewards and values, one autoreset mode without skipped rows:
    the advantages equal SB3's recursion written plainly, and lambda 0 gives the
    one-step TD errors, gamma = lambda = 1 the Monte Carlo return minus the value."""
    rng = np.random.default_rng(0)
    t_max, n = 9, 3
    rewards = rng.normal(size=(t_max, n)).astype(np.float32)
    values = rng.normal(size=(t_max, n)).astype(np.float32)
    dones = rng.random((t_max, n)) < 0.25
    last = rng.normal(size=n).astype(np.float32)
    for gamma, lam in ((0.99, 0.95), (0.9, 0.0), (1.0, 1.0)):
        buf = RolloutBuffer(t_max, n, 1, gamma=gamma, gae_lambda=lam, autoreset="same")
        for t in range(t_max):
            buf.store(np.zeros((n, 1)), np.zeros(n, int), values[t], np.zeros(n), rewards[t],
                      dones[t], np.zeros(n, bool))  # fmt: skip
        buf.compute_gae(last)
        adv = np.zeros((t_max, n))
        running = np.zeros(n)
        for t in reversed(range(t_max)):
            next_values = last if t == t_max - 1 else values[t + 1]
            nonterminal = 1.0 - dones[t]
            delta = rewards[t] + gamma * next_values * nonterminal - values[t]
            running = delta + gamma * lam * nonterminal * running
            adv[t] = running
        np.testing.assert_allclose(buf.arrays.advantages, adv, rtol=1e-5, atol=1e-6)
        if lam == 0.0:
            np.testing.assert_allclose(buf.arrays.advantages, rewards + gamma * np.vstack(
                [values[1:], last[None]]) * (1 - dones) - values, rtol=1e-5, atol=1e-6)  # fmt: skip


def test_next_step_reset_row_crosses_rollouts():
    """An episode that ends at a rollout's last step makes the next rollout's first row
    of that env a reset row (no transition), and not the other envs'."""
    buf = RolloutBuffer(2, 2, 1, autoreset="next")
    z = np.zeros((2, 1))
    buf.store(z, [0, 0], [0, 0], [0, 0], [1, 1], [False, False], [False, False])
    buf.store(z, [0, 0], [0, 0], [0, 0], [1, 1], [True, False], [False, False])
    assert buf.state_arrays()["ended"].tolist() == [True, False]
    buf.compute_gae([0.0, 0.0])
    buf.reset()
    buf.store(z, [1, 1], [0, 0], [0, 0], [0, 1], [False, False], [False, False])
    assert buf.arrays.valid[0].tolist() == [False, True]
    # and a buffer restored from the saved state behaves the same
    other = RolloutBuffer(2, 2, 1, autoreset="next")
    other.load_state_arrays({"ended": np.array([True, False])})
    other.store(z, [1, 1], [0, 0], [0, 0], [0, 1], [False, False], [False, False])
    assert other.arrays.valid[0].tolist() == [False, True]


def test_native_vec_env_same_step_final_obs():
    """NativeVecEnv resets within the step and keeps the last observations in final_obs."""
    from ember_np.envs import NativeVecEnv

    env = NativeVecEnv("CartPole-v1", 3, seed=1, max_steps=10)
    obs = env.reset(seed=1)
    buf = RolloutBuffer(25, 3, 4, autoreset="same")
    seen_trunc = 0
    for _ in range(25):
        next_obs, rewards, term, trunc = env.step(np.zeros(3, np.int64))
        envs, rows = truncation_bootstrap_obs("same", next_obs, term, trunc,
                                              {"final_obs": env.final_obs})  # fmt: skip
        assert np.array_equal(rows, env.final_obs[envs])
        seen_trunc += len(envs)
        fv = np.zeros(3, np.float32)
        fv[envs] = critic(rows)
        buf.store(obs, np.zeros(3, np.int64), critic(obs), np.zeros(3), rewards, term, trunc, fv)
        obs = next_obs
    buf.compute_gae(critic(obs))
    assert buf.arrays.valid.all() and buf.arrays.dones.any()


def test_masks_are_stored_with_their_observations():
    buf = RolloutBuffer(2, 2, 3, n_actions_masked=4, autoreset="same")
    masks = np.array([[1, 0, 1, 0], [0, 0, 0, 1]], np.int8)
    buf.store(np.ones((2, 3)), [0, 3], [0, 0], [0, 0], [0, 0], [False] * 2, [False] * 2,
              masks=masks)  # fmt: skip
    assert np.array_equal(buf.arrays.masks[0], masks.astype(bool))
    assert buf.flat().masks.shape == (4, 4)


def filled(seed_rows=5, n=3, mode="next"):
    buf = RolloutBuffer(seed_rows, n, 1, autoreset=mode)
    z = np.zeros((n, 1))
    for t in range(seed_rows):
        term = np.zeros(n, bool)
        term[t % n] = t % 2 == 0
        buf.store(
            z, np.zeros(n, int), np.zeros(n), np.zeros(n), np.ones(n), term, np.zeros(n, bool)
        )
    buf.compute_gae(np.zeros(n))
    return buf


def test_minibatch_order_is_a_seeded_permutation_of_the_transitions():
    buf = filled()
    valid = np.flatnonzero(buf.flat().valid)
    assert 0 < len(valid) < 15  # NEXT_STEP reset rows are left out
    a = buf.minibatch_order(Rng(11))
    b = buf.minibatch_order(Rng(11))
    assert np.array_equal(a, b)
    assert sorted(a.tolist()) == valid.tolist()
    assert not np.array_equal(a, buf.minibatch_order(Rng(12)))
    rng = Rng(11)  # two epochs from one stream: two different orders
    assert not np.array_equal(buf.minibatch_order(rng), buf.minibatch_order(rng))
    # the flat views index the rows: sample i is step i // n_envs of env i % n_envs
    flat = buf.flat()
    buf.arrays.advantages[2, 1] = 42.0
    assert flat.advantages[2 * 3 + 1] == 42.0


def test_minibatch_order_is_uniform_enough():
    """Each of 5 samples lands first about equally often over 5000 seeded epochs."""
    buf = filled(5, 1, "same")
    rng = Rng(0)
    firsts = np.bincount([buf.minibatch_order(rng)[0] for _ in range(5000)], minlength=5)
    assert firsts.min() > 850 and firsts.max() < 1150


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: RolloutBuffer(0, 2, 3), "n_steps must be a positive integer, got 0"),
        (lambda: RolloutBuffer(4, 0, 3), "n_envs must be a positive integer"),
        (lambda: RolloutBuffer(4, 2, 3, gamma=1.5), r"gamma must be a number in \[0, 1\]"),
        (lambda: RolloutBuffer(4, 2, 3, gae_lambda=-0.1), "gae_lambda"),
        (lambda: RolloutBuffer(4, 2, 3, autoreset=AutoresetMode.DISABLED), "autoreset must be"),
        (lambda: rollout_arrays(2.5, 2, 3), "n_steps"),
    ],
)
def test_bad_settings_say_what_was_expected(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_steps_say_what_was_expected():
    buf = RolloutBuffer(1, 2, 3, autoreset="same")
    ok = dict(obs=np.zeros((2, 3)), actions=[0, 1], values=[0, 0], log_probs=[0, 0],
              rewards=[0, 0], terminated=[False, False], truncated=[False, False])  # fmt: skip
    cases = [
        (dict(obs=np.zeros((2, 4))), r"expected obs of shape \(2, 3\), got shape \(2, 4\)"),
        (dict(actions=[0, 1, 1]), r"expected actions of shape \(2,\)"),
        (dict(actions=[0.5, 1]), "actions must be an array of integers"),
        (dict(values=[0, np.nan]), "values holds NaN"),
        (dict(terminated=[0.5, 0]), "expected terminated as 2 booleans"),
        (dict(truncated=[True, False]), r"envs \[0\] were truncated: pass final_values"),
    ]
    for change, match in cases:
        with pytest.raises(ValueError, match=match):
            buf.store(**{**ok, **change})
        assert buf.pos == 0  # nothing stored
    with pytest.raises(ValueError, match="compute_gae needs a full rollout: 0 of 1"):
        buf.compute_gae([0, 0])
    with pytest.raises(ValueError, match="call compute_gae first"):
        buf.minibatch_order(Rng(0))
    buf.store(**ok)
    with pytest.raises(ValueError, match="the rollout is full"):
        buf.store(**ok)
    with pytest.raises(ValueError, match=r"expected last_values of shape \(2,\)"):
        buf.compute_gae([0.0])
    masked = RolloutBuffer(1, 2, 3, n_actions_masked=2)
    with pytest.raises(ValueError, match="stores action masks"):
        masked.store(**ok)
    with pytest.raises(ValueError, match=r"masks\[1\] allows no action"):
        masked.store(**ok, masks=[[1, 0], [0, 0]])
    with pytest.raises(ValueError, match="needs its last observation"):
        truncation_bootstrap_obs("same", np.zeros((2, 3)), [False, False], [True, False], {})
    with pytest.raises(ValueError, match="saved rollout state 'ended'"):
        buf.load_state_arrays({"ended": np.zeros(3, bool)})


def test_autoreset_names():
    assert autoreset_next("next") and autoreset_next(AutoresetMode.NEXT_STEP)
    assert not autoreset_next("same") and not autoreset_next(AutoresetMode.SAME_STEP)


@numba.njit(cache=False)
def compiled_rollout(buf, stats, steps, last_values, rng_state, order):
    """What a fused loop does per rollout, in one compiled function: normalise each
    step's observations and rewards, store it, then GAE and an epoch's order."""
    obs, actions, values, rewards, terminated, truncated, final_values = steps
    t_max, n, d = obs.shape
    x = np.empty((n, d), np.float32)
    r = np.empty(n)
    no_masks = np.zeros((n, 0), np.bool_)
    for t in range(t_max):
        normalize_obs_rows(stats, obs[t], ~(terminated[t] | truncated[t]), x)
        normalize_rewards(stats, rewards[t], terminated[t] | truncated[t], buf.ended.copy(), r)
        store_step(buf, x, actions[t], values[t], values[t], no_masks, r, terminated[t],
                   truncated[t], final_values[t])  # fmt: skip
    compute_gae(buf, last_values)
    return shuffled_indices(rng_state, buf.valid.reshape(-1), order)


def test_the_kernels_run_inside_a_compiled_loop_as_from_python():
    """The fused loop's path (the kernels called from compiled code) gives the numbers
    of the Python path (RolloutBuffer and VecNormalizer) bit for bit, NEXT_STEP reset
    rows included."""
    rng = np.random.default_rng(9)
    t_max, n, d = 6, 3, 2
    obs = rng.normal(size=(t_max, n, d)).astype(np.float32)
    actions = rng.integers(0, 2, (t_max, n))
    values = rng.normal(size=(t_max, n)).astype(np.float32)
    rewards = rng.normal(size=(t_max, n))
    terminated = rng.random((t_max, n)) < 0.2
    truncated = ~terminated & (rng.random((t_max, n)) < 0.2)
    final_values = rng.normal(size=(t_max, n)).astype(np.float32)
    last = rng.normal(size=n).astype(np.float32)
    steps = (obs, actions, values, rewards, terminated, truncated, final_values)

    fused, fused_norm = RolloutBuffer(t_max, n, d), VecNormalizer(d, n)
    order = np.zeros(t_max * n, np.int64)
    k = compiled_rollout(fused.arrays, fused_norm.stats, steps, last, Rng(4).state, order)

    py, py_norm = RolloutBuffer(t_max, n, d), VecNormalizer(d, n)
    for t in range(t_max):
        done = terminated[t] | truncated[t]
        skip = py.state_arrays()["ended"]
        x = py_norm.normalize_obs(obs[t], update_rows=~done)
        r = py_norm.normalize_reward(rewards[t], terminated[t], truncated[t], skip=skip)
        py.store(x, actions[t], values[t], values[t], r, terminated[t], truncated[t],
                 final_values[t])  # fmt: skip
    py.compute_gae(last)
    assert (~py.arrays.valid).any()  # some NEXT_STEP reset rows
    for name in RolloutArrays._fields[:-3]:  # bit for bit (ordered_kernel sums)
        assert np.array_equal(getattr(fused.arrays, name), getattr(py.arrays, name)), name
    for key, value in py_norm.state_arrays().items():
        assert np.array_equal(fused_norm.state_arrays()[key], value), key
    assert np.array_equal(order[:k], py.minibatch_order(Rng(4)))
