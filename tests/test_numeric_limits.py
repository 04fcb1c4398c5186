"""Settings at the limits of the kernels' number types (issue 23).

Integers beyond int64, float settings finite in float64 but not in float32,
NumPy scalars, networks too large for memory, and JSON nested too deeply
are each refused with one ValueError naming the setting, the value and the
fix (one line and exit 2 at the command line), before anything is
allocated or compiled.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from ember_np import CircularBuffer, DqnAgent, DqnConfig, IndexActionMapper, QNetwork, VecEncoder
from ember_np._memory import network_bytes
from ember_np.cli import main
from ember_np.presets import load_preset_file

INT_FIELDS = [f.name for f in dataclasses.fields(DqnConfig) if f.type == "int"]


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("ember-np: error: "), err
    return err[0]


# -- integers beyond int64 ------------------------------------------------------------------


def test_every_int_field_is_listed():
    assert {"batch_size", "n_step", "per_beta_steps", "epsilon_decay_steps"} <= set(INT_FIELDS)


@pytest.mark.parametrize("field", INT_FIELDS)
@pytest.mark.parametrize("value", [2**63, 2**64, 10**30])
def test_an_integer_setting_beyond_int64_is_refused_naming_it(field, value):
    with pytest.raises(ValueError, match=rf"{field} must be at most 2\*\*63 - 1 .*got {value}"):
        DqnConfig(**{field: value})


def test_int64_max_itself_is_accepted_where_no_other_rule_bounds_it():
    c = DqnConfig(epsilon_decay_steps=2**63 - 1, per_beta_steps=2**63 - 1,
                  target_update_freq=2**63 - 1, learning_rate_decay_steps=2**63 - 1)  # fmt: skip
    assert c.epsilon_at(10**6) > c.epsilon_end


def test_hidden_sizes_beyond_int64_are_refused():
    with pytest.raises(ValueError, match="hidden_sizes must be a sequence of positive integers"):
        DqnConfig(hidden_sizes=(2**64,))


@pytest.mark.parametrize("kwargs", [{"n_step": 10**20}, {"n_step": 2**63}])
def test_buffer_integers_beyond_int64_are_refused(kwargs):
    with pytest.raises(ValueError, match=r"n_step must be at most 2\*\*63 - 1"):
        CircularBuffer(10, 2, 2, **kwargs)
    with pytest.raises(ValueError, match=r"capacity must be at most 2\*\*63 - 1"):
        CircularBuffer(2**64, 2, 2)


@pytest.mark.parametrize(
    "setting", ["epsilon_decay_steps=2**64", "train_freq=2**64", "n_step=2**64",
                "target_update_freq=1000000000000000000000000000000"],
)  # fmt: skip
def test_the_cli_refuses_integers_beyond_int64_in_one_line(tmp_path, capsys, setting):
    code = main(["train", "CartPole-v1", "--steps", "10", "--root", str(tmp_path), "--quiet",
                 "--set", setting])  # fmt: skip
    assert code == 2
    line = one_error_line(capsys)
    assert setting.partition("=")[0] in line and "at most 2**63 - 1" in line


@pytest.mark.parametrize("field", ["target_update_freq", "per_beta_steps"])
def test_a_preset_file_with_an_integer_beyond_int64_names_the_file(tmp_path, field):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"dqn": {field: 2**64}}))
    with pytest.raises(ValueError, match=rf"preset file {path}: {field} must be at most"):
        load_preset_file(path)


def test_a_preset_file_nested_200000_deep_is_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text('{"dqn": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(ValueError, match=f"preset file {path} nests its JSON too deeply"):
        load_preset_file(path)
    code = main(["train", "CartPole-v1", "--steps", "10", "--root", str(tmp_path), "--quiet",
                 "--preset", str(path)])  # fmt: skip
    assert code == 2 and str(path) in one_error_line(capsys)


# -- networks too large for memory ------------------------------------------------------------


def test_network_bytes_counts_parameters_optimiser_target_and_activations():
    sizes = (4, 8, 2)
    n = 4 * 8 + 8 + 8 * 2 + 2
    assert network_bytes(sizes) == 4 * (4 * n + 2 * (8 + 2))
    assert network_bytes(sizes, 32, networks=2) == 4 * (5 * n + 2 * 32 * (8 + 2))
    duel_norm = n + 8 + 1 + 2 * 8
    assert network_bytes(sizes, 1, True, True) == 4 * (4 * duel_norm + 2 * (8 + 2 + 9))
    assert network_bytes(sizes) == QNetwork(sizes).num_params * 16 + 4 * 2 * 10


@pytest.mark.parametrize("hidden", [(200_000, 200_000), (2**40,)])
def test_a_network_too_large_for_memory_is_refused_before_allocating(hidden):
    config = DqnConfig(hidden_sizes=hidden, min_replay_size=32, buffer_capacity=100)
    with pytest.raises(ValueError, match=r"need .* more than the .* memory available"):
        DqnAgent(VecEncoder(4), IndexActionMapper(2), config)
    with pytest.raises(ValueError, match="hidden_sizes"):
        QNetwork((4, *hidden, 2))


def test_the_cli_refuses_a_network_too_large_for_memory_in_one_line(tmp_path, capsys):
    code = main(["train", "CartPole-v1", "--steps", "10", "--root", str(tmp_path), "--quiet",
                 "--set", "hidden_sizes=[200000, 200000]"])  # fmt: skip
    assert code == 2 and "memory available" in one_error_line(capsys)
