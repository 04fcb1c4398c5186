"""The algorithm registry, and a second algorithm that lives only in the tests.

``random_algorithm.RANDOM`` (tests/random_algorithm.py) is registered in that
one file; everything here reaches it through the command line, as a user's
own algorithm would be, to show that nothing above the registry is DQN's.
"""

from __future__ import annotations

import json

import pytest
from helpers import files_of

from ember_np.algorithms import DEFAULT_ALGORITHM, Algorithm, get_algorithm, known_algorithms
from ember_np.cli import main
from ember_np.dqn.config import DqnConfig

ALGO = "random_algorithm:RANDOM"


def test_dqn_is_built_in_and_the_default():
    dqn = get_algorithm()
    assert DEFAULT_ALGORITHM == "dqn" and dqn is get_algorithm("dqn")
    assert dqn.config_class is DqnConfig and dqn.checkpoint_format == "ember_np.dqn_agent"
    assert "dqn" in known_algorithms()
    assert dqn.default_preset("CartPole-v1").name == "rainbow"
    assert dqn.preset("zoo", "CartPole-v1").env_id == "CartPole-v1"


def test_a_module_algorithm_is_imported_once_and_remembered():
    algorithm = get_algorithm(ALGO)
    assert isinstance(algorithm, Algorithm) and algorithm.name == "random"
    assert get_algorithm(ALGO) is algorithm and ALGO in known_algorithms()


@pytest.mark.parametrize(
    "name, words",
    [
        ("ppo2", ["unknown algorithm 'ppo2'", "built in: dqn", "package.module:NAME"]),
        ("no_such_module_xyz:A", ["cannot import 'no_such_module_xyz'"]),
        ("random_algorithm:RandomConfig", ["must be an ember_np.algorithms.Algorithm", "type"]),
        ("", ["non-empty string"]),
    ],
)
def test_a_bad_name_says_what_exists(name, words):
    with pytest.raises(ValueError) as info:
        get_algorithm(name)
    for word in words:
        assert word in str(info.value)


def test_presets_of_an_algorithm_without_any_are_refused_by_name():
    algorithm = get_algorithm(ALGO)
    with pytest.raises(ValueError, match="unknown random preset 'zoo' for CartPole-v1"):
        algorithm.preset("zoo", "CartPole-v1")
