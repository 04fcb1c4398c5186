"""Distributional value heads, C51 and QR-DQN: the compiled forward pass, loss and
backprop against tests/naive.py's references (finite differences in float64, for
every combination of head, dueling, LayerNorm and double DQN, with importance
weights, n-step discounts and action masks), C51's projection against a slow
reference, the float32 update against the float64 gradient and a reference Adam,
five Adam steps against torch (skipped without torch), and the network's state.

The agent (both loops, resume, checkpoints, learning), DqnPolicy and ONNX export
of these heads are tests/test_distributional_agent.py's.
"""

from __future__ import annotations

import pickle
import re

import helpers
import naive
import numpy as np
import pytest

from ember_np import DqnConfig, QNetwork, UpdateOptions
from ember_np.dqn.heads.head import DistributionalHead
from ember_np.dqn.learner import learn
from ember_np.dqn.learner import network as nw
from ember_np.dqn.learner.distributional import c51_project
from ember_np.nn import mlp
from ember_np.nn.backprop import head_backward
from ember_np.nn.softmax import exp_into
from ember_np.types import Batch

C51 = DistributionalHead("c51", 5, -3.0, 4.0)
QR = DistributionalHead("qr", 5)
HEADS = [C51, QR]
HEAD_IDS = ["c51", "qr"]
ARCHS = [(False, False), (True, False), (False, True), (True, True)]
ARCH_IDS = ["plain", "dueling", "layer_norm", "dueling+layer_norm"]

# One pytest-xdist worker runs this module and tests/test_distributional_agent.py: they
# compile the same C51 and QR kernels, which two workers would otherwise each compile
# from an empty cache at once, neither yet cached.
pytestmark = pytest.mark.xdist_group("distributional")


def as_tuple(head):
    return (head.kind, head.n_atoms, head.v_min, head.v_max)


def randomize_norms(net, seed):
    rng = np.random.default_rng(seed)
    for g, b in zip(net.norm_gains, net.norm_biases):
        g[...] = rng.uniform(0.5, 1.5, g.size)
        b[...] = rng.uniform(-0.3, 0.3, b.size)


def make_net(sizes, head, dueling, layer_norm, seed, scale=1.0):
    net = QNetwork(sizes, seed=seed, dueling=dueling, layer_norm=layer_norm, head=head)
    randomize_norms(net, seed + 100)
    net.params[...] *= np.float32(scale)  # wider logits: peaked distributions
    return net


# -- config, construction, layout ---------------------------------------------------


def test_config_fields_and_errors():
    assert DqnConfig().head is None
    assert DqnConfig(distributional="c51", n_atoms=11, v_min=0, v_max=100).head == (
        DistributionalHead("c51", 11, 0.0, 100.0))  # fmt: skip
    assert DqnConfig(distributional="qr", n_quantiles=7).head == DistributionalHead("qr", 7)
    cfg = DqnConfig(distributional="c51")
    assert DqnConfig.from_dict(cfg.to_dict()) == cfg
    for kw, msg in [
        ({"distributional": "iqn"}, "distributional must be None, 'c51' or 'qr', got 'iqn'"),
        ({"n_atoms": 1}, r"n_atoms must be an integer in \[2, 2\*\*20\], got 1"),
        ({"n_quantiles": 0}, r"n_quantiles must be an integer in \[1, 2\*\*20\], got 0"),
        ({"v_min": 10.0}, "v_min must be < v_max"),
        ({"v_max": float("inf")}, "v_max must be a finite number, got inf"),
        ({"n_atoms": 2.5}, "n_atoms must be an integer"),
    ]:
        with pytest.raises(ValueError, match=msg):
            DqnConfig(**kw)


@pytest.mark.parametrize(
    "v_min, v_max, n_atoms",
    [(0.0, 1e-45, 51), (1e7, 1e7 + 1, 51), (0.0, 1e-36, 2**20), (-1e30, -1e30 + 1e23, 11)],
)
def test_a_support_float32_cannot_resolve_is_refused_at_config_time(v_min, v_max, n_atoms):
    """Every atom a distinct float32, the spacing a normal float32 (else every Q is 0,
    or atoms merge); the message names v_min, v_max, n_atoms and the fix."""
    dz = (v_max - v_min) / (n_atoms - 1)
    z32 = (v_min + np.arange(n_atoms) * dz).astype(np.float32)
    assert dz < np.finfo(np.float32).tiny or not (np.diff(z32) > 0).all()  # truly degenerate
    kwargs = dict(distributional="c51", v_min=v_min, v_max=v_max, n_atoms=n_atoms)
    named = re.escape(f"C51's support v_min {v_min!r} to v_max {v_max!r} in n_atoms {n_atoms} "
                      "has atoms float32 cannot tell apart")  # fmt: skip
    with pytest.raises(ValueError, match=named + ".*fewer n_atoms"):
        DqnConfig(**kwargs)
    with pytest.raises(ValueError, match="float32 cannot tell apart"):
        DistributionalHead("c51", n_atoms, v_min, v_max)


@pytest.mark.parametrize(
    "v_min, v_max, n_atoms",
    [(-10.0, 10.0, 51), (1e7, 1e7 + 64, 51), (-1e30, 1e30, 2**20), (0.0, 1e-30, 51)],
)
def test_a_support_float32_resolves_is_accepted(v_min, v_max, n_atoms):
    head = DistributionalHead("c51", n_atoms, v_min, v_max)
    assert (np.diff(head.support()) > 0).all()


@pytest.mark.parametrize("head", HEADS, ids=HEAD_IDS)
def test_layout_views_and_init(head):
    sizes = (4, 16, 8, 3)
    n = head.n_atoms
    net = QNetwork(sizes, seed=3, head=head)
    assert [w.shape for w in net.weights] == [(4, 16), (16, 8), (8, 3 * n)]
    duel = QNetwork(sizes, seed=3, dueling=True, layer_norm=True, head=head)
    assert [w.shape for w in duel.weights] == [(4, 16), (16, 8), (8, 3 * n), (8, n)]
    assert [b.shape for b in duel.biases] == [(16,), (8,), (3 * n,), (n,)]
    assert duel.num_params == net.num_params + 9 * n + 2 * 24
    for w in net.weights:  # torch.nn.Linear's init bound
        assert np.abs(w).max() <= 1 / np.sqrt(w.shape[0])
    assert net.head == head and net.n_actions == 3 and net.layer_sizes == sizes
    assert "head=DistributionalHead(kind=" in repr(net)
    with pytest.raises(ValueError, match="head must be None or a DistributionalHead"):
        QNetwork(sizes, head="c51")


def test_layout_names_the_architecture_where_the_parameter_count_cannot():
    """Hidden (3, 3) and 3 atoms: a dueling value head ((3 + 1) * 3 = 12 values) is
    as long as LayerNorm's (2 * 6): the head's description in sizes decides."""
    for dueling, layer_norm in ARCHS:
        net = QNetwork((2, 3, 3, 2), dueling=dueling, layer_norm=layer_norm,
                       head=DistributionalHead("qr", 3))  # fmt: skip
        v_off, ln_off = mlp.layout(net.num_params, net.sizes_array)
        assert (v_off >= 0, ln_off >= 0) == (dueling, layer_norm)


# -- forward -------------------------------------------------------------------------


@pytest.mark.parametrize("dueling, layer_norm", ARCHS, ids=ARCH_IDS)
@pytest.mark.parametrize("head", HEADS, ids=HEAD_IDS)
def test_forward_and_distribution_match_numpy_reference(head, dueling, layer_norm):
    sizes = (4, 32, 16, 3)
    net = make_net(sizes, head, dueling, layer_norm, seed=1, scale=3.0)
    x = np.random.default_rng(0).standard_normal((33, 4)).astype(np.float32)
    out = naive.dist_outputs(net.params, sizes, dueling, layer_norm, head.n_atoms, x)
    expected = naive.dist_expected(as_tuple(head), out)
    q = net.forward(x)
    assert q.shape == (33, 3) and q.dtype == np.float32
    np.testing.assert_allclose(q, expected, rtol=1e-5, atol=1e-5)
    dist = net.distribution(x)
    want = np.exp(naive.log_softmax(out)) if head.kind == "c51" else out
    atol = 1e-6 * max(1.0, np.abs(want).max())  # float32 sums of outputs ~10
    np.testing.assert_allclose(dist, want, rtol=1e-5, atol=atol)
    for i in (0, 7, 32):
        np.testing.assert_allclose(net.forward(x[i]), expected[i], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(net.distribution(x[i]), want[i], rtol=1e-5, atol=atol)
        assert net.greedy_action(x[i]) == int(np.argmax(expected[i]))
    np.testing.assert_array_equal(net.greedy_actions(x), np.argmax(expected, axis=1))
    assert np.ptp(np.argmax(expected, axis=1)) > 0  # the actions differ: not vacuous
    with pytest.raises(ValueError, match="row 5"):
        net.distribution(np.where(np.arange(33)[:, None] == 5, np.nan, x))


def test_plain_network_has_no_distribution():
    with pytest.raises(ValueError, match="needs a distributional head"):
        QNetwork((2, 4, 2)).distribution(np.zeros(2))


# -- C51's projection ----------------------------------------------------------------


def test_c51_projection_matches_slow_reference():
    rng = np.random.default_rng(0)
    # inside, below, above and at the support; discount 0 (terminal), 1, n-step
    # (the kernel carries the two atoms being filled while b_j rises with j: a
    # negative discount, which no buffer writes, makes it fall, and must still add up)
    rewards = [0.3, -7.0, 9.0, -2.0, 3.0, 0.5, 1.25, 0.0, 0.4, -0.2, 1.0]
    discounts = [0.99, 0.99, 0.5, 0.0, 0.0, 0.0, 0.97**3, 1.0, 0.1, -0.5, -2.0]
    parts = np.empty((3, 11))  # the kernel's scratch
    for r, d in zip(rewards, discounts):
        p = rng.dirichlet(np.ones(11))
        m = np.empty(11)
        c51_project(p, r, d, -2.0, 3.0, m, parts)
        np.testing.assert_allclose(m, naive.c51_project(p, r, d, -2.0, 3.0), atol=1e-12)
        assert m.sum() == pytest.approx(1.0, abs=1e-12) and m.min() >= 0.0
        if d == 0.0:  # terminal: all the mass at the clipped reward's two atoms
            z = np.clip(r, -2.0, 3.0)
            assert m @ np.linspace(-2.0, 3.0, 11) == pytest.approx(z, abs=1e-12)
            assert np.count_nonzero(m) <= 2
    m = np.empty(11)
    c51_project(np.full(11, 1 / 11), 100.0, 0.9, -2.0, 3.0, m, parts)  # far above: all at v_max
    np.testing.assert_allclose(m, np.eye(11)[-1], atol=1e-12)
    c51_project(np.full(11, 1 / 11), -100.0, 0.9, -2.0, 3.0, m, parts)
    np.testing.assert_allclose(m, np.eye(11)[0], atol=1e-12)


# -- kernels of the loss and the backward pass -----------------------------------------


def test_vectorised_exp_matches_numpy():
    x = np.concatenate([np.linspace(-87.0, 88.0, 100_001, dtype=np.float32),
                        np.float32([0.0, -1e-8, 1e-8, -0.5, 0.5])])  # fmt: skip
    out = np.empty_like(x)
    exp_into(x, out)
    np.testing.assert_allclose(out, np.exp(x.astype(np.float64)), rtol=4e-7)
    below = np.float32([-87.0, -88.0, -1e4, -np.inf])
    exp_into(below, out[:4])
    np.testing.assert_array_equal(out[:4], np.full(4, out[0]))  # clamped at exp(-87)
    assert out[0] == pytest.approx(np.exp(-87.0), rel=4e-7)


@pytest.mark.parametrize("n_actions", [1, 2, 3])
def test_output_layer_backward_by_action_equals_dense(n_actions):
    """head_backward's grouped products (rows of dQ nonzero at one action's atoms,
    taken action by action) against the dense ones and NumPy, with an action no
    row took (n_actions 3) and an all-zero row."""
    rng = np.random.default_rng(n_actions)
    batch, n_in, atoms = 9, 6, 5
    n_out = n_actions * atoms
    actions = rng.integers(0, min(n_actions, 2), batch).astype(np.int64)
    dq = np.zeros((batch, n_out), np.float32)
    for i, a in enumerate(actions):
        dq[i, a * atoms : (a + 1) * atoms] = rng.standard_normal(atoms)
    dq[3] = 0.0
    h = np.maximum(rng.standard_normal((batch, n_in)), 0.0).astype(np.float32)
    w = rng.standard_normal((n_in, n_out)).astype(np.float32)
    want_gw, want_gb = h.T @ dq, dq.sum(axis=0)
    want_delta = np.where(h > 0.0, dq @ w.T, 0.0)
    for given in (actions, actions[:0]):
        gw, gb, delta = (np.full(a.shape, np.nan, np.float32) for a in (w, want_gb, h))
        params = grads = np.empty(0, np.float32)
        head_backward(params, grads, -1, atoms, h, dq, given, w, gw, gb, delta, True)
        np.testing.assert_allclose(gw, want_gw, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gb, want_gb, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(delta, want_delta, rtol=1e-5, atol=1e-6)


# -- gradients -----------------------------------------------------------------------


def dist_case(head, dueling, layer_norm, seed=5, batch_size=12):
    """Networks, a float64 batch with n-step discounts (some 0), importance weights
    and next-state action masks."""
    sizes = (3, 6, 5, 3)
    net = make_net(sizes, head, dueling, layer_norm, seed=11, scale=2.0)
    target = make_net(sizes, head, dueling, layer_norm, seed=12, scale=2.0)
    rng = np.random.default_rng(seed)
    batch = helpers.make_batch(sizes, batch=batch_size, seed=seed, dtype=np.float64)
    batch[2][:] *= 2.0  # rewards outside C51's support too
    discounts = np.where(batch[4] > 0, 0.9 ** rng.integers(1, 4, batch_size), 0.0)
    weights = rng.uniform(0.2, 1.0, batch_size)
    legal = rng.random((batch_size, 3)) < 0.6
    legal[np.arange(batch_size), rng.integers(0, 3, batch_size)] = True
    return sizes, net, target, batch, discounts, weights, legal


def kernel_loss(net, target, batch, discounts, weights, legal, double, kappa):
    """The kernels' float64 loss, gradient and priorities."""
    flat = net.params.astype(np.float64)
    n = flat.size
    state = nw.net_state(flat, target.params.astype(np.float64), net.sizes_array, np.zeros(n),
                         np.zeros(n), np.zeros(n), np.zeros(1, np.int64), True)  # fmt: skip
    empty = np.empty(0)
    data = Batch(*batch, discounts, empty, np.empty(0, np.int64), np.packbits(legal, axis=1))
    prio = np.empty(len(discounts))
    loss = learn.loss_and_grads(state, data, nw.PerSample(weights, prio),
                             nw.update_settings(1e-3, kappa, double, None))  # fmt: skip
    return loss, state.grads, prio


@pytest.mark.parametrize("double", [False, True], ids=["dqn", "double"])
@pytest.mark.parametrize("dueling, layer_norm", ARCHS, ids=ARCH_IDS)
@pytest.mark.parametrize("head", HEADS, ids=HEAD_IDS)
def test_backprop_matches_finite_differences(head, dueling, layer_norm, double):
    sizes, net, target, batch, discounts, weights, legal = dist_case(head, dueling, layer_norm)
    kappa = 0.7  # QR: quantile pairs on each side of the Huber kink
    loss, grads, prio = kernel_loss(net, target, batch, discounts, weights, legal, double, kappa)
    t_flat = target.params.astype(np.float64)

    def fn(p):
        return naive.dist_loss(p, t_flat, sizes, dueling, layer_norm, as_tuple(head), batch,
                               discounts, double, weights, legal, kappa)[0]  # fmt: skip

    flat = net.params.astype(np.float64)
    ref_loss, ref_prio = naive.dist_loss(flat, t_flat, sizes, dueling, layer_norm,
                                         as_tuple(head), batch, discounts, double, weights,
                                         legal, kappa)  # fmt: skip
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    np.testing.assert_allclose(prio, ref_prio, rtol=1e-12)
    fd = naive.finite_difference_grad(fn, flat.copy())
    np.testing.assert_allclose(grads, fd, rtol=1e-5, atol=1e-8)
    # not vacuous: every output unit, both dueling heads, every LayerNorm parameter
    ws, bs, gains, betas = naive.dist_unflatten(grads, sizes, dueling, layer_norm, head.n_atoms)
    assert (np.abs(ws[2]).max(axis=0) > 1e-6).all() and np.abs(bs[2]).max() > 1e-3
    if dueling:
        assert np.abs(ws[-1]).max() > 1e-3 and np.abs(bs[-1]).min() > 0
    for g in (*gains, *betas):
        assert np.abs(g).max() > 1e-5


@pytest.mark.parametrize("head", HEADS, ids=HEAD_IDS)
def test_masks_and_double_dqn_change_the_target(head):
    """The bootstrap action obeys the next states' masks and, for double DQN, the
    online network's expected values (else the loss would not move)."""
    sizes, net, target, batch, discounts, weights, legal = dist_case(head, True, False)
    everything = np.ones_like(legal)
    losses = {(double, masked): kernel_loss(net, target, batch, discounts, weights,
                                            legal if masked else everything, double, 1.0)[0]
              for double in (False, True) for masked in (False, True)}  # fmt: skip
    assert len({round(v, 12) for v in losses.values()}) == 4


# -- the float32 update --------------------------------------------------------------


@pytest.mark.parametrize("dueling, layer_norm", ARCHS, ids=ARCH_IDS)
@pytest.mark.parametrize("head", HEADS, ids=HEAD_IDS)
def test_update_matches_float64_gradient_and_reference_adam(head, dueling, layer_norm):
    """Five QNetwork.update steps (float32, clipping, weights, priorities out) against
    the float64 gradient (checked above) and tests/naive.py's Adam."""
    sizes, net, target, batch, discounts, weights, legal = dist_case(head, dueling, layer_norm,
                                                                     batch_size=32)  # fmt: skip
    ref = net.params.astype(np.float64)
    adam = naive.Adam(ref.size, lr=1e-2)
    options = UpdateOptions(gamma=0.9, learning_rate=1e-2, huber_delta=1.0, double_dqn=True,
                            max_grad_norm=0.5)  # fmt: skip
    f32 = [a if a.dtype == np.int64 else a.astype(np.float32) for a in batch]
    for _ in range(5):
        ref_net = make_net(sizes, head, dueling, layer_norm, seed=11)
        ref_net.params[...] = ref
        loss64, g, prio64 = kernel_loss(ref_net, target, batch, discounts, weights, legal,
                                        True, 1.0)  # fmt: skip
        prio = np.empty(32, np.float32)
        loss = net.update(Batch(*f32, discounts.astype(np.float32), weights.astype(np.float32)),
                          target, options, td_errors_out=prio,
                          next_action_masks=legal)  # fmt: skip
        assert loss == pytest.approx(loss64, rel=2e-4)
        np.testing.assert_allclose(prio, prio64, rtol=2e-4, atol=1e-5)
        ref = adam.step(ref, naive.clip_grad_norm(g, 0.5))
        np.testing.assert_allclose(net.params, ref, rtol=1e-3, atol=2e-5)
    assert net.adam_step == 5


# -- torch ---------------------------------------------------------------------------


def torch_module(torch, q: QNetwork):
    """The same network in torch: Linear (-> LayerNorm) -> ReLU, then the head's outputs
    (batch, n_actions, n_atoms), dueling per atom."""

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.trunk, self.norms, self.heads = helpers.torch_layers(torch, q)
            self.n_actions, self.atoms = q.n_actions, q.head.n_atoms

        def forward(self, x):
            for lin, norm in zip(self.trunk, self.norms):
                x = torch.relu(norm(lin(x)))
            a = self.heads[0](x).reshape(-1, self.n_actions, self.atoms)
            if len(self.heads) == 1:
                return a
            return self.heads[1](x)[:, None, :] + a - a.mean(dim=1, keepdim=True)

    return Net()


def torch_loss(torch, head, t_net, t_target, batch, gamma):
    """Double DQN's loss of the head in torch (C51: cross-entropy to the projected
    target; QR: quantile Huber loss, kappa 1), as SB3-contrib and Dopamine write it."""
    obs, actions, rewards, next_obs, masks = (torch.from_numpy(a) for a in batch)
    rows = torch.arange(len(actions))
    n = head.n_atoms
    with torch.no_grad():
        out_next = t_net(next_obs)
        out_t = t_target(next_obs)
        dtype = out_t.dtype
        if head.kind == "c51":
            z = torch.linspace(head.v_min, head.v_max, n, dtype=dtype)
            best = (torch.softmax(out_next, -1) * z).sum(-1).argmax(1)
            p = torch.softmax(out_t[rows, best], -1)
            tz = (rewards[:, None] + gamma * masks[:, None] * z).clamp(head.v_min, head.v_max)
            b = ((tz - head.v_min) / ((head.v_max - head.v_min) / (n - 1))).clamp(0, n - 1)
            lo, hi = b.floor().long(), b.ceil().long()
            m = torch.zeros_like(p)
            m.scatter_add_(1, lo, p * (hi.to(dtype) - b) + p * (lo == hi).to(dtype))
            m.scatter_add_(1, hi, p * (b - lo.to(dtype)))
        else:
            best = out_next.mean(-1).argmax(1)
            target = rewards[:, None] + gamma * masks[:, None] * out_t[rows, best]
    out = t_net(obs)[rows, torch.from_numpy(batch[1])]
    if head.kind == "c51":
        return -(m * torch.log_softmax(out, -1)).sum(-1).mean()
    u = target[:, None, :] - out[:, :, None]
    tau = (torch.arange(n, dtype=out.dtype) + 0.5) / n
    huber = torch.where(u.abs() <= 1, 0.5 * u**2, u.abs() - 0.5)
    below = (u.detach() < 0).to(out.dtype)
    return ((tau[None, :, None] - below).abs() * huber).mean(2).sum(1).mean()


@pytest.mark.parametrize("dueling, layer_norm", ARCHS, ids=ARCH_IDS)
@pytest.mark.parametrize("head", [DistributionalHead("c51", 51, -10.0, 10.0),
                                  DistributionalHead("qr", 50)], ids=HEAD_IDS)  # fmt: skip
def test_update_matches_torch_over_five_adam_steps(head, dueling, layer_norm):
    """Five double-DQN updates (Adam, clipping) against torch, which runs in float64:
    torch's own float32 C51 projection rounds b = (Tz - v_min) / dz differently at
    floor and ceil and ends up ~5e-6 from float64 after five steps, where our
    float32 update (projection in float64) stays within ~1e-7 of it."""
    torch = pytest.importorskip("torch")
    sizes = (4, 32, 32, 3)
    net = make_net(sizes, head, dueling, layer_norm, seed=0)
    target = make_net(sizes, head, dueling, layer_norm, seed=1)
    t_net, t_target = torch_module(torch, net).double(), torch_module(torch, target).double()
    opt = torch.optim.Adam(t_net.parameters(), lr=1e-3)
    options = UpdateOptions(gamma=0.99, learning_rate=1e-3, double_dqn=True, max_grad_norm=0.5)
    for step in range(5):
        batch = helpers.make_batch(sizes, batch=64, seed=step)
        batch[2][:] *= 4.0
        batch64 = [a if a.dtype == np.int64 else a.astype(np.float64) for a in batch]
        t_loss = torch_loss(torch, head, t_net, t_target, batch64, 0.99)
        opt.zero_grad()
        t_loss.backward()
        torch.nn.utils.clip_grad_norm_(t_net.parameters(), 0.5)
        opt.step()
        loss = net.update(Batch(*batch), target, options)
        assert loss == pytest.approx(t_loss.item(), rel=1e-5)
    lins = [*t_net.trunk, *t_net.heads]
    for i, lin in enumerate(lins):
        np.testing.assert_allclose(net.weights[i], lin.weight.detach().numpy().T,
                                   rtol=1e-5, atol=1e-6)  # fmt: skip
        np.testing.assert_allclose(net.biases[i], lin.bias.detach().numpy(), rtol=1e-5, atol=1e-6)


# -- state ---------------------------------------------------------------------------


@pytest.mark.parametrize("head", HEADS, ids=HEAD_IDS)
def test_copy_pickle_state_dict_keep_the_head(head):
    sizes = (4, 8, 3)
    net = QNetwork(sizes, seed=0, dueling=True, head=head)
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    net.update(Batch(*helpers.make_batch(sizes, batch=16)), net.copy(),
               UpdateOptions(gamma=0.99, learning_rate=1e-2))  # fmt: skip
    for other in (net.copy(), pickle.loads(pickle.dumps(net))):
        assert other.head == head and other.adam_step == 1
        np.testing.assert_array_equal(other.forward(x), net.forward(x))
    state = net.state_dict()
    fresh = QNetwork(sizes, seed=5, dueling=True, head=head)
    fresh.load_state_dict(state)
    np.testing.assert_array_equal(fresh.params, net.params)
    other_head = DistributionalHead("c51", 5, -3.0, 5.0) if head.kind == "c51" else None
    for mismatched in (
        QNetwork(sizes, dueling=True, head=other_head),
        QNetwork(sizes, dueling=True, head=DistributionalHead("qr", 6)),
    ):
        with pytest.raises(ValueError, match="architecture mismatch: this network is with a"):
            mismatched.load_state_dict(state)
        with pytest.raises(ValueError, match="network architectures differ"):
            mismatched.copy_from(net)
    plain = QNetwork(sizes, dueling=True).state_dict()
    with pytest.raises(ValueError, match="the state is with a plain Q head"):
        fresh.load_state_dict(plain)
