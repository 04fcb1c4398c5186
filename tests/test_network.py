"""QNetwork: forward, manual backprop, clipping, Adam, target sync, errors."""

from __future__ import annotations

import helpers
import naive
import numpy as np
import pytest

from ember_np import Batch, QNetwork, Rng, UpdateOptions
from ember_np.dqn.learner import learn
from ember_np.dqn.learner import network as nw
from ember_np.nn import optim

make_batch = helpers.make_batch


def flat64(net: QNetwork) -> np.ndarray:
    return net.params.astype(np.float64)


# -- construction and forward --------------------------------------------------


def test_init_like_torch_linear_bounds_and_seed():
    net = QNetwork((4, 64, 64, 2), seed=3)
    for w, b in zip(net.weights, net.biases):
        bound = 1.0 / np.sqrt(w.shape[0])
        assert w.dtype == np.float32 and b.dtype == np.float32
        assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
        # uniform over the whole interval, not a narrow band
        assert np.abs(w).max() > 0.9 * bound
        assert abs(float(w.mean())) < 0.1 * bound
    same = QNetwork((4, 64, 64, 2), seed=3)
    other = QNetwork((4, 64, 64, 2), seed=4)
    assert np.array_equal(net.params, same.params)
    assert not np.array_equal(net.params, other.params)


def test_layer_sizes_and_shapes():
    net = QNetwork([6, 32, 16, 3], seed=0)
    assert net.layer_sizes == (6, 32, 16, 3)
    assert [w.shape for w in net.weights] == [(6, 32), (32, 16), (16, 3)]
    assert [b.shape for b in net.biases] == [(32,), (16,), (3,)]
    assert net.num_params == 6 * 32 + 32 + 32 * 16 + 16 + 16 * 3 + 3


@pytest.mark.parametrize("sizes", [(4, 2), (4, 64, 2), (4, 64, 64, 2), (5, 32, 16, 8, 3)])
def test_forward_matches_numpy_reference(sizes):
    net = QNetwork(sizes, seed=1)
    x = np.random.default_rng(0).standard_normal((33, sizes[0])).astype(np.float32)
    expected = naive.forward(
        [w.astype(np.float64) for w in net.weights], [b.astype(np.float64) for b in net.biases], x
    )
    q = net.forward(x)
    assert q.shape == (33, sizes[-1]) and q.dtype == np.float32
    np.testing.assert_allclose(q, expected, rtol=1e-5, atol=1e-5)
    one = net.forward(x[7])
    assert one.shape == (sizes[-1],)
    np.testing.assert_allclose(one, expected[7], rtol=1e-5, atol=1e-5)
    assert net.greedy_action(x[7]) == int(np.argmax(expected[7]))
    np.testing.assert_array_equal(net.greedy_actions(x), np.argmax(q, axis=1))


def test_weights_are_live_views():
    net = QNetwork((3, 8, 2), seed=0)
    x = np.ones(3, dtype=np.float32)
    before = net.forward(x)
    net.biases[-1][0] += 5.0
    after = net.forward(x)
    assert after[0] == pytest.approx(before[0] + 5.0, abs=1e-5)
    net.weights[0][...] = 0.0
    net.biases[0][...] = 0.0
    # hidden layer all zero -> output is the last bias
    np.testing.assert_allclose(net.forward(x), net.biases[-1])


def test_forward_accepts_lists_and_float64_without_new_specialization():
    net = QNetwork((4, 8, 2), seed=0)
    net.forward(np.zeros((2, 4), dtype=np.float32))
    net.forward(np.zeros(4, dtype=np.float32))
    n_batch = len(nw.q_values_batch_checked.signatures)
    n_one = len(nw.q_values_checked.signatures)
    q64 = net.forward(np.zeros((2, 4), dtype=np.float64))
    q_list = net.forward([0.0, 0.0, 0.0, 0.0])
    q_fortran = net.forward(np.asfortranarray(np.zeros((2, 4))))
    assert q64.dtype == q_list.dtype == q_fortran.dtype == np.float32
    assert len(nw.q_values_batch_checked.signatures) == n_batch
    assert len(nw.q_values_checked.signatures) == n_one


def test_forward_rejects_wrong_shape_with_expected_and_given():
    net = QNetwork((4, 8, 2), seed=0)
    with pytest.raises(
        ValueError, match=r"expected obs of shape \(4,\) or \(batch, 4\), got \(3,\)"
    ):
        net.forward(np.zeros(3))
    with pytest.raises(ValueError, match="convertible to float32"):
        net.forward("not numbers")


@pytest.mark.parametrize("bad", [(), (4,), (4, 0, 2), (4, -1), (4.5, 2), "ab"])
def test_bad_layer_sizes(bad):
    with pytest.raises(ValueError, match="layer_sizes"):
        QNetwork(bad, seed=0)


# -- gradients -----------------------------------------------------------------


def state64(params, target, sizes):
    """A float64 NetState for the kernels (finite differences need float64)."""
    n = params.size
    return nw.NetState(params, target, np.asarray(sizes, dtype=np.int64), np.zeros(n),
                       np.zeros(n), np.zeros(n), np.zeros(1, np.int64))  # fmt: skip


NO_PER_SAMPLE = nw.PerSample(np.empty(0), np.empty(0))


def kernel_loss_and_grads(net, target, batch, gamma, delta, double, per=NO_PER_SAMPLE,
                          discounts=None):  # fmt: skip
    """The kernels' loss and gradient; the batch carries ``discounts`` (default gamma * masks)."""
    arrays = [np.ascontiguousarray(a) for a in batch]
    arrays.append(gamma * arrays[4] if discounts is None else discounts)
    data = Batch(*arrays)
    state = state64(flat64(net), flat64(target), net.layer_sizes)
    hp = nw.update_settings(1e-3, delta, double, None)
    loss = learn.loss_and_grads(state, data, per, hp)
    return loss, state.grads


def reference_loss_fn(net, target, batch, gamma, delta, double):
    sizes = net.layer_sizes
    tw, tb = naive.unflatten(flat64(target), sizes)
    obs, actions, rewards, next_obs, masks = batch

    def fn(flat):
        w, b = naive.unflatten(flat, sizes)
        return naive.dqn_loss(
            w, b, tw, tb, obs, actions, rewards, next_obs, masks, gamma, delta, double
        )

    return fn


@pytest.mark.parametrize(
    "sizes", [(3, 5, 2), (3, 6, 5, 3), (4, 6, 5, 4, 2)], ids=["1 hidden", "2 hidden", "3 hidden"]
)
@pytest.mark.parametrize("double", [False, True], ids=["dqn", "double"])
def test_backprop_matches_finite_differences(sizes, double):
    net = QNetwork(sizes, seed=11)
    target = QNetwork(sizes, seed=12)
    # delta 0.5 so that some residuals are on each side of the Huber kink
    batch = make_batch(sizes, batch=12, seed=5, dtype=np.float64)
    gamma, delta = 0.9, 0.5
    loss, grads = kernel_loss_and_grads(net, target, batch, gamma, delta, double)
    fn = reference_loss_fn(net, target, batch, gamma, delta, double)
    assert loss == pytest.approx(fn(flat64(net)), rel=1e-12)
    fd = naive.finite_difference_grad(fn, flat64(net))
    np.testing.assert_allclose(grads, fd, rtol=1e-5, atol=1e-8)
    assert np.abs(grads).max() > 1e-3  # the check is not vacuous


def test_linear_network_gradient():
    sizes = (3, 2)
    net, target = QNetwork(sizes, seed=1), QNetwork(sizes, seed=2)
    batch = make_batch(sizes, batch=8, seed=1, dtype=np.float64)
    _, grads = kernel_loss_and_grads(net, target, batch, 0.99, 1.0, False)
    fd = naive.finite_difference_grad(
        reference_loss_fn(net, target, batch, 0.99, 1.0, False), flat64(net)
    )
    np.testing.assert_allclose(grads, fd, rtol=1e-5, atol=1e-8)


def test_double_dqn_target_differs_from_plain():
    sizes = (3, 6, 3)
    net, target = QNetwork(sizes, seed=1), QNetwork(sizes, seed=2)
    batch = make_batch(sizes, batch=32, seed=2, dtype=np.float64)
    plain, _ = kernel_loss_and_grads(net, target, batch, 0.99, 1.0, False)
    double, _ = kernel_loss_and_grads(net, target, batch, 0.99, 1.0, True)
    assert plain != double


@pytest.mark.parametrize("max_norm", [0.01, 1e6])
def test_clipping_matches_torch_rule_on_finite_difference_gradient(max_norm):
    sizes = (3, 6, 5, 2)
    net, target = QNetwork(sizes, seed=3), QNetwork(sizes, seed=4)
    batch = make_batch(sizes, batch=10, seed=3, dtype=np.float64)
    _, grads = kernel_loss_and_grads(net, target, batch, 0.99, 1.0, True)
    norm = optim.clip_grad_norm(grads, max_norm)
    fd = naive.finite_difference_grad(
        reference_loss_fn(net, target, batch, 0.99, 1.0, True), flat64(net)
    )
    assert norm == pytest.approx(np.linalg.norm(fd), rel=1e-6)
    np.testing.assert_allclose(grads, naive.clip_grad_norm(fd, max_norm), rtol=1e-5, atol=1e-10)
    if max_norm < norm:
        assert np.linalg.norm(grads) == pytest.approx(max_norm, rel=1e-4)


@pytest.mark.parametrize("residual", [0.3, -0.3, 4.0, -4.0])
def test_huber_loss_both_sides_of_delta(residual):
    """One sample, zero network: Q(s, a) = 0, so the residual is -y = -reward."""
    sizes = (2, 2)
    net, target = QNetwork(sizes, seed=0), QNetwork(sizes, seed=0)
    for p in (net, target):
        p.params[:] = 0.0
    obs = np.ones((1, 2))
    batch = (obs, np.array([1]), np.array([-residual]), obs.copy(), np.zeros(1))
    delta = 1.0
    loss, grads = kernel_loss_and_grads(net, target, batch, 0.99, delta, False)
    expected = (
        0.5 * residual**2 if abs(residual) <= delta else delta * (abs(residual) - 0.5 * delta)
    )
    assert loss == pytest.approx(expected)
    d_q = residual if abs(residual) <= delta else np.sign(residual) * delta
    w, b = naive.unflatten(grads, sizes)
    assert b[0][1] == pytest.approx(d_q)  # dLoss/db for the taken action
    np.testing.assert_allclose(w[0][:, 1], d_q * obs[0])
    assert b[0][0] == 0.0 and not w[0][:, 0].any()


# -- Adam and the full update --------------------------------------------------


def test_adam_matches_reference_over_several_steps():
    rng = np.random.default_rng(0)
    n = 300
    params = rng.standard_normal(n).astype(np.float32)
    m = np.zeros(n, np.float32)
    v = np.zeros(n, np.float32)
    t = np.zeros(1, np.int64)
    ref = naive.Adam(n, lr=1e-2)
    ref_params = params.astype(np.float64)
    g = np.zeros(n, np.float32)
    state = nw.NetState(params, params, np.zeros(2, np.int64), g, m, v, t)
    for _ in range(25):
        g[:] = rng.standard_normal(n).astype(np.float32)
        optim.adam_step(state, 1e-2, optim.ADAM_EPS)
        ref_params = ref.step(ref_params, g.astype(np.float64))
    assert t[0] == 25
    np.testing.assert_allclose(params, ref_params, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(m, ref.m, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(v, ref.v, rtol=1e-5, atol=1e-9)


def test_adam_applies_the_eps_it_is_given():
    # Gradients of 1e-5 make sqrt(v_hat) as small as PPO's eps, so each step
    # depends on eps: 1e-5 roughly halves the step that 1e-8 takes.
    rng = np.random.default_rng(1)
    n = 200
    params = rng.standard_normal(n).astype(np.float32)
    t = np.zeros(1, np.int64)
    g = np.zeros(n, np.float32)
    state = nw.NetState(
        params, params, np.zeros(2, np.int64), g, np.zeros(n, np.float32),
        np.zeros(n, np.float32), t,
    )  # fmt: skip
    ref = naive.Adam(n, lr=1e-2, eps=1e-5)
    other = naive.Adam(n, lr=1e-2, eps=1e-8)
    ref_params = params.astype(np.float64)
    other_params = ref_params.copy()
    for _ in range(10):
        g[:] = (1e-5 * rng.standard_normal(n)).astype(np.float32)
        optim.adam_step(state, 1e-2, 1e-5)
        ref_params = ref.step(ref_params, g.astype(np.float64))
        other_params = other.step(other_params, g.astype(np.float64))
    np.testing.assert_allclose(params, ref_params, rtol=2e-5, atol=2e-6)
    assert np.abs(other_params - ref_params).max() > 1e-2  # the test can tell eps apart


@pytest.mark.parametrize("double", [False, True])
def test_update_equals_reference_step(double):
    """float32 update == float64 reference (FD-checked grads, torch clip rule, Adam)."""
    sizes = (4, 32, 32, 2)
    net = QNetwork(sizes, seed=0)
    target = QNetwork(sizes, seed=1)
    batch = make_batch(sizes, batch=64, seed=9)
    batch64 = tuple(a.astype(np.float64) if a.dtype.kind == "f" else a for a in batch)
    loss_fn = reference_loss_fn(net, target, batch64, 0.99, 1.0, double)
    ref_params = flat64(net)
    ref_adam = naive.Adam(ref_params.size, lr=1e-3)
    for step in range(3):
        expected_loss = loss_fn(ref_params)
        state = state64(ref_params, flat64(target), sizes)
        hp = nw.update_settings(1e-3, 1.0, double, 10.0)
        learn.loss_and_grads(state, Batch(*batch64, 0.99 * batch64[4]), NO_PER_SAMPLE, hp)
        ref_params = ref_adam.step(ref_params, naive.clip_grad_norm(state.grads, 10.0))
        loss = net.update(
            batch,
            target,
            UpdateOptions(gamma=0.99, learning_rate=1e-3, double_dqn=double, max_grad_norm=10.0),
        )
        assert loss == pytest.approx(expected_loss, rel=1e-4), step
    assert net.adam_step == 3
    np.testing.assert_allclose(net.params, ref_params, rtol=1e-4, atol=1e-5)


def test_update_is_deterministic_over_100_steps():
    def run():
        sizes = (4, 64, 64, 2)
        net = QNetwork(sizes, seed=42)
        target = net.copy()
        rng = Rng(7)
        from ember_np import CircularBuffer

        buf = CircularBuffer(500, 4, 2)
        data = np.random.default_rng(1)
        for _ in range(500):
            buf.push(data.standard_normal(4), int(data.integers(2)), float(data.standard_normal()),
                     data.standard_normal(4), int(data.integers(3)))  # fmt: skip
        losses = []
        for i in range(100):
            batch = buf.sample(64, rng)
            losses.append(
                net.update(
                    batch, target, UpdateOptions(gamma=0.99, learning_rate=1e-3, max_grad_norm=10)
                )
            )
            if i % 10 == 0:
                target.copy_from(net)
        return net, losses

    a, la = run()
    b, lb = run()
    assert la == lb
    assert np.array_equal(a.params, b.params)
    sa, sb = a.state_dict(), b.state_dict()
    assert np.array_equal(sa["adam_m"], sb["adam_m"]) and np.array_equal(sa["adam_v"], sb["adam_v"])
    assert not np.array_equal(a.params, QNetwork((4, 64, 64, 2), seed=42).params)


def test_update_reduces_loss_on_a_fixed_batch():
    sizes = (4, 32, 2)
    net = QNetwork(sizes, seed=0)
    target = net.copy()
    batch = make_batch(sizes, batch=32, seed=0)
    first = net.update(batch, target, UpdateOptions(gamma=0.0, learning_rate=1e-2))
    for _ in range(200):
        last = net.update(batch, target, UpdateOptions(gamma=0.0, learning_rate=1e-2))
    assert last < 0.2 * first


def test_update_float64_inputs_do_not_compile_a_second_version():
    sizes = (4, 8, 2)
    net = QNetwork(sizes, seed=0)
    target = net.copy()
    net.update(make_batch(sizes), target, UpdateOptions(gamma=0.9, learning_rate=1e-3))
    n = len(nw.checked_update.signatures)
    obs, actions, rewards, next_obs, masks = make_batch(sizes, dtype=np.float64)
    net.update(Batch(obs, actions.astype(np.int32), rewards, next_obs, masks.tolist()), target, UpdateOptions(gamma=0.9, learning_rate=1e-3, double_dqn=1, max_grad_norm=5))  # fmt: skip
    assert len(nw.checked_update.signatures) == n


def test_update_errors_say_what_was_expected():
    sizes = (4, 8, 2)
    net = QNetwork(sizes, seed=0)
    target = net.copy()
    obs, actions, rewards, next_obs, masks = make_batch(sizes, batch=8)
    before = net.params.copy()
    kw = dict(gamma=0.9, learning_rate=1e-3)
    with pytest.raises(ValueError, match=r"actions must be in \[0, 2\)"):
        net.update(Batch(obs, np.full(8, 2), rewards, next_obs, masks), target, UpdateOptions(**kw))
    with pytest.raises(ValueError, match=r"expected rewards of shape \(8,\), got \(7,\)"):
        net.update(Batch(obs, actions, rewards[:7], next_obs, masks), target, UpdateOptions(**kw))
    with pytest.raises(ValueError, match=r"expected next_obs of shape \(8, 4\)"):
        net.update(Batch(obs, actions, rewards, next_obs[:4], masks), target, UpdateOptions(**kw))
    with pytest.raises(
        ValueError, match=r"expected obs of shape \(4,\) or \(batch, 4\), got \(8, 3\)"
    ):
        net.update(
            Batch(obs[:, :3], actions, rewards, next_obs, masks), target, UpdateOptions(**kw)
        )
    bad = rewards.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        net.update(Batch(obs, actions, bad, next_obs, masks), target, UpdateOptions(**kw))
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\], got 1.5"):
        net.update(
            Batch(obs, actions, rewards, next_obs, masks),
            target,
            UpdateOptions(gamma=1.5, learning_rate=1e-3),
        )
    with pytest.raises(ValueError, match="learning_rate must be a positive"):
        net.update(
            Batch(obs, actions, rewards, next_obs, masks),
            target,
            UpdateOptions(gamma=0.9, learning_rate=0),
        )
    with pytest.raises(ValueError, match="max_grad_norm"):
        net.update(Batch(obs, actions, rewards, next_obs, masks), target,
                   UpdateOptions(**kw, max_grad_norm=-1))  # fmt: skip
    with pytest.raises(ValueError, match=r"layer_sizes \(4, 8, 2\), the other \(4, 9, 2\)"):
        net.update(
            Batch(obs, actions, rewards, next_obs, masks), QNetwork((4, 9, 2)), UpdateOptions(**kw)
        )
    assert np.array_equal(net.params, before)
    assert net.adam_step == 0


# -- target network --------------------------------------------------------------


def test_copy_is_independent_and_copy_from_syncs():
    net = QNetwork((4, 16, 2), seed=0)
    target = net.copy()
    assert np.array_equal(target.params, net.params)
    net.update(make_batch((4, 16, 2)), target, UpdateOptions(gamma=0.9, learning_rate=1e-2))
    assert not np.array_equal(target.params, net.params)
    target.copy_from(net)
    assert np.array_equal(target.params, net.params)
    target.weights[0][0, 0] += 1
    assert target.weights[0][0, 0] != net.weights[0][0, 0]


def test_soft_update_is_polyak_average():
    a = QNetwork((4, 16, 2), seed=0)
    b = QNetwork((4, 16, 2), seed=1)
    expected = 0.1 * b.params.astype(np.float64) + 0.9 * a.params
    a.soft_update_from(b, 0.1)
    np.testing.assert_allclose(a.params, expected, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match=r"tau must be in \(0, 1\]"):
        a.soft_update_from(b, 0.0)


def test_state_dict_round_trip_includes_adam():
    sizes = (4, 16, 2)
    net = QNetwork(sizes, seed=0)
    target = net.copy()
    for _ in range(3):
        net.update(make_batch(sizes), target, UpdateOptions(gamma=0.9, learning_rate=1e-2))
    state = net.state_dict()
    assert set(state) == {
        "layer_sizes",
        "dueling",
        "layer_norm",
        "w0",
        "b0",
        "w1",
        "b1",
        "adam_m",
        "adam_v",
        "adam_t",
    }
    fresh = QNetwork(sizes, seed=99)
    fresh.load_state_dict(state)
    assert np.array_equal(fresh.params, net.params)
    assert np.array_equal(fresh.state_dict()["adam_m"], net.state_dict()["adam_m"])
    assert fresh.adam_step == 3
    # both continue identically
    batch = make_batch(sizes, seed=5)
    assert net.update(batch, target, UpdateOptions(gamma=0.9, learning_rate=1e-2)) == fresh.update(
        batch, target, UpdateOptions(gamma=0.9, learning_rate=1e-2)
    )
    assert np.array_equal(fresh.params, net.params)
    with pytest.raises(
        ValueError,
        match=r"layer_sizes mismatch: this network has \(4, 8, 2\), the state has \(4, 16, 2\)",
    ):
        QNetwork((4, 8, 2)).load_state_dict(state)
    state["w1"] = state["w1"][:, :1]
    with pytest.raises(ValueError, match=r"'w1': expected shape \(16, 2\), found \(16, 1\)"):
        fresh.load_state_dict(state)


# -- torch, when installed ------------------------------------------------------


def test_matches_torch_over_a_few_updates():
    torch = pytest.importorskip("torch")
    sizes = (4, 32, 32, 2)
    net = QNetwork(sizes, seed=0)
    target = QNetwork(sizes, seed=1)

    def to_torch(q):
        layers = []
        for i, (w, b) in enumerate(zip(q.weights, q.biases)):
            lin = torch.nn.Linear(w.shape[0], w.shape[1])
            with torch.no_grad():
                lin.weight.copy_(torch.from_numpy(w.T.copy()))
                lin.bias.copy_(torch.from_numpy(b.copy()))
            layers.append(lin)
            if i < len(q.weights) - 1:
                layers.append(torch.nn.ReLU())
        return torch.nn.Sequential(*layers)

    t_net, t_target = to_torch(net), to_torch(target)
    for loss, t_loss in helpers.torch_and_ours(torch, t_net, t_target, net, target):
        assert loss == pytest.approx(t_loss, rel=1e-4)
    for i, lin in enumerate(m for m in t_net if isinstance(m, torch.nn.Linear)):
        np.testing.assert_allclose(
            net.weights[i], lin.weight.detach().numpy().T, rtol=1e-4, atol=1e-5
        )
        np.testing.assert_allclose(net.biases[i], lin.bias.detach().numpy(), rtol=1e-4, atol=1e-5)


# -- per-sample discounts, weights and |TD errors| ------------------------------

HIDDEN = [(3, 6, 2), (3, 6, 5, 3), (4, 6, 5, 4, 2)]
HIDDEN_IDS = ["1 hidden", "2 hidden", "3 hidden"]


def per_sample(batch_size, seed, dtype=np.float32):
    """Discounts like an n-step buffer's (gamma^m * mask), weights in [0, 2) with a zero."""
    rng = np.random.default_rng(seed)
    discounts = (0.9 ** rng.integers(1, 4, batch_size) * (rng.random(batch_size) > 0.2)).astype(
        dtype
    )
    weights = (rng.random(batch_size) * 2).astype(dtype)
    weights[0] = 0.0
    return discounts, weights


@pytest.mark.parametrize("sizes", HIDDEN, ids=HIDDEN_IDS)
@pytest.mark.parametrize("double", [False, True], ids=["dqn", "double"])
def test_per_sample_gradients_match_finite_differences_and_reference(sizes, double):
    net, target = QNetwork(sizes, seed=21), QNetwork(sizes, seed=22)
    batch = make_batch(sizes, batch=12, seed=6, dtype=np.float64)
    discounts, weights = per_sample(12, seed=1, dtype=np.float64)
    td = np.zeros(12)
    loss, grads = kernel_loss_and_grads(
        net, target, batch, 0.9, 0.5, double, nw.PerSample(weights, td), discounts
    )
    tw, tb = naive.unflatten(flat64(target), sizes)
    obs, actions, rewards, next_obs, masks = batch

    def fn(flat):
        w, b = naive.unflatten(flat, sizes)
        return naive.dqn_loss(w, b, tw, tb, obs, actions, rewards, next_obs, masks, 0.9, 0.5,
                              double, discounts, weights)  # fmt: skip

    w, b = naive.unflatten(flat64(net), sizes)
    ref_loss, ref_grads, ref_td = naive.dqn_loss_and_grads(
        w, b, tw, tb, obs, actions, rewards, next_obs, masks, 0.9, 0.5, double, discounts, weights
    )
    assert loss == pytest.approx(ref_loss, rel=1e-12) and loss == pytest.approx(fn(flat64(net)))
    np.testing.assert_allclose(td, ref_td, rtol=1e-12)
    np.testing.assert_allclose(grads, ref_grads, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(grads, naive.finite_difference_grad(fn, flat64(net)),
                               rtol=1e-5, atol=1e-8)  # fmt: skip
    assert np.abs(grads).max() > 1e-3  # not vacuous
    # the masks are not used once discounts are given
    flipped = (obs, actions, rewards, next_obs, 1.0 - masks)
    again, _ = kernel_loss_and_grads(
        net, target, flipped, 0.9, 0.5, double, nw.PerSample(weights, np.zeros(12)), discounts
    )
    assert again == loss


def torch_net(torch, q):
    layers = []
    for i, (w, b) in enumerate(zip(q.weights, q.biases)):
        lin = torch.nn.Linear(w.shape[0], w.shape[1], dtype=torch.float64)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w.T.astype(np.float64)))
            lin.bias.copy_(torch.from_numpy(b.astype(np.float64)))
        layers.append(lin)
        if i < len(q.weights) - 1:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def five_steps_with_per_sample_arguments(sizes, double, clip, reference_step):
    """Five QNetwork.update calls with discounts, weights and td_errors_out, each
    checked against ``reference_step`` (float64); returns the net and the final
    reference parameters (flat float64)."""
    net, target = QNetwork(sizes, seed=31), QNetwork(sizes, seed=32)
    for step in range(5):
        batch = make_batch(sizes, batch=32, seed=100 + step)
        discounts, weights = per_sample(32, seed=step)
        td = np.empty(32, np.float32)
        loss = net.update(Batch(*batch, discounts=discounts, weights=weights), target, UpdateOptions(gamma=0.99, learning_rate=1e-3, huber_delta=1.0, double_dqn=double, max_grad_norm=clip), td_errors_out=td)  # fmt: skip
        ref_loss, ref_td, ref_params = reference_step(batch, discounts, weights)
        assert loss == pytest.approx(ref_loss, rel=1e-5), step
        np.testing.assert_allclose(td, ref_td, rtol=1e-5, atol=1e-6)
    assert net.adam_step == 5
    return net, ref_params


@pytest.mark.parametrize("sizes", HIDDEN, ids=HIDDEN_IDS)
@pytest.mark.parametrize("double", [False, True], ids=["dqn", "double"])
@pytest.mark.parametrize("clip", [None, 0.05], ids=["no-clip", "clip"])
def test_update_with_per_sample_arguments_matches_numpy_reference(sizes, double, clip):
    target_flat = QNetwork(sizes, seed=32).params.astype(np.float64)
    tw, tb = naive.unflatten(target_flat, sizes)
    params = QNetwork(sizes, seed=31).params.astype(np.float64)
    adam = naive.Adam(params.size, lr=1e-3)
    state = {"params": params}

    def reference_step(batch, discounts, weights):
        b64 = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in batch]
        w, b = naive.unflatten(state["params"], sizes)
        loss, grads, td = naive.dqn_loss_and_grads(
            w, b, tw, tb, *b64, 0.99, 1.0, double, discounts.astype(np.float64),
            weights.astype(np.float64),
        )  # fmt: skip
        if clip is not None:
            grads = naive.clip_grad_norm(grads, clip)
        state["params"] = adam.step(state["params"], grads)
        return loss, td, state["params"]

    net, ref = five_steps_with_per_sample_arguments(sizes, double, clip, reference_step)
    np.testing.assert_allclose(net.params, ref, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("sizes", HIDDEN, ids=HIDDEN_IDS)
@pytest.mark.parametrize("double", [False, True], ids=["dqn", "double"])
@pytest.mark.parametrize("clip", [None, 0.05], ids=["no-clip", "clip"])
def test_update_with_per_sample_arguments_matches_torch(sizes, double, clip):
    torch = pytest.importorskip("torch")
    t_net = torch_net(torch, QNetwork(sizes, seed=31))
    t_target = torch_net(torch, QNetwork(sizes, seed=32))
    opt = torch.optim.Adam(t_net.parameters(), lr=1e-3)

    def reference_step(batch, discounts, weights):
        obs, actions, rewards, next_obs, _ = (torch.from_numpy(a) for a in batch)
        obs, rewards, next_obs = obs.double(), rewards.double(), next_obs.double()
        with torch.no_grad():
            q_next = t_target(next_obs)
            chooser = t_net(next_obs) if double else q_next
            best = chooser.argmax(dim=1, keepdim=True)
            y = rewards + torch.from_numpy(discounts).double() * q_next.gather(1, best).squeeze(1)
        q = t_net(obs).gather(1, actions[:, None]).squeeze(1)
        per = torch.nn.functional.huber_loss(q, y, reduction="none", delta=1.0)
        loss = (torch.from_numpy(weights).double() * per).mean()
        opt.zero_grad()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(t_net.parameters(), clip)
        opt.step()
        flat = torch.cat(
            [t for lin in t_net if isinstance(lin, torch.nn.Linear)
             for t in (lin.weight.detach().T.reshape(-1), lin.bias.detach())]
        )  # fmt: skip
        return loss.item(), (q - y).abs().detach().numpy(), flat.numpy()

    net, ref = five_steps_with_per_sample_arguments(sizes, double, clip, reference_step)
    np.testing.assert_allclose(net.params, ref, rtol=1e-5, atol=1e-7)


def test_unit_weights_change_nothing_and_gamma_mask_discounts_agree():
    sizes = (4, 16, 2)
    a, b = QNetwork(sizes, seed=0), QNetwork(sizes, seed=0)
    target = QNetwork(sizes, seed=1)
    batch = make_batch(sizes, batch=16, seed=3)
    kw = dict(gamma=0.5, learning_rate=1e-3)
    td = np.empty(16, np.float32)
    la = a.update(batch, target, UpdateOptions(**kw))
    lb = b.update(Batch(*batch, weights=np.ones(16)), target, UpdateOptions(**kw), td_errors_out=td)
    assert la == lb and np.array_equal(a.params, b.params)
    # gamma * mask handed over as discounts: the same target (up to the order
    # fast-math picks for r + gamma * mask * q)
    lc = b.update(Batch(*batch, discounts=0.5 * batch[4]), target, UpdateOptions(**kw))
    ld = a.update(batch, target, UpdateOptions(**kw))
    assert lc == pytest.approx(ld, rel=1e-6)
    np.testing.assert_allclose(a.params, b.params, rtol=1e-6, atol=1e-8)
    q = a.forward(batch[0])  # td_errors_out held |y - Q(s, a)| of the first step
    assert td.min() >= 0 and td.max() > 0 and td.shape == (16,) and q.shape == (16, 2)


def test_per_sample_argument_errors_change_nothing():
    sizes = (4, 8, 2)
    net, target = QNetwork(sizes, seed=0), QNetwork(sizes, seed=1)
    batch = make_batch(sizes, batch=8)
    before = net.params.copy()
    kw = dict(gamma=0.9, learning_rate=1e-3)
    cases = [
        (dict(discounts=np.ones(7)), r"expected discounts of shape \(8,\), got \(7,\)"),
        (dict(weights=np.ones((8, 1))), r"expected weights of shape \(8,\), got \(8, 1\)"),
        (dict(weights=-np.ones(8)), r"weights must be >= 0, got a minimum of -1.0"),
        (dict(discounts=np.full(8, np.nan)), "NaN or infinite"),
        (dict(weights=np.full(8, np.inf)), "NaN or infinite"),
        (dict(discounts=["a"] * 8), "convertible to float32"),
        (dict(td_errors_out=np.empty(8)), "td_errors_out must be a C-contiguous float32"),
        (dict(td_errors_out=np.empty(7, np.float32)), r"td_errors_out of shape \(8,\)"),
        (dict(td_errors_out=np.empty(16, np.float32)[::2]), "C-contiguous float32"),
    ]
    for extra, message in cases:
        with pytest.raises(ValueError, match=message):
            data = {k: v for k, v in extra.items() if k != "td_errors_out"}
            net.update(Batch(*batch, **data), target, UpdateOptions(**kw),
                       td_errors_out=extra.get("td_errors_out"))  # fmt: skip
    assert np.array_equal(net.params, before) and net.adam_step == 0


def test_update_checks_each_new_options_object_and_any_options_holding_an_array():
    """QNetwork.update checks an UpdateOptions once and reuses it while the same object
    comes back; another object, or one holding an array (which may change), is checked
    on every call, and the settings used are always the ones passed."""
    rng = np.random.default_rng(0)
    batch = Batch(rng.standard_normal((8, 3)).astype(np.float32), rng.integers(0, 2, 8),
                  rng.standard_normal(8).astype(np.float32),
                  rng.standard_normal((8, 3)).astype(np.float32), np.ones(8, np.float32))  # fmt: skip
    same, fresh = QNetwork((3, 8, 2), seed=1), QNetwork((3, 8, 2), seed=1)
    target = same.copy()
    options = UpdateOptions(gamma=0.9, learning_rate=1e-2, max_grad_norm=5.0)
    for lr in (1e-2, 1e-2, 3e-2):
        now = options if lr == options.learning_rate else options._replace(learning_rate=lr)
        same.update(batch, target, now)
        fresh.update(batch, target, UpdateOptions(gamma=0.9, learning_rate=lr, max_grad_norm=5.0))
        np.testing.assert_array_equal(same.params, fresh.params)
    with pytest.raises(ValueError, match="learning_rate must be a positive"):
        same.update(batch, target, options._replace(learning_rate=-1.0))
    lr = np.array(1e-2)
    held = UpdateOptions(gamma=0.9, learning_rate=lr)
    same.update(batch, target, held)
    lr[...] = -1.0
    with pytest.raises(ValueError, match="learning_rate must be a positive"):
        same.update(batch, target, held)
