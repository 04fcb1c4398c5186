"""LayerNorm after each hidden layer (Ba et al. 2016; Gallici et al. 2024): Linear ->
LayerNorm -> ReLU in QNetwork, alone and with the dueling head.

Forward against a plain NumPy reference and backprop by finite differences in
float64 (of every architecture: dueling, LayerNorm, both), five Adam steps
against torch (nn.Linear + nn.LayerNorm + ReLU), the state (copy, sync,
pickle, state_dict, checkpoints both ways), DqnPolicy on both backends, ONNX
export, and an agent on the fused loop with exact resume.
"""

from __future__ import annotations

import json
import pickle
import re

import gymnasium as gym
import helpers
import naive
import numpy as np
import pytest
from helpers import CARTPOLE_AGENT, cartpole_trainer

import ember_np.envs  # noqa: F401  (registers ember_np/CartPole-v1)
from ember_np import (
    CheckpointError,
    DqnAgent,
    DqnConfig,
    DqnPolicy,
    QNetwork,
    UpdateOptions,
)
from ember_np.dqn.learner import learn
from ember_np.dqn.learner import network as nw
from ember_np.nn import mlp
from ember_np.types import Batch

SIZES = [(3, 6, 2), (3, 6, 5, 3), (4, 6, 5, 4, 2)]
IDS = ["1 hidden", "2 hidden", "3 hidden"]
DUEL = [False, True]
DUEL_IDS = ["plain head", "dueling"]
#: (dueling, layer_norm) of every architecture beyond the plain one (tests/test_network.py's)
ARCHS = [(True, False), (False, True), (True, True)]
ARCH_IDS = ["dueling", "layer_norm", "dueling+layer_norm"]


def randomize_norms(net, seed):
    """Gains and biases away from their (1, 0) initialisation, so tests see them act."""
    rng = np.random.default_rng(seed)
    for g, b in zip(net.norm_gains, net.norm_biases):
        g[...] = rng.uniform(0.5, 1.5, g.size)
        b[...] = rng.uniform(-0.3, 0.3, b.size)


# -- construction and forward --------------------------------------------------


@pytest.mark.parametrize("dueling", DUEL, ids=DUEL_IDS)
def test_layout_init_and_views(dueling):
    sizes = (4, 64, 32, 3)
    net = QNetwork(sizes, seed=3, dueling=dueling, layer_norm=True)
    ref = QNetwork(sizes, seed=3, dueling=dueling)
    assert net.layer_norm and not ref.layer_norm
    assert net.num_params == ref.num_params + 2 * (64 + 32)
    assert [g.shape for g in net.norm_gains] == [(64,), (32,)] == [b.shape for b in net.norm_biases]
    for g, b in zip(net.norm_gains, net.norm_biases):
        np.testing.assert_array_equal(g, 1.0)
        np.testing.assert_array_equal(b, 0.0)
    # weights and biases drawn as without LayerNorm (the same stream)
    for w, w_ref in zip(net.weights, ref.weights):
        np.testing.assert_array_equal(w, w_ref)
    np.testing.assert_array_equal(net.params[: ref.num_params], ref.params)
    # live views: a LayerNorm bias of the last hidden layer moves Q
    x = np.ones(4, dtype=np.float32)
    before = net.forward(x)
    net.norm_biases[-1][:] += 5.0
    assert not np.allclose(net.forward(x), before)
    assert "layer_norm=True" in repr(net)
    assert QNetwork(sizes).norm_gains == []


def test_constructor_rejects_bad_layer_norm():
    with pytest.raises(ValueError, match="layer_norm must be True or False, got 'yes'"):
        QNetwork((4, 8, 2), layer_norm="yes")
    for sizes in [(4, 2), (4, 1, 2), (4, 8, 1, 2)]:
        with pytest.raises(ValueError, match="layer_norm needs hidden layers of width >= 2"):
            QNetwork(sizes, layer_norm=True)


def test_layout_names_each_architecture_exactly():
    """The parameter count tells the four architectures apart, also where
    dueling's extra (n_hid + 1) is close to LayerNorm's (2 * sum(hidden))."""
    for sizes in [(3, 2, 2), (3, 1, 2), (3, 2, 3, 2), (4, 64, 64, 2)]:
        for dueling in DUEL:
            for layer_norm in DUEL if min(sizes[1:-1]) >= 2 else [False]:
                net = QNetwork(sizes, dueling=dueling, layer_norm=layer_norm)
                v_off, ln_off = mlp.layout(net.num_params, net.sizes_array)
                assert (v_off >= 0, ln_off >= 0) == (dueling, layer_norm), (sizes, dueling)


@pytest.mark.parametrize("dueling, layer_norm", ARCHS, ids=ARCH_IDS)
@pytest.mark.parametrize("sizes", [(4, 64, 2), (4, 64, 64, 2), (5, 32, 16, 8, 3)])
def test_forward_matches_numpy_reference(sizes, dueling, layer_norm):
    net = QNetwork(sizes, seed=1, dueling=dueling, layer_norm=layer_norm)
    randomize_norms(net, 2)
    x = np.random.default_rng(0).standard_normal((33, sizes[0])).astype(np.float32)
    expected = naive.network_forward(net.params, sizes, dueling, layer_norm, x)
    q = net.forward(x)
    assert q.shape == (33, sizes[-1]) and q.dtype == np.float32
    np.testing.assert_allclose(q, expected, rtol=1e-5, atol=1e-5)
    for i in (0, 7, 32):
        np.testing.assert_allclose(net.forward(x[i]), expected[i], rtol=1e-5, atol=1e-5)
        assert net.greedy_action(x[i]) == int(np.argmax(expected[i]))
    np.testing.assert_array_equal(net.greedy_actions(x), np.argmax(expected, axis=1))


# -- gradients -----------------------------------------------------------------


@pytest.mark.parametrize("dueling, layer_norm", ARCHS, ids=ARCH_IDS)
@pytest.mark.parametrize("sizes", SIZES, ids=IDS)
@pytest.mark.parametrize("double", [False, True], ids=["dqn", "double"])
def test_backprop_matches_finite_differences(sizes, dueling, layer_norm, double):
    net = QNetwork(sizes, seed=11, dueling=dueling, layer_norm=layer_norm)
    target = QNetwork(sizes, seed=12, dueling=dueling, layer_norm=layer_norm)
    randomize_norms(net, 1)
    randomize_norms(target, 2)
    batch = helpers.make_batch(sizes, batch=12, seed=5, dtype=np.float64)
    gamma, delta = 0.9, 0.5  # some residuals on each side of the Huber kink
    flat, t_flat = net.params.astype(np.float64), target.params.astype(np.float64)
    n = flat.size
    state = nw.NetState(flat, t_flat, net.sizes_array, np.zeros(n), np.zeros(n), np.zeros(n),
                        np.zeros(1, np.int64))  # fmt: skip
    hp = nw.update_settings(1e-3, delta, double, None)
    per = nw.PerSample(np.empty(0), np.empty(0))
    loss = learn.loss_and_grads(state, Batch(*batch, gamma * batch[4]), per, hp)

    def fn(p):
        return naive.network_dqn_loss(p, t_flat, sizes, dueling, layer_norm, batch, gamma,
                                      delta, double)  # fmt: skip

    assert loss == pytest.approx(fn(flat), rel=1e-12)
    fd = naive.finite_difference_grad(fn, flat.copy())
    np.testing.assert_allclose(state.grads, fd, rtol=1e-5, atol=1e-8)
    # not vacuous: both dueling heads, and every LayerNorm gain and bias, get a gradient
    ws, bs, g_gains, g_betas = naive.network_unflatten(state.grads, sizes, dueling, layer_norm)
    if dueling:
        assert np.abs(ws[-1]).max() > 1e-3 and np.abs(ws[-2]).max() > 1e-3
        assert abs(bs[-1][0]) > 1e-3
    for g in (*g_gains, *g_betas):
        assert np.abs(g).max() > 1e-4


# -- the whole update against torch ---------------------------------------------


@pytest.mark.parametrize("dueling, layer_norm", ARCHS, ids=ARCH_IDS)
@pytest.mark.parametrize("sizes", [(4, 32, 2), (4, 32, 32, 2), (5, 24, 16, 8, 3)], ids=IDS)
def test_update_matches_torch_over_five_adam_steps(sizes, dueling, layer_norm):
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        """Linear (-> LayerNorm) -> ReLU per hidden layer, then the plain or dueling head."""

        def __init__(self, q: QNetwork) -> None:
            super().__init__()
            self.trunk, self.norms, self.heads = helpers.torch_layers(torch, q)

        def forward(self, x):
            for lin, norm in zip(self.trunk, self.norms):
                x = torch.relu(norm(lin(x)))
            if len(self.heads) == 1:
                return self.heads[0](x)
            a = self.heads[0](x)
            return self.heads[1](x) + a - a.mean(dim=1, keepdim=True)

    net = QNetwork(sizes, seed=0, dueling=dueling, layer_norm=layer_norm)
    target = QNetwork(sizes, seed=1, dueling=dueling, layer_norm=layer_norm)
    randomize_norms(target, 3)
    t_net, t_target = Net(net), Net(target)
    for loss, t_loss in helpers.torch_and_ours(torch, t_net, t_target, net, target):
        assert loss == pytest.approx(t_loss, rel=1e-5)
    lins = [*t_net.trunk, *t_net.heads]
    assert len(lins) == len(net.weights)
    for i, lin in enumerate(lins):
        np.testing.assert_allclose(net.weights[i], lin.weight.detach().numpy().T,
                                   rtol=1e-5, atol=1e-6)  # fmt: skip
        np.testing.assert_allclose(net.biases[i], lin.bias.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert len(net.norm_gains) == (len(sizes) - 2 if layer_norm else 0)
    for i, (gain, bias) in enumerate(zip(net.norm_gains, net.norm_biases)):
        norm = t_net.norms[i]
        np.testing.assert_allclose(gain, norm.weight.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(bias, norm.bias.detach().numpy(), rtol=1e-5, atol=1e-6)
        assert np.abs(gain - 1.0).max() > 1e-4  # trained, not left at 1
    assert net.adam_step == 5


# -- state: copy, sync, pickle, state_dict ---------------------------------------


@pytest.mark.parametrize("dueling", DUEL, ids=DUEL_IDS)
def test_copy_sync_pickle_and_state_dict_keep_the_norms(dueling):
    sizes = (4, 16, 8, 3)
    net = QNetwork(sizes, seed=0, dueling=dueling, layer_norm=True)
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    net.update(helpers.make_batch(sizes, batch=32), net.copy(), UpdateOptions(gamma=0.99, learning_rate=1e-2, max_grad_norm=1.0))  # fmt: skip
    assert np.abs(net.norm_gains[0] - 1.0).max() > 0  # trained
    for other in (pickle.loads(pickle.dumps(net)), net.copy()):
        assert other.layer_norm and other.dueling == dueling and other.adam_step == 1
        np.testing.assert_array_equal(other.params, net.params)
        np.testing.assert_array_equal(other.forward(x), net.forward(x))
        other.norm_gains[0][0] += 1.0  # its own storage, views rebuilt
        assert net.norm_gains[0][0] != other.norm_gains[0][0]
    fresh = QNetwork(sizes, seed=5, dueling=dueling, layer_norm=True)
    state = net.state_dict()
    assert bool(state["layer_norm"]) and state["layer_norm"].dtype == np.bool_
    assert sorted(k for k in state if k.startswith("ln_")) == ["ln_b0", "ln_b1", "ln_g0", "ln_g1"]
    fresh.load_state_dict(state)
    np.testing.assert_array_equal(fresh.params, net.params)
    np.testing.assert_array_equal(fresh.state_dict()["adam_v"], net.state_dict()["adam_v"])
    synced = QNetwork(sizes, seed=6, dueling=dueling, layer_norm=True)
    synced.copy_from(net)
    np.testing.assert_array_equal(synced.params, net.params)
    soft = QNetwork(sizes, seed=6, dueling=dueling, layer_norm=True)
    expected = 0.25 * net.params + 0.75 * soft.params
    soft.soft_update_from(net, 0.25)
    np.testing.assert_allclose(soft.params, expected, rtol=1e-6)


# -- agent, checkpoints, policy, ONNX ------------------------------------------------

AGENT_CONFIG = CARTPOLE_AGENT.replace(
    layer_norm=True, learning_rate_end=1e-4, learning_rate_decay_steps=1_500
)


@pytest.fixture(scope="module")
def trained():
    """A LayerNorm agent (dueling too) trained by the fused loop, and the same by Python."""
    config = AGENT_CONFIG.replace(dueling=True)
    fused, python = cartpole_trainer(config), cartpole_trainer(config, fused=False)
    losses = helpers.train_both_loops(fused, python)
    return fused, python, losses


def test_agent_trains_on_both_loops_identically(trained):
    fused, python, losses = trained
    agent = fused.agent
    assert agent.online.layer_norm and agent.target.layer_norm and agent.online.dueling
    assert agent.n_updates > 1_000 and np.isfinite(losses).all()
    assert helpers.agent_state(fused.agent) == helpers.agent_state(python.agent)
    assert np.abs(agent.online.norm_gains[0] - 1.0).max() > 1e-3  # the gains are trained
    # the target's LayerNorm parameters are views of its parameters, synced with the rest
    assert np.shares_memory(agent.target.norm_gains[1], agent.target.params)
    assert np.abs(agent.target.norm_gains[1] - 1.0).max() > 1e-4


def test_config_field_cli_and_setter():
    from ember_np.training.setup import parse_sets

    assert DqnConfig().layer_norm is False
    assert DqnConfig(**parse_sets(["layer_norm=true"])).layer_norm is True
    assert DqnConfig.from_dict(AGENT_CONFIG.to_dict()) == AGENT_CONFIG
    with pytest.raises(ValueError, match="layer_norm must be True or False, got 1"):
        DqnConfig(layer_norm=1)
    with pytest.raises(ValueError, match="layer_norm=True needs hidden layers"):
        DqnConfig(hidden_sizes=(), layer_norm=True)
    with pytest.raises(ValueError, match="layer_norm=True needs hidden layers"):
        DqnConfig(hidden_sizes=(8, 1), layer_norm=True)
    agent = DqnAgent.for_env(gym.make("CartPole-v1"), AGENT_CONFIG)
    with pytest.raises(ValueError, match="config.layer_norm=False does not match the network"):
        agent.config = agent.config.replace(layer_norm=False)


def test_exact_resume_with_layer_norm_and_annealing(trained, tmp_path):
    a = cartpole_trainer(AGENT_CONFIG)
    a.train(700)
    original = a.agent
    # 1,000 more steps: through the end of the learning-rate decay
    restored = helpers.check_exact_resume(original, tmp_path / "a.npz", 1_000)
    assert restored.online.layer_norm and restored.target.layer_norm
    assert original.total_steps == restored.total_steps == 1_700


def test_checkpoint_error_both_ways_and_old_files_load_without(tmp_path):
    normed = cartpole_trainer(AGENT_CONFIG).agent
    plain = cartpole_trainer(AGENT_CONFIG.replace(layer_norm=False)).agent
    n_path = normed.save(tmp_path / "normed.npz")
    p_path = plain.save(tmp_path / "plain.npz")
    before = plain.online.params.copy()
    with pytest.raises(CheckpointError, match=r"this agent's network is without LayerNorm.*"
                                              r"checkpoint's is with LayerNorm"):  # fmt: skip
        plain.load(n_path)
    np.testing.assert_array_equal(plain.online.params, before)
    with pytest.raises(CheckpointError, match=r"is with LayerNorm.*checkpoint's is without"):
        normed.load(p_path)
    with np.load(p_path) as z:  # a file from before LayerNorm: no online/layer_norm
        arrays = {k: z[k] for k in z.files if k != "online/layer_norm"}
    old = tmp_path / "old.npz"
    np.savez(old, **arrays)
    assert not DqnPolicy.load(old).layer_norm
    with pytest.raises(CheckpointError, match="checkpoint's is without LayerNorm"):
        normed.load(old)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_policy_parity_on_both_backends(trained, tmp_path, backend):
    agent = trained[0].agent
    path = agent.save(tmp_path / "agent.npz")
    policy = DqnPolicy.load(path, backend=backend)
    assert policy.layer_norm and policy.dueling and policy.backend == backend
    x = np.random.default_rng(0).standard_normal((50, 4)).astype(np.float32)
    expected = naive.network_forward(agent.online.params, agent.online.layer_sizes, True, True, x)
    np.testing.assert_allclose(policy.q_values_batch(x), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(policy.q_values(x[3]), expected[3], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(policy.act_batch(x), agent.online.greedy_actions(x))
    assert [policy.act(row) for row in x[:10]] == [agent.act(row) for row in x[:10]]
    assert policy.act(x[0]) == agent.into_policy().act(x[0])
    again = pickle.loads(pickle.dumps(policy))
    assert again.layer_norm
    np.testing.assert_array_equal(again.q_values_batch(x), policy.q_values_batch(x))


@pytest.mark.parametrize("dueling", DUEL, ids=DUEL_IDS)
def test_onnx_export_matches_onnxruntime(tmp_path, dueling):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from ember_np.export import export_onnx

    config = AGENT_CONFIG.replace(dueling=dueling, hidden_sizes=(16, 8))
    agent = cartpole_trainer(config).agent
    randomize_norms(agent.online, 4)
    policy = agent.into_policy()
    path = tmp_path / "model.onnx"
    meta = export_onnx(agent.save(tmp_path / "agent.npz"), path)
    assert meta["layer_norm"] == "true" and meta["dueling"] == json.dumps(dueling)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((40, 4)).astype(np.float32)
    (q,) = session.run(["q_values"], {"obs": x})
    np.testing.assert_allclose(q, policy.q_values_batch(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.argmax(q, axis=1), policy.act_batch(x))
    import onnx

    model = onnx.load(str(path))
    # one LayerNorm per hidden layer, computed as forward.py's NumPy pass (no
    # LayerNormalization op: it squares in float32, which overflows from |z| ~ 1.8e19)
    assert sorted(n.name for n in model.graph.node if n.name.startswith("layer_norm")) == [
        "layer_norm0", "layer_norm1",
    ]  # fmt: skip
    assert not any(n.op_type == "LayerNormalization" for n in model.graph.node)
    assert max(o.version for o in model.opset_import if o.domain == "") >= 17


# -- the float32 extremes (issue 23) -------------------------------------------------------------


def extreme_inputs(scale, n=200, seed=0):
    """Observations of magnitude ``scale``: random signs and factors in [0.5, 1], one
    coordinate of each row at full scale and the others up to 1/8 of it (so that
    x @ W0 stays below float32's 3.4e38 even for scale 3e38)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.5, 1.0, (n, 4)) * rng.choice([-1.0, 1.0], (n, 4)) * scale
    x[:, 1:] /= 8.0
    return x.astype(np.float32)


EXTREMES = [1e19, 1e30, 3e38, 1e-38, 1e-44, 1.0]
EXTREME_IDS = ["1e19", "1e30", "3e38", "1e-38", "denormal", "ordinary"]


@pytest.fixture(scope="module")
def rainbow_net():
    """The CartPole rainbow preset's network (4, 64, 64, 2), dueling and LayerNorm."""
    net = QNetwork((4, 64, 64, 2), seed=5, dueling=True, layer_norm=True)
    randomize_norms(net, 6)
    return net


@pytest.mark.parametrize("scale", EXTREMES, ids=EXTREME_IDS)
def test_every_backend_agrees_with_float64_at_the_float32_extremes(rainbow_net, scale):
    """Within the policy's ``max_abs_obs`` (1e19, 1e30, 1e-38, denormals) every backend
    matches float64; at 3e38, beyond it, every backend refuses every row (the training
    forward, which sums LayerNorm in float64, still matches)."""
    from ember_np import IndexActionMapper, VecEncoder

    net = rainbow_net
    x = extreme_inputs(scale)
    expected = naive.network_forward(net.params, net.layer_sizes, True, True, x)
    assert np.isfinite(expected).all()
    tol = dict(rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(net.forward(x), expected, **tol)  # the training forward
    policies = [DqnPolicy(net.layer_sizes, net.params.copy(), VecEncoder(4), IndexActionMapper(2),
                          backend, dueling=True, layer_norm=True)
                for backend in ("numpy", "numba")]  # fmt: skip
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from ember_np.export import onnx_greedy_actions, policy_to_onnx

    model = policy_to_onnx(policies[0])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    limit = policies[0].max_abs_obs
    assert policies[1].max_abs_obs == limit
    within = np.abs(x).max(axis=1) <= limit
    if scale == 3e38:  # beyond the limit: one error everywhere, never NaN or a wrong value
        assert not within.any()
        beyond = re.escape(f"beyond {limit:.6g}, the largest this network computes")
        for policy in policies:
            for call in (policy.act, policy.q_values):
                with pytest.raises(ValueError, match=rf"obs=.*{beyond}"):
                    call(x[0])
            for call in (policy.act_batch, policy.q_values_batch):
                with pytest.raises(ValueError, match=rf"obs_batch\[0\]=.*{beyond}"):
                    call(x)
        with pytest.raises(ValueError, match=rf"obs\[0\]=.*{beyond}"):
            onnx_greedy_actions(session, x)
        return
    assert within.all()
    actions = net.greedy_actions(x)
    np.testing.assert_array_equal(actions, np.argmax(expected, axis=1))
    for policy in policies:
        q = policy.q_values_batch(x)
        assert np.isfinite(q).all()
        np.testing.assert_allclose(q, expected, **tol)
        np.testing.assert_array_equal(policy.act_batch(x), actions)
        assert [policy.act(row) for row in x[:20]] == actions[:20].tolist()
        np.testing.assert_allclose(policy.q_values(x[0]), expected[0], **tol)
    (q,) = session.run(["q_values"], {"obs": x})
    assert np.isfinite(q).all()
    np.testing.assert_allclose(q, expected, **tol)
    np.testing.assert_array_equal(np.argmax(q, axis=1), actions)
    np.testing.assert_array_equal(onnx_greedy_actions(session, x), actions)
    np.testing.assert_allclose(q, policies[0].q_values_batch(x), rtol=2e-6, atol=2e-6)


def test_a_row_of_equal_huge_values_normalises_to_zero_everywhere(rainbow_net):
    """z all equal and huge: var 0 and eps / s^2 underflowing in float32; xhat is 0."""
    net = QNetwork((2, 4, 2), seed=1, layer_norm=True)
    net.weights[0][...] = 1.0
    net.biases[0][...] = 0.0
    randomize_norms(net, 2)
    x = np.array([[3e38, 0.0], [1e36, 0.0], [1e30, 0.0], [0.0, 0.0]], np.float32)
    expected = naive.network_forward(net.params, net.layer_sizes, False, True, x)
    assert np.isfinite(expected).all()
    np.testing.assert_allclose(net.forward(x), expected, rtol=1e-5, atol=1e-5)
    for backend in ("numpy", "numba"):
        policy = net_policy(net, backend)
        assert 1e36 < policy.max_abs_obs < 3e38  # the policies refuse the first row
        with pytest.raises(ValueError, match=r"obs_batch\[0\].*beyond"):
            policy.q_values_batch(x)
        np.testing.assert_allclose(policy.q_values_batch(x[1:]), expected[1:], rtol=1e-5,
                                   atol=1e-5)  # fmt: skip


def net_policy(net, backend):
    from ember_np import IndexActionMapper, VecEncoder

    return DqnPolicy(net.layer_sizes, net.params.copy(), VecEncoder(net.layer_sizes[0]),
                     IndexActionMapper(net.layer_sizes[-1]), backend, dueling=net.dueling,
                     layer_norm=net.layer_norm)  # fmt: skip
