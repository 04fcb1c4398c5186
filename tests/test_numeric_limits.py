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
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember_np import (
    Batch,
    CircularBuffer,
    DqnAgent,
    DqnConfig,
    IndexActionMapper,
    QNetwork,
    UpdateOptions,
    VecEncoder,
)
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


# -- floats finite in float64 but not in float32 --------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [("learning_rate", 1e39), ("learning_rate", 1e-50), ("huber_delta", 1e39),
     ("max_grad_norm", 1e300), ("learning_rate_end", 1e39), ("learning_rate_end", 1e-46),
     ("tau", 1e-50)],
)  # fmt: skip
def test_a_float_setting_that_is_not_finite_and_positive_in_float32_is_refused(field, value):
    with pytest.raises(
        ValueError,
        match=rf"{field} must be finite and > 0 in float32.*got {re.escape(repr(value))}",
    ):
        DqnConfig(**{field: value})


def test_the_float32_extremes_themselves_are_accepted():
    f32 = np.finfo(np.float32)
    c = DqnConfig(learning_rate=float(f32.max), huber_delta=float(f32.smallest_subnormal),
                  tau=float(f32.smallest_subnormal), max_grad_norm=float(f32.max))  # fmt: skip
    assert c.learning_rate == float(f32.max)


def test_qnetwork_update_refuses_a_learning_rate_beyond_float32():
    net = QNetwork((2, 4, 2), seed=0)
    x = np.zeros((2, 2), np.float32)
    args = (x, np.zeros(2, np.int64), np.zeros(2, np.float32), x, np.ones(2, np.float32), net)
    with pytest.raises(ValueError, match="learning_rate must be finite and > 0 in float32"):
        net.update(Batch(*args[:5]), args[5], UpdateOptions(gamma=0.9, learning_rate=1e39))
    assert np.isfinite(net.params).all()


def test_the_cli_refuses_a_learning_rate_beyond_float32_in_one_line(tmp_path, capsys):
    code = main(["train", "CartPole-v1", "--steps", "10", "--root", str(tmp_path), "--quiet",
                 "--set", "learning_rate=1e39"])  # fmt: skip
    assert code == 2 and "learning_rate must be finite and > 0 in float32" in one_error_line(capsys)


# -- policies with non-finite weights ---------------------------------------------------------


@pytest.fixture(scope="module")
def saved_agent(tmp_path_factory):
    config = DqnConfig(hidden_sizes=(8, 8), min_replay_size=32, buffer_capacity=64,
                       dueling=True, layer_norm=True)  # fmt: skip
    agent = DqnAgent(VecEncoder(4), IndexActionMapper(2), config, seed=0)
    return agent.save(tmp_path_factory.mktemp("ck") / "agent.npz")


@pytest.mark.parametrize("key", ["online/w0", "online/b2", "online/w3", "online/ln_g1"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_policy_with_non_finite_weights_is_refused_on_load_naming_the_key(
    saved_agent, tmp_path, key, bad
):
    from ember_np import CheckpointError
    from ember_np.policy import DqnPolicy as NumpyOnlyPolicy

    with np.load(saved_agent, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays[key].flat[1] = bad
    path = tmp_path / "diverged.npz"
    np.savez(path, **arrays)
    for backend in ("numpy", "numba"):
        with pytest.raises(
            CheckpointError, match=rf"'{key}' holds NaN or infinite values.*diverged"
        ) as info:
            NumpyOnlyPolicy.load(path, backend=backend)
        assert str(path) in str(info.value)


def test_a_policy_built_from_non_finite_params_is_refused():
    from ember_np import DqnPolicy

    params = QNetwork((4, 8, 2), seed=0).params.copy()
    params[3] = np.nan
    with pytest.raises(ValueError, match="weights hold NaN or infinite values"):
        DqnPolicy((4, 8, 2), params, VecEncoder(4), IndexActionMapper(2))


# -- priorities and the sum tree at the extremes -----------------------------------------------


def per_buffer(n, alpha, eps, capacity=None):
    from ember_np import PrioritizedBuffer

    buf = PrioritizedBuffer(capacity or n, 1, 2, alpha=alpha, eps=eps)
    for _ in range(n):
        buf.push(np.zeros(1, np.float32), 0, 0.0, np.ones(1, np.float32), 0)
    return buf


def assert_tree_invariants(tree: np.ndarray, leaves_used: int) -> None:
    """Every inner node is exactly the sum of its children; the total is finite, positive
    when a leaf is, and the (correctly rounded) sum of the leaves up to rounding."""
    import math

    size = tree.shape[0] // 2
    inner = np.arange(1, size)
    np.testing.assert_array_equal(tree[inner], tree[2 * inner] + tree[2 * inner + 1])
    leaves = tree[size:]
    assert np.isfinite(tree[1:]).all() and (leaves >= 0).all()
    assert (leaves[leaves_used:] == 0).all()
    exact = math.fsum(leaves.tolist())
    assert tree[1] == pytest.approx(exact, rel=1e-12, abs=0)
    assert (tree[1] > 0) == (exact > 0)


def test_alpha_1000_keeps_the_total_finite_and_samples_every_overflowing_slot():
    from ember_np import Rng

    buf = per_buffer(4, alpha=1000.0, eps=1e-6)
    buf.update_priorities([0, 1, 2, 3], [3.0, 4.0, 0.1, 0.2])  # 3^1000, 4^1000: inf in float64
    assert np.isfinite(buf.total_priority) and buf.total_priority > 0
    assert np.isfinite(buf.priorities()).all() and (buf.priorities() > 0).all()
    assert buf.max_priority == buf.priorities()[0] == buf.priorities()[1]
    rng = Rng(0)
    drawn = np.concatenate([buf.sample(4, rng).indices for _ in range(64)])
    assert set(drawn.tolist()) == {0, 1}  # the two largest, equally: not one slot forever
    assert 96 <= (drawn == 0).sum() <= 160
    assert_tree_invariants(buf.kernel_state.tree, 4)


def test_a_tiny_eps_with_zero_td_errors_keeps_every_priority_positive():
    from ember_np import Rng

    buf = per_buffer(8, alpha=2.0, eps=1e-300)
    buf.update_priorities(np.arange(8), np.zeros(8))  # (0 + 1e-300)^2 underflows to 0
    assert (buf.priorities() > 0).all() and buf.total_priority > 0
    rng = Rng(1)
    drawn = np.concatenate([buf.sample(8, rng).indices for _ in range(8)])
    assert set(drawn.tolist()) == set(range(8))  # all equal: every slot drawn
    assert_tree_invariants(buf.kernel_state.tree, 8)


F32_FINITE = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(
    alpha=st.one_of(st.sampled_from([0.0, 1e-300, 1.0, 1000.0, 1e300]),
                    st.floats(0.0, 1e6, allow_nan=False)),
    eps=st.one_of(st.sampled_from([5e-324, 2.2e-308, 1e-300, 1e300, 1.7e308]),
                  st.floats(1e-308, 1e308)),
    td=st.lists(F32_FINITE, min_size=1, max_size=12),
    n=st.integers(1, 9),
)  # fmt: skip
def test_prioritized_buffer_priorities_stay_finite_and_positive(alpha, eps, td, n):
    buf = per_buffer(n, alpha=alpha, eps=eps, capacity=9)
    idx = np.arange(len(td)) % n
    buf.update_priorities(idx, td)
    p = buf.priorities()
    assert np.isfinite(p).all() and (p > 0).all()
    assert np.isfinite(buf.max_priority) and buf.max_priority >= p.max()
    assert np.isfinite(buf.total_priority) and buf.total_priority > 0
    assert_tree_invariants(buf.kernel_state.tree, n)
    from ember_np import Rng

    drawn = buf.sample(n, Rng(0)).indices
    assert ((0 <= drawn) & (drawn < n)).all()


@settings(max_examples=200, deadline=None)
@given(data=st.data(), capacity=st.integers(1, 40))
def test_sum_tree_invariants_hold_at_the_float64_extremes(data, capacity):
    from ember_np.dqn.replay.sumtree import SumTree, max_priority

    tree = SumTree(capacity)
    top = max_priority.py_func(tree.tree.shape[0] // 2)
    priority = st.one_of(st.sampled_from([0.0, 5e-324, 2.2e-308, 1.0, top]),
                         st.floats(0.0, top, allow_subnormal=True))  # fmt: skip
    for _ in range(data.draw(st.integers(1, 4))):
        idx = data.draw(st.lists(st.integers(0, capacity - 1), min_size=1, max_size=capacity))
        tree.set(idx, data.draw(st.lists(priority, min_size=len(idx), max_size=len(idx))))
        assert_tree_invariants(tree.tree, capacity)
    with pytest.raises(ValueError, match="priorities must be <="):
        tree.set([0], [np.nextafter(top, np.inf)])
    assert_tree_invariants(tree.tree, capacity)


# -- issue 23 item 16: preset files and ONNX metadata ----------------------------------------


def test_a_preset_file_for_another_env_is_refused_naming_both(tmp_path, capsys):
    from ember_np.presets import get_preset

    path = tmp_path / "acrobot.json"
    path.write_text(json.dumps({"env_id": "Acrobot-v1", "steps": 100, "dqn": {"gamma": 0.9}}))
    with pytest.raises(ValueError, match=r"made for env_id 'Acrobot-v1', not 'CartPole-v1'"):
        get_preset(str(path), "CartPole-v1")
    assert get_preset(str(path), "ember_np/Acrobot-v1").config.gamma == 0.9
    assert load_preset_file(path).env_id == "Acrobot-v1"  # no env to compare with
    code = main(["train", "CartPole-v1", "--steps", "10", "--root", str(tmp_path), "--quiet",
                 "--preset", str(path)])  # fmt: skip
    line = one_error_line(capsys)
    assert code == 2 and "Acrobot-v1" in line and str(path) in line and "env_id" in line


def test_a_preset_file_with_unknown_top_level_keys_is_refused_naming_them(tmp_path):
    path = tmp_path / "typo.json"
    path.write_text(json.dumps({"dqn": {"gamma": 0.9}, "stpes": 5000, "env_id": "CartPole-v1"}))
    with pytest.raises(
        ValueError, match=rf"preset file {path}: unknown top-level key\(s\) \['stpes'\]"
    ):
        load_preset_file(path)


def test_a_non_utf8_preset_file_is_refused_naming_the_file(tmp_path, capsys):
    path = tmp_path / "latin1.json"
    path.write_bytes('{"dqn": {"gamma": 0.9}, "source": "café"}'.encode("latin-1"))
    with pytest.raises(ValueError, match=f"preset file {path} is not UTF-8"):
        load_preset_file(path)
    code = main(["train", "CartPole-v1", "--steps", "10", "--root", str(tmp_path), "--quiet",
                 "--preset", str(path)])  # fmt: skip
    assert code == 2 and str(path) in one_error_line(capsys)


@pytest.mark.parametrize("masks", [True, False])
def test_onnx_metadata_records_whether_the_policy_was_trained_with_masks(tmp_path, masks):
    pytest.importorskip("onnx")
    from ember_np.export import export_onnx

    config = DqnConfig(hidden_sizes=(8,), min_replay_size=32, buffer_capacity=64,
                       action_masks=masks)  # fmt: skip
    agent = DqnAgent(VecEncoder(4), IndexActionMapper(3), config, seed=0)
    meta = export_onnx(agent.save(tmp_path / "a.npz"), tmp_path / "a.onnx")
    assert meta["action_masks"] == json.dumps(masks)
