"""One answer from every backend at float32's extremes: the NumPy-only policy, the
compiled policy and the exported ONNX graph (through ``onnx_greedy_actions``) give the
same action for every observation, or all three refuse it with the same ValueError.

Observations are 4-tuples of {+-1e19, +-1e-40, +-3e38, +-1e30, 0, +-1e-45, +-65504,
+-1e10}: a fixed sample of 400 of them plus the examples that once split the backends
(a QR-DQN mean overflowing in float32; LayerNorm after a first product beyond float32).
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from ember_np import DqnAgent, DqnConfig, DqnPolicy, IndexActionMapper, VecEncoder
from ember_np.dqn.heads.forward import expected_values, obs_limit

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from ember_np.export import export_onnx, onnx_greedy_actions, policy_to_onnx  # noqa: E402

VALUES = [1e19, 1e-40, 3e38, 1e30, 0.0, 1e-45, 65504.0, 1e10]
GRID_VALUES = sorted({s * v for v in VALUES for s in (1.0, -1.0)})
EXAMPLES = [[1e19, 3e38, 3e38, 1e19], [3e38, -3e38, -3e38, 3e38], [1e30, -1e30, 1e19, 0.0],
            [1e19, 1e19, -1e19, 1e19], [1e-45, -1e-40, 65504.0, 1e10]]  # fmt: skip


def grid(n: int = 400, seed: int = 0) -> np.ndarray:
    """EXAMPLES, then n 4-tuples drawn without replacement from all 15**4 (float32)."""
    every = list(itertools.product(GRID_VALUES, repeat=4))
    pick = np.random.default_rng(seed).choice(len(every), n, replace=False)
    return np.array(EXAMPLES + [every[i] for i in sorted(pick)], dtype=np.float32)


#: Every head the parity tests of the policy and the export enumerate, and their mixes.
HEADS = {
    "plain": {},
    "dueling": {"dueling": True},
    "layer_norm": {"layer_norm": True},
    "dueling layer_norm": {"dueling": True, "layer_norm": True},
    "noisy": {"noisy": True},
    "c51": {"distributional": "c51", "n_atoms": 21, "v_min": -10.0, "v_max": 60.0},
    "qr": {"distributional": "qr", "n_quantiles": 16},
    "c51 dueling": {"distributional": "c51", "n_atoms": 11, "dueling": True},
    "qr layer_norm": {"distributional": "qr", "n_quantiles": 8, "layer_norm": True},
    "c51 noisy layer_norm": {"distributional": "c51", "n_atoms": 11, "noisy": True,
                             "layer_norm": True},
    "qr dueling layer_norm noisy": {"distributional": "qr", "n_quantiles": 16, "dueling": True,
                                    "layer_norm": True, "noisy": True},
    "rainbow": {"distributional": "c51", "n_atoms": 51, "dueling": True, "layer_norm": True,
                "noisy": True},
}  # fmt: skip


def outcome(call, x):
    """The action, or ("refused", what) for a ValueError naming the observation's problem."""
    try:
        return int(call(x))
    except ValueError as exc:
        text = str(exc)
        beyond = re.search(r"beyond (\S+), the largest", text)
        assert beyond or "must be finite" in text, text
        return ("refused", beyond.group(1) if beyond else "non-finite")


def policies_of(config_kwargs, tmp_path, seed=3):
    """A CartPole agent trained 600 steps (weights grown past their initialisation, as
    the agents on which the backends once disagreed), loaded by each backend."""
    import gymnasium as gym

    import ember_np.envs  # noqa: F401  (registers ember_np/CartPole-v1)
    from ember_np import DqnTrainer

    config = DqnConfig(hidden_sizes=(32, 32), min_replay_size=64, buffer_capacity=1000,
                       batch_size=32, learning_rate=1e-3, **config_kwargs)  # fmt: skip
    env = gym.make("ember_np/CartPole-v1")
    agent = DqnAgent.for_env(env, config, seed=seed)
    DqnTrainer(env, agent, seed=seed).train(600)
    assert agent.n_updates > 0
    path = agent.save(tmp_path / "agent.npz")
    numpy_policy = DqnPolicy.load(path, backend="numpy")
    compiled = DqnPolicy.load(path, backend="numba")
    export_onnx(path, tmp_path / "agent.onnx")
    session = ort.InferenceSession(str(tmp_path / "agent.onnx"),
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    return numpy_policy, compiled, session


@pytest.mark.parametrize("name", list(HEADS))
def test_every_backend_gives_one_answer_over_the_extreme_grid(name, tmp_path):
    numpy_policy, compiled, session = policies_of(HEADS[name], tmp_path)
    assert numpy_policy.max_abs_obs == compiled.max_abs_obs
    meta = session.get_modelmeta().custom_metadata_map
    assert float(meta["max_abs_obs"]) == numpy_policy.max_abs_obs
    x = grid()
    onnx_act = lambda row: onnx_greedy_actions(session, row[None])[0]  # noqa: E731
    refused = 0
    for row in x:
        got = [outcome(numpy_policy.act, row), outcome(compiled.act, row),
               outcome(onnx_act, row)]  # fmt: skip
        assert got[0] == got[1] == got[2], (row.tolist(), got)
        refused += isinstance(got[0], tuple)
        q = [outcome(lambda r, p=p: p.q_values(r).argmax(), row)
             for p in (numpy_policy, compiled)]  # fmt: skip
        assert q == got[:2], (row.tolist(), q, got)
    ok = np.abs(x).max(axis=1) <= numpy_policy.max_abs_obs
    assert refused == (~ok).sum() and 0 < refused < len(x)  # both sides of the limit
    assert (~ok == (np.abs(x).max(axis=1) > 1e38)).all()  # beyond it: the rows with +-3e38
    for policy in (numpy_policy, compiled):
        expected = [compiled.act(row) for row in x[ok]]
        np.testing.assert_array_equal(policy.act_batch(x[ok]), expected)
        q = policy.q_values_batch(x[ok])
        assert np.isfinite(q).all()
        with pytest.raises(ValueError, match=r"obs_batch\[\d+\].*beyond .*the largest"):
            policy.act_batch(x)
    np.testing.assert_array_equal(onnx_greedy_actions(session, x[ok]), expected)
    (q_onnx,) = session.run(["q_values"], {"obs": x[ok]})
    assert np.isfinite(q_onnx).all()
    np.testing.assert_array_equal(np.argmax(q_onnx, axis=1), expected)


def test_the_limit_bounds_every_float32_value_inside_the_network():
    """Inside the limit a float64 forward (the reference) stays below float32's max, so
    no float32 pass can overflow; just beyond it a row of the grid's kind may not."""
    from ember_np import QNetwork

    f32_max = float(np.finfo(np.float32).max)
    for kwargs in ({}, {"dueling": True}, {"layer_norm": True}):
        net = QNetwork((4, 32, 32, 2), seed=1, **kwargs)
        limit = obs_limit(net.layer_sizes, net.params, net.dueling, net.layer_norm)
        assert 0 < limit < f32_max and limit == float(np.float32(limit))
        x = np.array([[limit, -limit, limit, -limit], [limit] * 4, [-limit] * 4])
        h = x
        ws = [w.astype(np.float64) for w in net.weights]
        bs = [b.astype(np.float64) for b in net.biases]
        for w, b in zip(ws[:2], bs[:2]):
            h = h @ w + b
            assert np.abs(h).max() < f32_max / 8
            h = np.maximum(h, 0.0) if not net.layer_norm else h
            if net.layer_norm:
                break
        assert np.isfinite(net.forward(x.astype(np.float32))).all()


# -- QR-DQN's mean in float64 (NumPy and ONNX as the compiled kernel) ---------------------------


def qr_policy(backend):
    """A QR policy (1 -> 1 -> 2 actions x 16 quantiles) whose quantiles at x = limit are
    all near float32's max / 8: their float32 sum (not their mean) overflows."""
    from ember_np.dqn.heads.head import DistributionalHead

    head = DistributionalHead("qr", 16)
    w0, b0 = np.ones(1, np.float32), np.zeros(1, np.float32)
    w1 = np.concatenate([np.full(16, 0.99), np.full(16, 1.0)]).astype(np.float32)
    params = np.concatenate([w0, b0, w1, np.zeros(32, np.float32)])
    return DqnPolicy((1, 1, 2), params, VecEncoder(1), IndexActionMapper(2), backend, head=head)


def test_a_qr_mean_of_quantiles_near_the_float32_max_is_finite_everywhere():
    numpy_policy, compiled = qr_policy("numpy"), qr_policy("numba")
    limit = numpy_policy.max_abs_obs
    x = np.array([limit], np.float32)
    quantile = np.float64(np.float32(limit))
    expected = np.array([np.float32(np.float32(0.99) * np.float32(limit)), np.float32(limit)])
    assert 16 * quantile > np.finfo(np.float32).max  # a float32 sum overflows
    q_compiled = compiled.q_values(x)
    np.testing.assert_array_equal(q_compiled, expected)
    np.testing.assert_array_equal(numpy_policy.q_values(x), q_compiled)
    assert numpy_policy.act(x) == compiled.act(x) == 1
    session = ort.InferenceSession(policy_to_onnx(numpy_policy).SerializeToString(),
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    (q,) = session.run(["q_values"], {"obs": x[None]})
    np.testing.assert_array_equal(q[0], q_compiled)
    assert onnx_greedy_actions(session, x[None]).tolist() == [1]


def test_expected_values_sums_qr_quantiles_in_float64():
    from ember_np.dqn.heads.head import DistributionalHead

    out = np.full((2, 3, 16), 3e38, np.float32)
    out[1] = 1.5
    q = expected_values(DistributionalHead("qr", 16), out)
    reference = out.astype(np.float64).mean(axis=-1).astype(np.float32)
    np.testing.assert_array_equal(q, reference)
    assert np.isfinite(q).all() and q.dtype == np.float32


# -- never an action from NaN Q-values ---------------------------------------------------------


def test_act_refuses_nan_q_values_instead_of_returning_action_0():
    """Weights so large that the agent's own Q-values overflow: act raises, never 0."""
    config = DqnConfig(hidden_sizes=(8,), min_replay_size=32, buffer_capacity=64, dueling=True)
    agent = DqnAgent(VecEncoder(2), IndexActionMapper(3), config, seed=0)
    agent.online.params[...] = np.float32(1e30)
    agent.online.params[-9:] = np.float32(-1e30)  # V = -inf + A = +inf: NaN Q
    x = np.array([1e10, 1e10], np.float32)
    with pytest.raises(ValueError, match=r"Q-values of observation obs=.* are not finite"):
        agent.act(x)
    with pytest.raises(ValueError, match=r"Q-values of observation obs=.* are not finite"):
        agent.act(x, action_mask=np.array([True, True, False]))
    with pytest.raises(ValueError, match=r"not finite"):
        agent.online.greedy_action(x)


@pytest.mark.parametrize("bad", [[np.nan, 1.0, 2.0, 3.0], [1.0, np.nan, 2.0, 3.0],
                                 [1.0, 2.0, 3.0, -np.inf], [3e38, np.nan, 0.0, 0.0]])  # fmt: skip
def test_nan_or_inf_anywhere_is_one_error_before_the_limit_is_said(bad, tmp_path):
    from ember_np import QNetwork

    net = QNetwork((4, 16, 2), seed=0)
    x = np.array(bad, np.float32)
    for backend in ("numpy", "numba"):
        policy = DqnPolicy(net.layer_sizes, net.params.copy(), VecEncoder(4),
                           IndexActionMapper(2), backend)  # fmt: skip
        for call in (policy.act, policy.q_values):
            with pytest.raises(ValueError, match=r"observation must be finite"):
                call(x)
