"""EpisodeStatus, Experience, encoders, action mappers and env spaces."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from ember_np import (
    DiscreteActionMapper,
    DqnAgent,
    EpisodeStatus,
    Experience,
    IndexActionMapper,
    ObservationEncoder,
    VecEncoder,
)
from ember_np.encoding import describe, encoder_from_description, mapper_from_description


def test_episode_status_from_flags():
    assert EpisodeStatus.from_flags(False, False) is EpisodeStatus.CONTINUING
    assert EpisodeStatus.from_flags(True, False) is EpisodeStatus.TERMINATED
    assert EpisodeStatus.from_flags(False, True) is EpisodeStatus.TRUNCATED
    assert EpisodeStatus.from_flags(True, True) is EpisodeStatus.TERMINATED


@pytest.mark.parametrize(
    "status, mask, done",
    [
        (EpisodeStatus.CONTINUING, 1.0, False),
        (EpisodeStatus.TERMINATED, 0.0, True),
        (EpisodeStatus.TRUNCATED, 1.0, True),
    ],
)
def test_experience_mask_and_done(status, mask, done):
    e = Experience(np.zeros(2), 1, 0.5, np.ones(2), status)
    assert e.bootstrap_mask == mask and e.is_done is done
    assert status.bootstrap_mask == mask and status.is_done is done


def test_vec_encoder_flattens_any_shape():
    enc = VecEncoder((2, 3))
    assert enc.obs_size == 6
    x = enc.encode(np.arange(6, dtype=np.float64).reshape(2, 3))
    assert x.dtype == np.float32 and x.shape == (6,) and x.flags.c_contiguous
    np.testing.assert_array_equal(x, np.arange(6))
    batch = enc.encode_batch(np.zeros((5, 2, 3)))
    assert batch.shape == (5, 6) and batch.dtype == np.float32
    with pytest.raises(
        ValueError, match=r"expected an observation of shape \(2, 3\), got \(3, 2\)"
    ):
        enc.encode(np.zeros((3, 2)))
    assert isinstance(enc, ObservationEncoder)


def test_index_action_mapper_with_start():
    m = IndexActionMapper(3, start=-1)
    assert [m.index_to_action(i) for i in range(3)] == [-1, 0, 1]
    assert [m.action_to_index(a) for a in (-1, 0, 1)] == [0, 1, 2]
    with pytest.raises(ValueError, match=r"action must be in \[-1, 2\), got 2"):
        m.action_to_index(2)
    with pytest.raises(ValueError, match="an action must be an integer"):
        m.action_to_index(0.5)
    assert isinstance(m, DiscreteActionMapper)


def test_for_space_accepts_box_and_discrete_with_start():
    enc = VecEncoder.for_space(spaces.Box(-1, 1, shape=(3, 4)))
    mapper = IndexActionMapper.for_space(spaces.Discrete(4, start=2))
    assert enc.obs_size == 12 and mapper.num_actions == 4 and mapper.start == 2


@pytest.mark.parametrize(
    "space, message",
    [
        (spaces.Discrete(5), "DQN and PPO need a Box observation space.*got Discrete"),
        (
            spaces.Dict({"a": spaces.Box(0, 1, (2,))}),
            "DQN and PPO need a Box observation space.*got Dict",
        ),
    ],
)
def test_other_observation_spaces_rejected(space, message):
    with pytest.raises(ValueError, match=message):
        VecEncoder.for_space(space)


@pytest.mark.parametrize(
    "space, message",
    [
        (spaces.Box(-1, 1, (2,)), "DQN and PPO need a Discrete action space.*got Box"),
        (
            spaces.MultiDiscrete([2, 3]),
            "DQN and PPO need a Discrete action space.*got MultiDiscrete",
        ),
    ],
)
def test_other_action_spaces_rejected(space, message):
    with pytest.raises(ValueError, match=message):
        IndexActionMapper.for_space(space)


def test_for_env_rejects_continuous_env():
    env = gym.make("Pendulum-v1")
    with pytest.raises(ValueError, match="DQN and PPO need a Discrete action space"):
        DqnAgent.for_env(env)


def test_descriptions_round_trip():
    enc, mapper = VecEncoder((2, 2)), IndexActionMapper(5, start=3)
    assert encoder_from_description(describe(enc)).shape == (2, 2)
    again = mapper_from_description(describe(mapper))
    assert (again.num_actions, again.start) == (5, 3)

    class Custom:
        obs_size = 3

    d = describe(Custom())
    assert d["type"].endswith("Custom")
    with pytest.raises(ValueError, match="pass encoder=... explicitly"):
        encoder_from_description(d)
