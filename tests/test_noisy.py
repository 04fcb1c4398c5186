"""Noisy networks (Fortunato et al. 2018, factorised Gaussian noise): the config and
the network's layout, the noise (Box-Muller normals, f, the perturbed weights) against
tests/naive.py's references, the loss and its gradient w.r.t. the means and the sigmas
against finite differences in float64 (plain, C51 and QR heads, with dueling,
LayerNorm and double DQN), the float32 update against a reference Adam (and torch,
skipped without it); then the agent: both loops bit for bit, determinism, exact
resume, exploring with noise (epsilon 0), greedy actions, DqnPolicy (both backends)
and ONNX on the mean weights, and checkpoints that refuse the other kind.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

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
    DqnTrainer,
    QNetwork,
    UpdateOptions,
)
from ember_np.dqn.heads.head import DistributionalHead
from ember_np.dqn.learner import learn
from ember_np.dqn.learner import network as nw
from ember_np.dqn.learner.noisy import (
    noise_size,
    noisy_layer_table,
    noisy_net_state,
    perturb,
    sample_noise,
)  # fmt: skip
from ember_np.rng import Rng
from ember_np.types import Batch

C51 = DistributionalHead("c51", 5, -3.0, 4.0)
QR = DistributionalHead("qr", 5)
HEADS = [None, C51, QR]
HEAD_IDS = ["q", "c51", "qr"]
ARCHS = [(False, False), (True, False), (False, True), (True, True)]
ARCH_IDS = ["plain", "dueling", "layer_norm", "dueling+layer_norm"]
SIZES = (3, 6, 5, 3)

# One pytest-xdist worker runs this module: its tests compile the same noisy-network
# kernels (float64 for the gradients, float32 for the agents), which two workers
# would otherwise each compile from an empty cache at once, neither yet cached.
pytestmark = pytest.mark.xdist_group("noisy")


def atoms_of(head):
    return 1 if head is None else head.n_atoms


def make_net(head, dueling, layer_norm, seed, sizes=SIZES):
    """A noisy network with random LayerNorm parameters and random sigmas (each distinct)."""
    net = QNetwork(sizes, seed=seed, dueling=dueling, layer_norm=layer_norm, head=head,
                   noisy=True)  # fmt: skip
    rng = np.random.default_rng(seed + 100)
    for g, b in zip(net.norm_gains, net.norm_biases):
        g[...] = rng.uniform(0.5, 1.5, g.size)
        b[...] = rng.uniform(-0.3, 0.3, b.size)
    for w, b in zip(net.sigma_weights, net.sigma_biases):
        w[...] = rng.uniform(0.05, 0.6, w.shape)
        b[...] = rng.uniform(0.05, 0.6, b.shape)
    if head is not None:
        net.mean_params[...] *= np.float32(2.0)  # wider logits
    return net


def table(net):
    return noisy_layer_table(net.layer_sizes, atoms_of(net.head), net.dueling)


# -- config, construction, layout ---------------------------------------------------


def test_config_fields_and_errors():
    assert DqnConfig().noisy is False and DqnConfig().noisy_sigma0 == 0.5
    cfg = DqnConfig(noisy=True, noisy_sigma0=0.1, epsilon_start=0.0, epsilon_end=0.0)
    assert DqnConfig.from_dict(cfg.to_dict()) == cfg
    assert DqnConfig(noisy=True, distributional="c51", dueling=True, layer_norm=True).noisy
    for kw, msg in [
        ({"noisy": "yes"}, "noisy must be True or False, got 'yes'"),
        ({"noisy": 1}, "noisy must be True or False, got 1"),
        ({"noisy_sigma0": 0.0}, "noisy_sigma0 must be a positive finite number"),
        ({"noisy_sigma0": -0.5}, "noisy_sigma0 must be a positive finite number"),
        ({"noisy_sigma0": float("nan")}, "noisy_sigma0 must be a positive finite number"),
        ({"noisy_sigma0": float("inf")}, "noisy_sigma0 must be a positive finite number"),
        ({"noisy_sigma0": "0.5"}, "noisy_sigma0 must be a positive finite number"),
    ]:
        with pytest.raises(ValueError, match=msg):
            DqnConfig(**kw)
    with pytest.raises(ValueError, match="noisy must be True or False"):
        QNetwork(SIZES, noisy="yes")
    with pytest.raises(ValueError, match="sigma0"):
        QNetwork(SIZES, noisy=True, sigma0=0.0)


@pytest.mark.parametrize("head", HEADS, ids=HEAD_IDS)
@pytest.mark.parametrize("dueling, layer_norm", ARCHS, ids=ARCH_IDS)
def test_layout_and_initialisation(head, dueling, layer_norm):
    """The means are the plain network's, bit for bit (same seed, same draws); a
    sigma of sigma0 / sqrt(fan_in) follows for every linear-layer parameter."""
    plain = QNetwork(SIZES, seed=4, dueling=dueling, layer_norm=layer_norm, head=head)
    noisy = QNetwork(SIZES, seed=4, dueling=dueling, layer_norm=layer_norm, head=head,
                     noisy=True, sigma0=0.3)  # fmt: skip
    assert noisy.noisy and not plain.noisy and plain.mean_params is plain.params
    np.testing.assert_array_equal(noisy.mean_params, plain.params)
    assert np.shares_memory(noisy.mean_params, noisy.params)
    n_lin = sum(w.size + b.size for w, b in zip(plain.weights, plain.biases))
    assert noisy.num_params == plain.num_params + n_lin
    assert [w.shape for w in noisy.sigma_weights] == [w.shape for w in plain.weights]
    assert [b.shape for b in noisy.sigma_biases] == [b.shape for b in plain.biases]
    sigmas = []
    for w, b in zip(noisy.sigma_weights, noisy.sigma_biases):
        np.testing.assert_array_equal(w, np.float32(0.3 / np.sqrt(w.shape[0])))
        np.testing.assert_array_equal(b, np.float32(0.3 / np.sqrt(w.shape[0])))
        sigmas += [w.ravel(), b]
    np.testing.assert_array_equal(noisy.params[plain.num_params :], np.concatenate(sigmas))
    assert "noisy=True" in repr(noisy)
    x = np.random.default_rng(0).standard_normal((9, 3)).astype(np.float32)
    np.testing.assert_array_equal(noisy.forward(x), plain.forward(x))  # inference: the means


def test_state_dict_copy_and_pickle_keep_the_sigmas():
    import pickle

    net = make_net(C51, True, True, seed=3)
    state = net.state_dict()
    assert bool(state["noisy"]) and "sw0" in state and "sb3" in state
    assert "noisy" not in QNetwork(SIZES).state_dict()  # plain states unchanged
    for other in (net.copy(), pickle.loads(pickle.dumps(net))):
        assert other.noisy
        np.testing.assert_array_equal(other.params, net.params)
    with pytest.raises(ValueError, match="this network is without noisy layers, the state is "
                                         "with noisy layers"):  # fmt: skip
        QNetwork(SIZES, dueling=True, layer_norm=True, head=C51).load_state_dict(state)
    with pytest.raises(ValueError, match="network architectures differ: this one is with noisy"):
        net.copy_from(QNetwork(SIZES, dueling=True, layer_norm=True, head=C51))


# -- the noise -----------------------------------------------------------------------


def test_normals_are_the_polar_method_on_the_streams_uniforms():
    for n in (1, 6, 7, 300):
        np.testing.assert_array_equal(
            naive.noisy_f(Rng(5).normal(n)), naive.noisy_sample(Rng(5), n)
        )
    a, b = Rng(5), Rng(5)
    a.normal(300)
    naive.noisy_sample(b, 300)  # the same draws, rejected pairs included
    assert a.state.tolist() == b.state.tolist()
    z = Rng(9).normal(200_000)
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1.0) < 0.01
    assert abs(np.mean(z**4) - 3.0) < 0.05  # a normal's kurtosis, not a uniform's 1.8
    assert abs(np.mean(np.abs(z) < 1.0) - 0.6827) < 0.005


@pytest.mark.parametrize("head", HEADS, ids=HEAD_IDS)
@pytest.mark.parametrize("dueling, layer_norm", ARCHS, ids=ARCH_IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sample_and_perturb_match_reference(head, dueling, layer_norm, dtype):
    net = make_net(head, dueling, layer_norm, seed=7)
    layers = table(net)
    n = noise_size(layers)
    assert n == sum(n_in + n_out for n_in, n_out in naive.noisy_shapes(net))
    eps = np.empty(n, dtype)
    rng = Rng(11)
    sample_noise(rng.state, eps)
    ref_rng = Rng(11)
    np.testing.assert_allclose(eps, naive.noisy_sample(ref_rng, n), rtol=1e-7)
    assert rng.state.tolist() == ref_rng.state.tolist()
    full = net.params.astype(dtype)
    out = np.full(net.mean_params.size, np.nan, dtype)
    perturb(full, eps, layers, out)
    ref = naive.noisy_perturb(full.astype(np.float64), naive.noisy_shapes(net), eps)
    tol = 1e-6 if dtype == np.float32 else 1e-15  # (float32: with cancellation near 0)
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol / 10)
    assert not np.allclose(out, net.mean_params, atol=1e-3)  # the noise did something


# -- the loss and its gradient -------------------------------------------------------


def case(head, dueling, layer_norm, seed=5, batch_size=12):
    """Noisy networks, a float64 batch with n-step discounts (some 0), and for a
    distributional head importance weights and next-state action masks."""
    net = make_net(head, dueling, layer_norm, seed=11)
    target = make_net(head, dueling, layer_norm, seed=12)
    rng = np.random.default_rng(seed)
    batch = helpers.make_batch(SIZES, batch=batch_size, seed=seed, dtype=np.float64)
    if head is None:  # naive.network_dqn_loss's target: gamma * mask
        return net, target, batch, 0.9 * batch[4], None, np.ones((batch_size, 3), bool)
    discounts = np.where(batch[4] > 0, 0.9 ** rng.integers(1, 4, batch_size), 0.0)
    weights = rng.uniform(0.2, 1.0, batch_size)
    legal = rng.random((batch_size, 3)) < 0.6
    legal[np.arange(batch_size), rng.integers(0, 3, batch_size)] = True
    return net, target, batch, discounts, weights, legal


def noisy_state64(net, target, flat=None):
    flat = net.params.astype(np.float64) if flat is None else flat
    n = flat.size
    state = nw.net_state(flat, target.params.astype(np.float64), net.sizes_array, np.zeros(n),
                         np.zeros(n), np.zeros(n), np.zeros(1, np.int64), net.head is not None)  # fmt: skip
    return noisy_net_state(state, net.mean_params.size, table(net), Rng(0).state)


def kernel_loss(net, target, batch, discounts, weights, legal, double, eps, flat=None):
    """The kernels' float64 loss and gradient (means and sigmas) under the noise ``eps``
    (online, target)."""
    state = noisy_state64(net, target, flat)
    state.noise[0], state.noise[1] = eps
    w = np.empty(0) if weights is None else weights
    data = Batch(*batch, discounts, np.empty(0), np.empty(0, np.int64),
                 np.packbits(legal, axis=1))  # fmt: skip
    loss = learn.loss_and_grads(state, data, nw.PerSample(w, np.empty(0)),
                             nw.update_settings(1e-3, 1.0, double, None))  # fmt: skip
    return loss, state.grads


def reference_loss(net, flat, t_flat, batch, discounts, weights, legal, double, eps):
    shapes = naive.noisy_shapes(net)
    p, t = naive.noisy_perturb(flat, shapes, eps[0]), naive.noisy_perturb(t_flat, shapes, eps[1])
    sizes, duel, norm, head = net.layer_sizes, net.dueling, net.layer_norm, net.head
    if head is None:
        return naive.network_dqn_loss(p, t, sizes, duel, norm, batch, 0.9, 1.0, double)
    dist = (head.kind, head.n_atoms, head.v_min, head.v_max)
    return naive.dist_loss(p, t, sizes, duel, norm, dist, batch, discounts, double, weights,
                           legal, 1.0)[0]  # fmt: skip


@pytest.mark.parametrize("double", [False, True], ids=["dqn", "double"])
@pytest.mark.parametrize("dueling, layer_norm", ARCHS, ids=ARCH_IDS)
@pytest.mark.parametrize("head", HEADS, ids=HEAD_IDS)
def test_backprop_matches_finite_differences(head, dueling, layer_norm, double):
    """d loss / d mu and d loss / d sigma of the kernels against finite differences
    of the reference loss of the perturbed weights, in float64."""
    net, target, batch, discounts, weights, legal = case(head, dueling, layer_norm)
    n = noise_size(table(net))
    eps = (naive.noisy_sample(Rng(1), n), naive.noisy_sample(Rng(2), n))
    flat, t_flat = net.params.astype(np.float64), target.params.astype(np.float64)
    loss, grads = kernel_loss(net, target, batch, discounts, weights, legal, double, eps)
    args = (batch, discounts, weights, legal, double, eps)
    assert loss == pytest.approx(reference_loss(net, flat, t_flat, *args), rel=1e-12)
    fd = naive.finite_difference_grad(lambda p: reference_loss(net, p, t_flat, *args), flat.copy())
    np.testing.assert_allclose(grads, fd, rtol=1e-5, atol=1e-8)
    # not vacuous: every layer's sigmas get a gradient, and it is not the means' own
    n_base = net.mean_params.size
    off = n_base
    for w, b in zip(net.sigma_weights, net.sigma_biases):
        assert np.abs(grads[off : off + w.size]).max() > 1e-6
        off += w.size
        assert np.abs(grads[off : off + b.size]).max() > 1e-6
        off += b.size
    assert not np.allclose(grads[n_base : 2 * n_base], grads[: min(n_base, grads.size - n_base)])


def test_noise_changes_the_loss_and_zero_sigmas_give_the_plain_network():
    net, target, batch, discounts, weights, legal = case(C51, True, True)
    n = noise_size(table(net))
    eps = (naive.noisy_sample(Rng(1), n), naive.noisy_sample(Rng(2), n))
    other = (naive.noisy_sample(Rng(3), n), eps[1])
    args = (net, target, batch, discounts, weights, legal, True)
    assert kernel_loss(*args, eps)[0] != pytest.approx(kernel_loss(*args, other)[0], rel=1e-6)
    n_base = net.mean_params.size
    flat = net.params.astype(np.float64)
    flat[n_base:] = 0.0
    loss0, grads0 = kernel_loss(*args, eps, flat=flat)
    plain = QNetwork(SIZES, dueling=True, layer_norm=True, head=C51)
    t_eff = np.empty(n_base)
    perturb(target.params.astype(np.float64), eps[1], table(net), t_eff)  # (checked above)
    state = nw.net_state(flat[:n_base].copy(), t_eff, plain.sizes_array, np.zeros(n_base),
                         np.zeros(0), np.zeros(0), np.zeros(1, np.int64), True)  # fmt: skip
    data = Batch(*batch, discounts, np.empty(0), np.empty(0, np.int64), np.packbits(legal, axis=1))
    loss = learn.loss_and_grads(state, data, nw.PerSample(weights, np.empty(0)),
                             nw.update_settings(1e-3, 1.0, True, None))  # fmt: skip
    assert loss0 == loss
    np.testing.assert_array_equal(grads0[:n_base], state.grads)


# -- the float32 update --------------------------------------------------------------


@pytest.mark.parametrize("head", HEADS, ids=HEAD_IDS)
def test_update_matches_float64_gradient_and_reference_adam(head):
    """Five QNetwork.update steps (float32, double DQN, clipping) against the float64
    gradient (checked above) under the noise a reference draws from a copy of the
    stream (the online network's sample, then the target's), clipping and naive.Adam."""
    net, target, batch, discounts, weights, legal = case(head, True, True, batch_size=32)
    layers = table(net)
    n = noise_size(layers)
    ref = net.params.astype(np.float64)
    adam = naive.Adam(ref.size, lr=1e-2)
    rng, ref_rng = Rng(21), Rng(21)
    options = UpdateOptions(gamma=0.9, learning_rate=1e-2, huber_delta=1.0, double_dqn=True,
                            max_grad_norm=0.5)  # fmt: skip
    f32 = [a if a.dtype == np.int64 else a.astype(np.float32) for a in batch]
    w32 = None if weights is None else weights.astype(np.float32)
    masks = None if head is None else legal
    for _ in range(5):
        eps = (naive.noisy_sample(ref_rng, n), naive.noisy_sample(ref_rng, n))
        loss64, g = kernel_loss(net, target, batch, discounts, weights, legal, True, eps,
                                flat=ref.copy())  # fmt: skip
        data = Batch(*f32, discounts.astype(np.float32), *(() if w32 is None else (w32,)))
        loss = net.update(data, target, options, next_action_masks=masks, noise_rng=rng)
        assert loss == pytest.approx(loss64, rel=2e-4)
        ref = adam.step(ref, naive.clip_grad_norm(g, 0.5))
        np.testing.assert_allclose(net.params, ref, rtol=2e-4, atol=2e-6)
        assert rng.state.tolist() == ref_rng.state.tolist()  # two samples per update
    sigmas = net.params[net.mean_params.size :]
    assert not np.allclose(sigmas, make_net(head, True, True, seed=11).params[sigmas.size * 0 +
                           net.mean_params.size :])  # fmt: skip
    with pytest.raises(ValueError, match="noisy network draws new noise for every update"):
        net.update(data, target, options, next_action_masks=masks)


def torch_noisy_net(torch, net):
    """``net`` (a plain-head noisy dueling network) as torch parameters: per layer
    (mu_W, mu_b, sigma_W, sigma_b), float64, requiring grad."""
    out = []
    for w, b, sw, sb in zip(net.weights, net.biases, net.sigma_weights, net.sigma_biases):
        out.append([torch.tensor(a.astype(np.float64), requires_grad=True) for a in (w, b, sw, sb)])
    return out


def torch_forward(torch, layers, eps, x, n_hidden):
    """The paper's noisy forward pass in torch (dueling head), ``eps`` f-transformed factors."""
    e = 0
    weights = []
    for mu_w, mu_b, s_w, s_b in layers:
        n_in, n_out = mu_w.shape
        e_in = torch.from_numpy(eps[e : e + n_in])
        e_out = torch.from_numpy(eps[e + n_in : e + n_in + n_out])
        weights.append((mu_w + s_w * torch.outer(e_in, e_out), mu_b + s_b * e_out))
        e += n_in + n_out
    h = x
    for w, b in weights[:n_hidden]:
        h = torch.relu(h @ w + b)
    a = h @ weights[-2][0] + weights[-2][1]
    return h @ weights[-1][0] + weights[-1][1] + a - a.mean(dim=1, keepdim=True)


def test_update_matches_torch_over_five_adam_steps():
    """Five double-DQN updates of a noisy dueling network (Adam, clipping) against
    torch's autograd through the paper's noisy layers, fed the same noise."""
    torch = pytest.importorskip("torch")
    sizes = (4, 32, 32, 2)
    net = QNetwork(sizes, seed=1, dueling=True, noisy=True)
    target = QNetwork(sizes, seed=2, dueling=True, noisy=True)
    layers = torch_noisy_net(torch, net)
    t_layers = torch_noisy_net(torch, target)
    opt = torch.optim.Adam([p for layer in layers for p in layer], lr=1e-3)
    n = noise_size(table(net))
    rng, ref_rng = Rng(8), Rng(8)
    for step in range(5):
        obs, actions, rewards, next_obs, masks = helpers.make_batch(sizes, batch=64, seed=step)
        eps_on, eps_t = naive.noisy_sample(ref_rng, n), naive.noisy_sample(ref_rng, n)
        x, nx = torch.from_numpy(obs.astype(np.float64)), torch.from_numpy(next_obs.astype(float))
        with torch.no_grad():
            best = torch_forward(torch, layers, eps_on, nx, 2).argmax(dim=1)
            q_next = torch_forward(torch, t_layers, eps_t, nx, 2).gather(1, best[:, None])[:, 0]
            y = torch.from_numpy(rewards.astype(float)) + 0.99 * torch.from_numpy(
                masks.astype(float)) * q_next  # fmt: skip
        q = torch_forward(torch, layers, eps_on, x, 2).gather(
            1, torch.from_numpy(actions)[:, None])[:, 0]  # fmt: skip
        t_loss = torch.nn.functional.smooth_l1_loss(q, y)
        opt.zero_grad()
        t_loss.backward()
        torch.nn.utils.clip_grad_norm_([p for layer in layers for p in layer], 0.5)
        opt.step()
        loss = net.update(Batch(obs, actions, rewards, next_obs, masks), target,
                          UpdateOptions(gamma=0.99, learning_rate=1e-3, double_dqn=True,
                                        max_grad_norm=0.5), noise_rng=rng)  # fmt: skip
        assert loss == pytest.approx(t_loss.item(), rel=1e-5)
    for (w, b, sw, sb), mine in zip(layers, zip(net.weights, net.biases, net.sigma_weights,
                                                net.sigma_biases)):  # fmt: skip
        for t, ours in zip((w, b, sw, sb), mine):
            np.testing.assert_allclose(ours, t.detach().numpy(), rtol=1e-5, atol=1e-6)


# -- the agent -----------------------------------------------------------------------

# noisy exploration alone (no epsilon), with DqnConfig's own epsilon schedule length
AGENT_CONFIG = CARTPOLE_AGENT.replace(
    epsilon_start=0.0, epsilon_end=0.0, epsilon_decay_steps=DqnConfig().epsilon_decay_steps,
    noisy=True,
)  # fmt: skip
RAINBOW = dict(dueling=True, layer_norm=True, double_dqn=True, n_step=3, prioritized_replay=True)
VARIANTS = {"q": {}, "c51+rainbow": dict(distributional="c51", n_atoms=21, v_min=0.0,
                                        v_max=60.0, **RAINBOW)}  # fmt: skip


@pytest.fixture(scope="module", params=list(VARIANTS))
def trained(request):
    """The same noisy agent trained by the fused loop and by the Python loop."""
    config = AGENT_CONFIG.replace(**VARIANTS[request.param])
    fused, python = cartpole_trainer(config), cartpole_trainer(config, fused=False)
    assert fused.fused and not python.fused
    for _ in range(3):
        fused.train(300)
        python.train(300)
    return request.param, fused, python


def test_both_loops_train_identically(trained):
    _, fused, python = trained
    agent = fused.agent
    assert agent.online.noisy and agent.n_updates > 700 and np.isfinite(agent.last_loss)
    assert helpers.saved_state(fused.agent) == helpers.saved_state(python.agent)
    # the sigmas learned (all began at 0.5 / sqrt(fan_in) per layer) and the target has them
    init = QNetwork(agent.online.layer_sizes, dueling=agent.online.dueling, noisy=True,
                    layer_norm=agent.online.layer_norm, head=agent.online.head)  # fmt: skip
    n_base = agent.online.mean_params.size
    moved = agent.online.params[n_base:] != init.params[n_base:]
    assert moved.mean() > 0.5
    np.testing.assert_array_equal(
        agent.target.params[n_base:] != init.params[n_base:],
        agent.target.params[n_base:] != init.params[n_base:],
    )


def test_two_runs_are_identical():
    config = AGENT_CONFIG.replace(**VARIANTS["c51+rainbow"])
    a, b = cartpole_trainer(config, seed=4), cartpole_trainer(config, seed=4)
    a.train(400)
    b.train(400)
    assert helpers.saved_state(a.agent) == helpers.saved_state(b.agent)
    c = cartpole_trainer(config, seed=5)
    c.train(400)
    assert helpers.saved_state(c.agent) != helpers.saved_state(a.agent)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_exact_resume(tmp_path, variant):
    a = cartpole_trainer(AGENT_CONFIG.replace(**VARIANTS[variant]))
    a.train(500)
    restored = helpers.check_exact_resume(a.agent, tmp_path / "a.npz", 300, helpers.saved_state)
    assert restored.online.noisy and restored.total_steps == a.agent.total_steps == 800


def test_exploring_acts_on_new_noise_greedy_on_the_means(trained):
    """With epsilon 0, each exploring action is the argmax of the means perturbed by a
    new sample from the exploration stream; act() and act_batch() use the means."""
    import copy

    agent = copy.deepcopy(trained[1].agent)
    net = agent.online
    for w, b in zip(net.sigma_weights, net.sigma_biases):  # wider noise: actions that change
        w *= np.float32(10.0)
        b *= np.float32(10.0)
    assert agent.epsilon == 0.0
    x = np.random.default_rng(3).normal(0.0, 1.0, (60, 4)).astype(np.float32)
    mean_q = naive.network_forward(net.mean_params, net.layer_sizes, net.dueling,
                                   net.layer_norm, x) if net.head is None else None  # fmt: skip
    greedy = [agent.act(row) for row in x]
    np.testing.assert_array_equal(greedy, net.greedy_actions(x))
    np.testing.assert_array_equal(agent.act_batch(x), greedy)
    if mean_q is not None:
        np.testing.assert_array_equal(greedy, mean_q.argmax(axis=1))
    n = noise_size(table(net))
    explored = []
    for row in x:
        ref = Rng.from_state(agent.exploration_rng.state.copy())
        eps = naive.noisy_sample(ref, n)
        explored.append(agent.act_epsilon_greedy(row))
        assert agent.exploration_rng.state.tolist() == ref.state.tolist()
        if net.head is None:
            p = naive.noisy_perturb(net.params.astype(np.float64), naive.noisy_shapes(net), eps)
            q = naive.network_forward(p, net.layer_sizes, net.dueling, net.layer_norm, row)
            if abs(q[0] - q[1]) > 1e-4:
                assert explored[-1] == int(q.argmax())
    assert explored != greedy  # the noise changed some actions
    before = agent.exploration_rng.state.copy()
    agent.act_epsilon_greedy_batch(x[:5])
    assert agent.exploration_rng.state.tolist() != before.tolist()  # one sample for the batch


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_policy_uses_the_means(trained, tmp_path, backend):
    agent = trained[1].agent
    net = agent.online
    path = agent.save(tmp_path / "agent.npz")
    policy = DqnPolicy.load(path, backend=backend)
    x = np.random.default_rng(0).normal(0.0, 1.5, (200, 4)).astype(np.float32)
    plain = QNetwork(net.layer_sizes, dueling=net.dueling, layer_norm=net.layer_norm,
                     head=net.head)  # fmt: skip
    plain.params[...] = net.mean_params
    expected = plain.forward(x)
    for p in (policy, agent.into_policy()):
        np.testing.assert_array_equal(p.params, net.mean_params)
        np.testing.assert_allclose(p.q_values_batch(x), expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(p.act_batch(x), net.greedy_actions(x))
        assert [p.act(row) for row in x[:20]] == [agent.act(row) for row in x[:20]]
    if net.head is None:
        ref = naive.network_forward(net.mean_params, net.layer_sizes, net.dueling,
                                    net.layer_norm, x)  # fmt: skip
        np.testing.assert_allclose(expected, ref, rtol=1e-5, atol=1e-5)


def test_numpy_policy_of_a_noisy_agent_never_imports_numba(trained, tmp_path):
    path = trained[1].agent.save(tmp_path / "agent.npz")
    code = textwrap.dedent(f"""
        import sys
        import numpy as np
        from ember_np.policy import DqnPolicy
        policy = DqnPolicy.load({str(path)!r}, backend="numpy")
        policy.q_values_batch(np.zeros((3, 4), np.float32))
        print("numba" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    assert out.stdout.split() == ["False"]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_onnx_export_uses_the_means(tmp_path, variant):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from ember_np.export import export_onnx

    agent = cartpole_trainer(AGENT_CONFIG.replace(**VARIANTS[variant])).agent
    agent.online.params[...] *= np.float32(2.0)
    path = tmp_path / "model.onnx"
    export_onnx(agent.save(tmp_path / "agent.npz"), path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((40, 4)).astype(np.float32)
    q = session.run(["q_values"], {"obs": x})[0]
    np.testing.assert_allclose(q, agent.online.forward(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.argmax(q, axis=1), agent.into_policy().act_batch(x))


def test_checkpoints_record_noisy_layers_and_refuse_the_other_kind(tmp_path):
    noisy = cartpole_trainer(AGENT_CONFIG).agent
    plain = cartpole_trainer(AGENT_CONFIG.replace(noisy=False)).agent
    paths = {"noisy": noisy.save(tmp_path / "n.npz"), "plain": plain.save(tmp_path / "p.npz")}
    for mine, agent, theirs in (("without", plain, "noisy"), ("with", noisy, "plain")):
        before = agent.online.params.copy()
        other = "with" if mine == "without" else "without"
        with pytest.raises(CheckpointError, match=f"this agent's network is {mine} noisy layers, "
                                                  f"the checkpoint's is {other} noisy layers"):  # fmt: skip
            agent.load(paths[theirs])
        np.testing.assert_array_equal(agent.online.params, before)
    with np.load(paths["noisy"]) as z:
        assert bool(z["online/noisy"]) and "target/sw2" in z.files and "online/sb0" in z.files
    with np.load(paths["plain"]) as z:
        assert not any("noisy" in k or "/sw" in k or "/sb" in k for k in z.files)
    assert DqnAgent.from_checkpoint(paths["noisy"]).online.noisy
    with pytest.raises(ValueError, match="config.noisy=False does not match the network, which "
                                         "is with noisy layers"):  # fmt: skip
        noisy.config = noisy.config.replace(noisy=False)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_several_native_envs_train_identically_in_both_loops(variant):
    """N envs: the fused vector loop and the Python one (agent_vec_step: one acting
    sample per vector step for the greedy rows) give the same agent. (With a C51 head
    this once failed: act_batch_explore read n_actions from the end of ``sizes``.)"""
    from ember_np.envs import NativeVecEnv

    config = AGENT_CONFIG.replace(epsilon_start=0.3, epsilon_end=0.1, **VARIANTS[variant])
    agents = []
    for fused in (True, False):
        env = NativeVecEnv("CartPole-v1", 3)
        agent = DqnAgent.for_env(env, config)
        trainer = DqnTrainer(env, agent, seed=2, eval_env=gym.make("ember_np/CartPole-v1"),
                             fused=fused)  # fmt: skip
        assert trainer.fused == fused
        trainer.train(900)
        agents.append(agent)
    assert agents[0].n_updates > 500
    assert helpers.saved_state(agents[0]) == helpers.saved_state(agents[1])


def test_ablation_turns_noisy_off_with_epsilon_greedy_instead():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from ablation import NOISY_OFF_EPSILON, variants

    labels = dict(variants(AGENT_CONFIG))
    assert labels["noisy off"] == {"noisy": False, **NOISY_OFF_EPSILON}
    explores = dict(variants(AGENT_CONFIG.replace(epsilon_start=1.0, epsilon_end=0.05)))
    assert explores["noisy off"] == {"noisy": False}
    assert "noisy off" not in dict(variants(AGENT_CONFIG.replace(noisy=False)))
