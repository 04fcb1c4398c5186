"""Dueling head (Wang et al. 2016): Q = V + A - mean_a(A) in QNetwork.

The state (copy, pickle, state_dict) carrying the architecture, the agent,
checkpoints, DqnPolicy and ONNX. Forward, backprop and whole updates against
torch are tests/test_layer_norm.py's, for every architecture.
"""

from __future__ import annotations

import json
import pickle
import warnings

import helpers
import naive
import numpy as np
import pytest
from helpers import CARTPOLE_AGENT, cartpole_trainer

from ember_np import QNetwork, UpdateOptions

make_batch = helpers.make_batch


def layers64(net):
    return [w.astype(np.float64) for w in net.weights], [b.astype(np.float64) for b in net.biases]


# -- construction and forward --------------------------------------------------


def test_heads_layout_and_init_like_torch_linear():
    net = QNetwork((4, 64, 32, 3), seed=3, dueling=True)
    assert net.dueling
    assert [w.shape for w in net.weights] == [(4, 64), (64, 32), (32, 3), (32, 1)]
    assert [b.shape for b in net.biases] == [(64,), (32,), (3,), (1,)]
    plain = QNetwork((4, 64, 32, 3), seed=3)
    assert net.num_params == plain.num_params + 32 + 1
    for w, b in zip(net.weights, net.biases):
        bound = 1.0 / np.sqrt(w.shape[0])
        assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
        assert np.abs(w).max() > 0.8 * bound
    # weights[-2] / weights[-1] are live views of the advantage and value heads
    x = np.ones(4, dtype=np.float32)
    before = net.forward(x)
    net.biases[-1][0] += 2.0  # V shifts every Q equally
    np.testing.assert_allclose(net.forward(x), before + 2.0, rtol=1e-6, atol=1e-6)
    net.biases[-2][:] += 7.0  # a constant added to A cancels in A - mean(A)
    np.testing.assert_allclose(net.forward(x), before + 2.0, rtol=1e-6, atol=1e-5)


def test_constructor_rejects_no_hidden_layer_and_non_bool():
    with pytest.raises(ValueError, match="at least one hidden layer"):
        QNetwork((4, 2), dueling=True)
    with pytest.raises(ValueError, match="dueling must be True or False, got 'yes'"):
        QNetwork((4, 8, 2), dueling="yes")


# Forward, backprop (against tests/naive.py's network_forward) and five Adam
# steps against torch, of every architecture (dueling, LayerNorm, both):
# tests/test_layer_norm.py.


# -- state: copy, sync, pickle, state_dict ---------------------------------------


def test_copy_sync_pickle_and_state_dict_keep_the_heads():
    sizes = (4, 16, 8, 3)
    net = QNetwork(sizes, seed=0, dueling=True)
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    unpickled = pickle.loads(pickle.dumps(net))
    assert unpickled.dueling and unpickled.num_params == net.num_params
    np.testing.assert_array_equal(unpickled.forward(x), net.forward(x))
    net.update(
        make_batch(sizes, batch=32), net.copy(), UpdateOptions(gamma=0.99, learning_rate=1e-2)
    )
    updated = pickle.loads(pickle.dumps(net))  # an updated network pickles too
    assert updated.dueling and updated.adam_step == 1
    np.testing.assert_array_equal(updated.forward(x), net.forward(x))
    other = net.copy()
    assert other.dueling and other.num_params == net.num_params
    np.testing.assert_array_equal(other.forward(x), net.forward(x))
    assert other.adam_step == net.adam_step == 1
    fresh = QNetwork(sizes, seed=5, dueling=True)
    fresh.load_state_dict(net.state_dict())
    np.testing.assert_array_equal(fresh.params, net.params)
    np.testing.assert_array_equal(fresh.state_dict()["adam_v"], net.state_dict()["adam_v"])
    assert fresh.state_dict()["dueling"].dtype == np.bool_ and bool(fresh.state_dict()["dueling"])
    synced = QNetwork(sizes, seed=6, dueling=True)
    synced.copy_from(net)
    np.testing.assert_array_equal(synced.params, net.params)
    soft = QNetwork(sizes, seed=6, dueling=True)
    expected = 0.25 * net.params + 0.75 * soft.params
    soft.soft_update_from(net, 0.25)
    np.testing.assert_allclose(soft.params, expected, rtol=1e-6)


@pytest.mark.parametrize(
    "flag, with_it, without_it",
    [("dueling", "dueling", "plain"), ("layer_norm", "with LayerNorm", "without LayerNorm")],
)
def test_architectures_do_not_mix(flag, with_it, without_it):
    """A dueling head or LayerNorm on one side only: every pairing refuses, naming both."""
    sizes = (4, 16, 3)
    plain, other = QNetwork(sizes, seed=0), QNetwork(sizes, seed=0, **{flag: True})
    names = f"({with_it}|{without_it})"
    for a, b in ((plain, other), (other, plain)):
        with pytest.raises(ValueError, match=f"architectures differ: this one is {names}"):
            a.copy_from(b)
        with pytest.raises(ValueError, match="architectures differ"):
            a.soft_update_from(b, 0.5)
        with pytest.raises(ValueError, match="architectures differ"):
            a.update(make_batch(sizes), b, UpdateOptions(gamma=0.99, learning_rate=1e-3))
        before = a.params.copy()
        with pytest.raises(ValueError, match=f"this network is {names}.*the state is"):
            a.load_state_dict(b.state_dict())
        np.testing.assert_array_equal(a.params, before)  # nothing changed
    # a state written before the flag existed (no such key) has neither feature
    old = plain.state_dict()
    del old[flag]
    QNetwork(sizes, seed=1).load_state_dict(old)
    with pytest.raises(ValueError, match=f"this network is {with_it}.*the state is {without_it}"):
        other.load_state_dict(old)


# -- agent, checkpoints, policy, ONNX ------------------------------------------------

DUELING = CARTPOLE_AGENT.replace(dueling=True)


@pytest.fixture(scope="module")
def trained_pair():
    """A dueling agent trained by the fused loop and one by the Python loop."""
    fused, python = cartpole_trainer(DUELING), cartpole_trainer(DUELING, fused=False)
    losses = helpers.train_both_loops(fused, python)
    return fused, python, losses


def test_agent_trains_dueling_on_both_loops_identically(trained_pair):
    fused, python, losses = trained_pair
    agent = fused.agent
    assert agent.online.dueling and agent.target.dueling
    assert agent.n_updates > 1_000 and np.isfinite(losses).all()
    assert helpers.agent_state(fused.agent) == helpers.agent_state(python.agent)
    # the value head moved: it is trained, not left at its initialisation
    init = cartpole_trainer(DUELING).agent
    assert not np.array_equal(agent.online.weights[-1], init.online.weights[-1])


def test_config_field_and_cli_override():
    from ember_np import DqnConfig
    from ember_np.training.setup import parse_sets

    assert DqnConfig().dueling is False
    assert DqnConfig(**parse_sets(["dueling=true"])).dueling is True
    assert DqnConfig.from_dict(DqnConfig(dueling=True).to_dict()).dueling is True
    with pytest.raises(ValueError, match="dueling must be True or False, got 'yes'"):
        DqnConfig(dueling="yes")
    with pytest.raises(ValueError, match="needs at least one hidden layer"):
        DqnConfig(hidden_sizes=(), dueling=True)


def test_config_setter_refuses_another_architecture(trained_pair):
    agent = trained_pair[0].agent
    with pytest.raises(ValueError, match="config.dueling=False does not match the network"):
        agent.config = agent.config.replace(dueling=False)


def test_exact_resume_takes_the_same_steps(tmp_path):
    a = cartpole_trainer(DUELING)
    a.train(700)
    original = a.agent
    # the same agent state on envs started from one seed: the same steps follow
    restored = helpers.check_exact_resume(original, tmp_path / "a.npz", 400)
    assert restored.online.dueling
    assert original.total_steps == restored.total_steps == 1_100


def test_checkpoint_error_both_ways_and_old_files_load_as_plain(tmp_path):
    from ember_np import CheckpointError, DqnAgent, DqnPolicy

    duel = cartpole_trainer(DUELING).agent
    plain = cartpole_trainer(CARTPOLE_AGENT.replace(dueling=False)).agent
    d_path = duel.save(tmp_path / "duel.npz")
    p_path = plain.save(tmp_path / "plain.npz")
    before = plain.online.params.copy()
    with pytest.raises(
        CheckpointError, match=r"this agent's network is plain.*checkpoint's is dueling"
    ):
        plain.load(d_path)
    np.testing.assert_array_equal(plain.online.params, before)
    with pytest.raises(
        CheckpointError, match=r"this agent's network is dueling.*checkpoint's is plain"
    ):
        duel.load(p_path)
    # a checkpoint written before the dueling head existed has no 'online/dueling'
    # and no 'dueling' in its config
    with np.load(p_path) as z:
        arrays = {k: z[k] for k in z.files if k != "online/dueling"}
    config = json.loads(str(arrays["config"]))
    del config["dueling"]
    arrays["config"] = np.array(json.dumps(config))
    assert "online/dueling" in np.load(d_path).files
    old = tmp_path / "old.npz"
    np.savez(old, **arrays)
    assert not DqnAgent.from_checkpoint(old).online.dueling
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the missing field is not a config difference
        plain.load(old)
    assert not DqnPolicy.load(old).dueling
    with pytest.raises(CheckpointError, match="checkpoint's is plain"):
        duel.load(old)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_policy_parity_on_both_backends(trained_pair, tmp_path, backend):
    from ember_np import DqnPolicy

    agent = trained_pair[0].agent
    path = agent.save(tmp_path / "duel.npz")
    obs = np.random.default_rng(0).normal(0.0, 1.5, (200, 4)).astype(np.float32)
    expected = naive.dueling_forward(*layers64(agent.online), obs)
    for policy in (DqnPolicy.load(path, backend=backend), agent.into_policy()):
        assert policy.dueling
        np.testing.assert_allclose(policy.q_values_batch(obs), expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(policy.q_values(obs[3]), expected[3], rtol=1e-5, atol=1e-5)
        assert policy.act_batch(obs).tolist() == agent.online.greedy_actions(obs).tolist()
        assert [policy.act(o) for o in obs[:20]] == [agent.act(o) for o in obs[:20]]
        with pytest.raises(ValueError, match="NaN or inf"):
            policy.act(np.array([0.0, np.nan, 0.0, 0.0]))
    views = DqnPolicy.load(path, backend=backend).layers()
    assert [w.shape for w, _ in views] == [w.shape for w in agent.online.weights]


def test_onnx_export_of_a_dueling_policy_matches_onnxruntime(trained_pair, tmp_path):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from ember_np import DqnPolicy
    from ember_np.export import export_onnx

    agent = trained_pair[0].agent
    path = agent.save(tmp_path / "duel.npz")
    meta = export_onnx(path, tmp_path / "duel.onnx")
    assert meta["dueling"] == "true"
    model = onnx.load(str(tmp_path / "duel.onnx"))
    ops = [n.op_type for n in model.graph.node]
    assert ops == ["Gemm", "Relu", "Gemm", "Relu", "Gemm", "Gemm", "ReduceMean", "Sub", "Add"]
    sess = ort.InferenceSession(str(tmp_path / "duel.onnx"), providers=["CPUExecutionProvider"])
    obs = np.random.default_rng(1).normal(0.0, 1.5, (300, 4)).astype(np.float32)
    (q,) = sess.run(["q_values"], {"obs": obs})
    policy = DqnPolicy.load(path, backend="numpy")
    np.testing.assert_allclose(q, policy.q_values_batch(obs), rtol=1e-5, atol=1e-5)
    assert q.argmax(axis=1).tolist() == policy.act_batch(obs).tolist()


def test_dueling_checkpoint_acts_with_numpy_alone(trained_pair, tmp_path):
    """DqnPolicy.load of a dueling checkpoint in a process where numba cannot be imported."""
    from test_policy_numpy import run_blocked

    agent = trained_pair[0].agent
    path = agent.save(tmp_path / "duel.npz")
    obs = np.random.default_rng(4).normal(0.0, 1.0, (50, 4)).astype(np.float32)
    result = run_blocked(
        f"""
        import json
        import numpy as np
        from ember_np.policy import DqnPolicy

        policy = DqnPolicy.load({str(path)!r})
        obs = np.array({obs.tolist()!r}, dtype=np.float32)
        print(json.dumps({{"backend": policy.backend, "dueling": policy.dueling,
                          "q": policy.q_values_batch(obs).tolist(),
                          "acts": policy.act_batch(obs).tolist()}}))
        """
    )
    assert result["backend"] == "numpy" and result["dueling"] is True
    np.testing.assert_allclose(result["q"], agent.online.forward(obs), rtol=1e-5, atol=1e-5)
    assert result["acts"] == agent.online.greedy_actions(obs).tolist()
