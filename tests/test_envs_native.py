"""Native environments: gymnasium equivalence, registration, vectorised stepping."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import ember_np.envs  # noqa: F401  (registers the ids)
from ember_np.envs import AcrobotEnv, CartPoleEnv, MountainCarEnv, NativeVecEnv, unwrap_native

PAIRS = [
    ("CartPole-v1", CartPoleEnv),
    ("Acrobot-v1", AcrobotEnv),
    ("MountainCar-v0", MountainCarEnv),
]


@pytest.mark.parametrize("env_id, cls", PAIRS)
@pytest.mark.parametrize("seed", [0, 7])
def test_same_episodes_as_gymnasium_across_resets(env_id, cls, seed):
    """gym.make(env_id) (with its TimeLimit) and the native env: same seed, same actions."""
    theirs = gym.make(env_id)
    ours = gym.make(f"ember_np/{env_id}")
    assert isinstance(unwrap_native(ours), cls)
    o1, _ = theirs.reset(seed=seed)
    o2, _ = ours.reset(seed=seed)
    np.testing.assert_array_equal(o1, o2)
    actions = np.random.default_rng(seed).integers(0, theirs.action_space.n, 4_000)
    resets = 0
    for a in actions:
        o1, r1, term1, trunc1, _ = theirs.step(int(a))
        o2, r2, term2, trunc2, _ = ours.step(int(a))
        assert o2.dtype == np.float32
        np.testing.assert_array_equal(o1, o2)
        assert (r1, term1, trunc1) == (r2, term2, trunc2)
        if term1 or trunc1:
            resets += 1
            o1, _ = theirs.reset()
            o2, _ = ours.reset()
            np.testing.assert_array_equal(o1, o2)
    assert resets >= 3


def test_cartpole_float64_state_matches_from_arbitrary_states():
    theirs = gym.make("CartPole-v1").unwrapped
    ours = CartPoleEnv()
    theirs.reset(seed=0)
    ours.reset(seed=0)
    rng = np.random.default_rng(1)
    for _ in range(500):
        state = rng.uniform([-2.4, -3, -0.2, -3], [2.4, 3, 0.2, 3])
        for action in (0, 1):
            theirs.state = state.copy()
            theirs.steps_beyond_terminated = None
            ours.state[:4] = state
            ours.state[4] = -1.0
            _, r1, t1, _, _ = theirs.step(action)
            _, r2, t2, _, _ = ours.step(action)
            assert np.array_equal(np.asarray(theirs.state), ours.state[:4])
            assert (r1, t1) == (r2, t2)


@pytest.mark.parametrize("env_id", [p[0] for p in PAIRS])
def test_passes_gymnasiums_env_checker(env_id):
    check_env(gym.make(f"ember_np/{env_id}").unwrapped, skip_render_check=True)


def test_time_limit_and_bad_actions():
    env = CartPoleEnv(max_steps=3)
    env.reset(seed=0)
    flags = [env.step(1)[3] for _ in range(3)]
    assert flags == [False, False, True]
    with pytest.raises(ValueError, match=r"action must be an integer in \[0, 2\), got 2"):
        env.step(2)
    with pytest.raises(ValueError, match="max_steps must be an integer >= 0"):
        CartPoleEnv(max_steps=-1)
    with pytest.raises(ValueError, match="call reset"):
        MountainCarEnv().step(0)


@pytest.mark.parametrize("env_id, cls", PAIRS)
def test_vectorised_copies_match_single_envs(env_id, cls):
    n = 5
    vec = NativeVecEnv(env_id, n, seed=3)
    singles = [cls() for _ in range(n)]
    for env, state in zip(singles, vec.rng_states):
        env.rng.state = state.copy()
    obs = vec.reset()
    for i, env in enumerate(singles):
        np.testing.assert_array_equal(obs[i], env.reset()[0])
    actions = np.random.default_rng(0).integers(0, vec.action_space.n, (1_500, n))
    done_count = 0
    for row in actions:
        obs, rewards, terminated, truncated = vec.step(row)
        for i, env in enumerate(singles):
            o, r, term, trunc, _ = env.step(int(row[i]))
            assert (r, term, trunc) == (rewards[i], terminated[i], truncated[i])
            if term or trunc:
                done_count += 1
                np.testing.assert_array_equal(vec.final_obs[i], o)
                o, _ = env.reset()
            np.testing.assert_array_equal(obs[i], o)
    assert done_count >= n


def test_vec_env_errors():
    with pytest.raises(ValueError, match="no native env 'Pong-v5'"):
        NativeVecEnv("Pong-v5", 2)
    vec = NativeVecEnv("ember_np/CartPole-v1", 2)
    vec.reset()
    with pytest.raises(ValueError, match=r"expected actions of shape \(2,\)"):
        vec.step([0, 1, 0])
    with pytest.raises(ValueError, match=r"actions must be in \[0, 2\)"):
        vec.step([0, 5])


def test_unwrap_native_refuses_wrappers_that_change_steps():
    env = gym.make("ember_np/CartPole-v1")
    assert unwrap_native(env) is env.unwrapped
    assert unwrap_native(gym.wrappers.TimeLimit(env, 10)) is None
    assert unwrap_native(gym.make("CartPole-v1")) is None


@pytest.mark.parametrize("env_id, cls", PAIRS)
def test_random_rollout_is_the_env_stepped_with_the_same_draws(env_id, cls):
    """The benchmark's compiled loop (one copy per env class) against the env stepped
    from Python."""
    from ember_np.envs import _dispatch as d
    from ember_np.rng import next_below

    env = cls()
    env.reset(seed=5)
    n_actions = int(env.action_space.n)
    copy = cls.STATES.single(cls.KIND, env.state.copy(), env.counters.copy(),
                             env.rng.state.copy(), env.max_steps)  # fmt: skip
    obs = np.zeros(env.observation_space.shape, np.float32)
    episodes = d.random_rollout(copy, obs, n_actions, 3_000)
    expected, last = 0, None
    for _ in range(3_000):
        last, _, term, trunc, _ = env.step(int(next_below(env.rng.state, n_actions)))
        if term or trunc:
            expected += 1
            last, _ = env.reset()
    assert episodes == expected >= 5
    np.testing.assert_array_equal(copy.state, env.state)
    np.testing.assert_array_equal(copy.counters, env.counters)
    np.testing.assert_array_equal(copy.rng, env.rng.state)
    np.testing.assert_array_equal(obs, last)


def test_every_native_env_is_one_row_of_the_table():
    """The ids gymnasium knows, the registration's light list, NATIVE_ENVS and each
    class's attributes all come from NATIVE_ENV_TABLE, one row per env."""
    from ember_np._registration import NATIVE_ENV_ENTRY_POINTS
    from ember_np.envs import _dispatch as d
    from ember_np.envs.native import NATIVE_ENV_TABLE, NATIVE_ENVS

    ids = [row.id for row in NATIVE_ENV_TABLE]
    assert ids == [f"ember_np/{env_id}" for env_id, _ in PAIRS]  # every env, once
    assert [row.env_class for row in NATIVE_ENV_TABLE] == [cls for _, cls in PAIRS]
    registered = {env_id for env_id in gym.registry if env_id.startswith("ember_np/")}
    assert registered == set(ids) == set(NATIVE_ENV_ENTRY_POINTS) == set(NATIVE_ENVS)
    for row in NATIVE_ENV_TABLE:
        cls = row.env_class
        assert gym.spec(row.id).entry_point == NATIVE_ENV_ENTRY_POINTS[row.id]
        assert NATIVE_ENV_ENTRY_POINTS[row.id] == f"{cls.__module__}:{cls.__name__}"
        env = gym.make(row.id)
        assert type(env.unwrapped) is cls is NATIVE_ENVS[row.id]
        assert cls.SPEC is row and NATIVE_ENV_TABLE[cls.KIND] is row
        assert (cls.GYMNASIUM_ID, cls.MAX_STEPS) == (row.gymnasium_id, row.max_steps)
        assert env.unwrapped.max_steps == row.max_steps
        assert env.observation_space == row.observation_space
        assert env.action_space == row.action_space
        theirs = gym.make(row.gymnasium_id)  # the env it reproduces
        assert theirs.observation_space.shape == row.observation_space.shape
        assert theirs.action_space == row.action_space
        assert theirs.spec.max_episode_steps == row.max_steps
        # the kernel-facing states are the row's own classes, so the dispatch compiles
        # this env's dynamics alone
        single, vector = cls.STATES
        assert type(env.unwrapped.kernel_state) is single and single.__base__ is d.EnvState
        vec = NativeVecEnv(row.gymnasium_id, 2)
        assert type(vec.kernel_state) is vector and vector.__base__ is d.VecEnvState
        assert len({single, vector} & {r.env_class.STATES.single for r in NATIVE_ENV_TABLE}) == 1


def test_one_dispatch_mechanism_by_class():
    """The integer-kind dispatch (env_step / env_reset over a kind) is gone: a state of
    the base class, whose kind field names an env but whose class names none, is refused."""
    from numba.core.errors import TypingError

    from ember_np.envs import _dispatch as d

    for removed in ("env_step", "env_reset", "ENV_STATES", "VEC_ENV_STATES", "CARTPOLE",
                    "ACROBOT", "MOUNTAINCAR"):  # fmt: skip
        assert not hasattr(d, removed), removed
    env = CartPoleEnv()
    env.reset(seed=0)
    base = d.EnvState(CartPoleEnv.KIND, env.state, env.counters, env.rng.state, env.max_steps)
    with pytest.raises(TypingError, match="name no dynamics"):
        d.step_env(base, 0, np.zeros(4, np.float32))
