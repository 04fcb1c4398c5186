"""PPO's config and actor-critic: validation, orthogonal initialisation, the forward pass
against plain NumPy, log-probabilities, entropy, sampled and greedy actions."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from ember_np.ppo.config import PPOConfig
from ember_np.ppo.network import ActorCritic, bias_tanh, log_softmax_rows, orthogonal
from ember_np.rng import Rng

ARCHS = [(False, "tanh"), (False, "relu"), (True, "tanh"), (True, "relu")]
ARCH_IDS = ["separate-tanh", "separate-relu", "shared-tanh", "shared-relu"]


def make_net(shared, activation, hidden=(7, 5), obs_dim=4, n_actions=3, seed=0,
             dtype=np.float32):  # fmt: skip
    config = PPOConfig(hidden_sizes=hidden, activation=activation, shared_trunk=shared)
    return ActorCritic(obs_dim, n_actions, config, Rng(seed), dtype=dtype)


def reference_forward(net, obs, shared, activation, hidden):
    """Logits and values in float64 NumPy, from the layers in the documented order."""
    act = np.tanh if activation == "tanh" else (lambda z: np.maximum(z, 0.0))
    layers = [tuple(np.asarray(p, dtype=np.float64) for p in net.layer(l))
              for l in range(len(net.layers))]  # fmt: skip
    x = np.asarray(obs, dtype=np.float64)

    def mlp(h, stack):
        for w, b in stack:
            h = act(h @ w + b)
        return h

    k = len(hidden)
    if shared:
        h = mlp(x, layers[:k])
        (wp, bp), (wv, bv) = layers[k], layers[k + 1]
        return h @ wp + bp, (h @ wv + bv)[:, 0]
    (wp, bp), (wv, bv) = layers[k], layers[2 * k + 1]
    logits = mlp(x, layers[:k]) @ wp + bp
    return logits, (mlp(x, layers[k + 1 : 2 * k + 1]) @ wv + bv)[:, 0]


def log_softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


# -- config ---------------------------------------------------------------------------


def test_config_defaults_are_sb3s_ppo():
    c = PPOConfig()
    assert (c.hidden_sizes, c.activation, c.shared_trunk) == ((64, 64), "tanh", False)
    assert (c.learning_rate, c.n_steps, c.batch_size, c.n_epochs) == (3e-4, 2048, 64, 10)
    assert (c.gamma, c.gae_lambda, c.clip_range, c.clip_range_vf) == (0.99, 0.95, 0.2, None)
    assert (c.ent_coef, c.vf_coef, c.max_grad_norm, c.target_kl) == (0.0, 0.5, 0.5, None)
    assert (c.adam_eps, c.normalize_advantage, c.schedule_steps) == (1e-5, True, None)
    assert (c.normalize_obs, c.normalize_reward) == (False, False)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("activation", "gelu", "activation must be 'tanh' or 'relu', got 'gelu'"),
        ("lr_schedule", "cosine", "lr_schedule must be 'constant' or 'linear'"),
        ("clip_schedule", 1, "clip_schedule must be 'constant' or 'linear'"),
        ("n_steps", 0, "n_steps must be a positive integer, got 0"),
        ("schedule_steps", 2.0, "schedule_steps must be a positive integer"),
        ("batch_size", 1, "batch_size must be >= 2 when normalize_advantage is True"),
        ("n_epochs", True, "n_epochs must be a positive integer, got True"),
        ("gamma", 1.5, "gamma must be a number in [0, 1], got 1.5"),
        ("gae_lambda", -0.1, "gae_lambda must be a number in [0, 1]"),
        ("learning_rate", 0.0, "learning_rate must be a positive finite number, got 0.0"),
        ("learning_rate", 1e39, "learning_rate must be finite and > 0 in float32"),
        ("clip_range", float("nan"), "clip_range must be a positive finite number"),
        ("clip_range_vf", -1.0, "clip_range_vf must be a positive finite number or None"),
        ("ent_coef", -0.01, "ent_coef must be a finite number >= 0"),
        ("vf_coef", float("inf"), "vf_coef must be a finite number >= 0"),
        ("max_grad_norm", 0, "max_grad_norm must be a positive finite number or None"),
        ("target_kl", 0.0, "target_kl must be a positive finite number or None"),
        ("adam_eps", 0.0, "adam_eps must be a positive finite number"),
        ("shared_trunk", 1, "shared_trunk must be True or False, got 1"),
        ("normalize_reward", "yes", "normalize_reward must be True or False"),
        ("hidden_sizes", (64, 0), "hidden_sizes must be a sequence of positive integers"),
        ("hidden_sizes", 64, "hidden_sizes must be a sequence of positive integers"),
    ],
)
def test_config_rejects_bad_values_in_one_line(field, value, says):
    with pytest.raises(ValueError, match="^" + re.escape(says)) as e:
        PPOConfig(**{field: value})
    assert "\n" not in str(e.value)


def test_config_allows_batches_that_do_not_divide_the_rollout_as_sb3():
    c = PPOConfig(n_steps=100, batch_size=64)
    assert (c.rollout_size(3), c.minibatches_per_epoch(3)) == (300, 5)  # the fifth has 44
    assert PPOConfig(batch_size=1, normalize_advantage=False).batch_size == 1


def test_schedules_are_fractions_of_the_run_left():
    c = PPOConfig(learning_rate=1e-3, lr_schedule="linear", clip_range=0.2, schedule_steps=100)
    assert c.learning_rate_at(1.0) == 1e-3 and c.learning_rate_at(0.25) == 0.25 * 1e-3
    assert c.clip_range_at(0.25) == 0.2  # constant
    lin = c.replace(clip_schedule="linear")
    assert lin.clip_range_at(0.5) == 0.5 * 0.2 and lin.learning_rate_at(0.0) == 0.0
    with pytest.raises(ValueError, match="progress_remaining must be a number in \\[0, 1\\]"):
        c.learning_rate_at(1.5)


def test_config_round_trips_through_a_dict():
    c = PPOConfig(hidden_sizes=(np.int64(32),), ent_coef=np.float32(0.01), target_kl=0.02)
    d = c.to_dict()
    assert d["hidden_sizes"] == [32] and type(d["ent_coef"]) is float
    assert PPOConfig.from_dict(d) == c
    with pytest.raises(ValueError, match="unknown PPOConfig field\\(s\\) \\['lr'\\]"):
        PPOConfig.from_dict({"lr": 1.0})


# -- initialisation -------------------------------------------------------------------


@pytest.mark.parametrize(("shared", "activation"), ARCHS, ids=ARCH_IDS)
def test_orthogonal_init_gains_and_zero_biases(shared, activation):
    net = make_net(shared, activation, hidden=(16, 8), obs_dim=5, n_actions=4, seed=3)
    roles = {net.logits_layer: 0.01, net.value_layer: 1.0}
    for l in range(len(net.layers)):
        w, b = (np.asarray(p, dtype=np.float64) for p in net.layer(l))
        gain = roles.get(l, math.sqrt(2.0))
        assert np.all(b == 0.0)
        n_in, n_out = w.shape
        gram = w @ w.T if n_in <= n_out else w.T @ w  # the fewer vectors are orthonormal
        np.testing.assert_allclose(gram, gain**2 * np.eye(min(n_in, n_out)), atol=1e-6 * gain)


def test_orthogonal_matches_torch_on_the_same_normals():
    torch = pytest.importorskip("torch")
    for n_out, n_in in [(6, 3), (3, 6), (5, 5)]:
        w = orthogonal(n_out, n_in, 1.7, Rng(9))
        normals = torch.from_numpy(Rng(9).normal(n_out * n_in).reshape(n_out, n_in))
        flat = normals.T if n_out < n_in else normals
        q, r = torch.linalg.qr(flat)
        q = q * torch.diag(r, 0).sign()
        expected = (q.T if n_out < n_in else q) * 1.7  # torch's (out, in) weight
        np.testing.assert_allclose(w.T, expected.numpy(), rtol=1e-12, atol=1e-12)


def test_same_seed_same_network_other_seed_another():
    a, b = make_net(False, "tanh", seed=5), make_net(False, "tanh", seed=5)
    assert a.params.tobytes() == b.params.tobytes()
    assert not np.array_equal(a.params, make_net(False, "tanh", seed=6).params)


def test_layouts_count_every_parameter():
    sep = make_net(False, "tanh", hidden=(7, 5), obs_dim=4, n_actions=3)
    assert sep.num_params == 2 * (4 * 7 + 7 + 7 * 5 + 5) + (5 * 3 + 3) + (5 + 1)
    shared = make_net(True, "tanh", hidden=(7, 5), obs_dim=4, n_actions=3)
    assert shared.num_params == (4 * 7 + 7 + 7 * 5 + 5) + (5 * 3 + 3) + (5 + 1)
    linear = make_net(True, "tanh", hidden=(), obs_dim=4, n_actions=3)
    assert linear.num_params == (4 * 3 + 3) + (4 + 1)


# -- forward --------------------------------------------------------------------------


def perturbed(net, seed=1):
    """Random biases and larger weights, so that every path of the forward pass matters."""
    rng = np.random.default_rng(seed)
    net.params[:] = rng.normal(0.0, 0.5, net.num_params).astype(net.params.dtype)
    return net


@pytest.mark.parametrize(("shared", "activation"), ARCHS, ids=ARCH_IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_matches_numpy(shared, activation, dtype):
    hidden = (7, 5)
    net = perturbed(make_net(shared, activation, hidden=hidden, dtype=dtype))
    obs = np.random.default_rng(2).normal(size=(9, 4))
    logits, values = net.forward(obs)
    ref_logits, ref_values = reference_forward(net, obs, shared, activation, hidden)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(logits, ref_logits, rtol=tol, atol=tol)
    np.testing.assert_allclose(values, ref_values, rtol=tol, atol=tol)
    assert logits.shape == (9, 3) and values.shape == (9,) and logits.dtype == dtype


def test_linear_heads_without_hidden_layers():
    net = perturbed(make_net(True, "relu", hidden=()))
    obs = np.random.default_rng(3).normal(size=(4, 4))
    logits, values = net.forward(obs)
    ref_logits, ref_values = reference_forward(net, obs, True, "relu", ())
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values, ref_values, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("shared", "activation"), ARCHS, ids=ARCH_IDS)
def test_log_probs_and_entropy_match_numpy(shared, activation):
    net = perturbed(make_net(shared, activation, dtype=np.float64), seed=4)
    obs = np.random.default_rng(5).normal(size=(11, 4))
    actions = np.random.default_rng(6).integers(0, 3, 11)
    logp, entropy, values = net.evaluate(obs, actions)
    ref_logits, ref_values = reference_forward(net, obs, shared, activation, (7, 5))
    ref_logp = log_softmax(ref_logits)
    np.testing.assert_allclose(logp, ref_logp[np.arange(11), actions], rtol=1e-12)
    np.testing.assert_allclose(entropy, -(np.exp(ref_logp) * ref_logp).sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(values, ref_values, rtol=1e-12)


def test_deterministic_action_is_the_first_argmax_and_draws_nothing():
    net = perturbed(make_net(False, "tanh"), seed=7)
    obs = np.random.default_rng(8).normal(size=(50, 4))
    rng = Rng(1)
    before = rng.state.copy()
    actions, logp, values = net.act(obs, rng, deterministic=True)
    logits, ref_values = net.forward(obs)
    np.testing.assert_array_equal(actions, np.argmax(logits, axis=1))
    np.testing.assert_allclose(logp, log_softmax(logits.astype(np.float64))[np.arange(50), actions],
                               rtol=1e-5, atol=1e-6)  # fmt: skip
    np.testing.assert_allclose(values, ref_values, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(rng.state, before)
    tie = make_net(False, "tanh")
    tie.params[:] = 0.0  # every logit 0: the first action
    assert tie.act(obs[:3], rng, deterministic=True)[0].tolist() == [0, 0, 0]


def test_sampling_follows_the_policy_by_inverse_cdf():
    net = perturbed(make_net(True, "tanh", n_actions=3), seed=9)
    obs = np.repeat(np.random.default_rng(10).normal(size=(1, 4)), 20_000, axis=0)
    rng = Rng(3)
    u = Rng.from_state(rng.state.copy()).random(20_000)  # the draws act makes, one per row
    actions, logp, _ = net.act(obs, rng)
    probs = np.exp(log_softmax(net.forward(obs[:1])[0].astype(np.float64)))[0]
    np.testing.assert_array_equal(actions, np.searchsorted(np.cumsum(probs), u, side="right"))
    freq = np.bincount(actions, minlength=3) / 20_000
    assert np.all(np.abs(freq - probs) < 4 * np.sqrt(probs * (1 - probs) / 20_000) + 1e-3)
    np.testing.assert_allclose(logp, np.log(probs)[actions], rtol=1e-5)
    again = net.act(obs, Rng(3))[0]
    np.testing.assert_array_equal(actions, again)  # same seed, same actions


def test_bad_inputs_say_what_was_expected():
    net = make_net(False, "tanh")
    with pytest.raises(
        ValueError, match="observations must be an array of shape \\(batch >= 1, 4\\)"
    ):
        net.forward(np.zeros((2, 5)))
    with pytest.raises(ValueError, match="actions must be 2 integers in \\[0, 3\\)"):
        net.evaluate(np.zeros((2, 4)), [0, 3])
    with pytest.raises(ValueError, match="n_actions >= 2"):
        ActorCritic(4, 1, PPOConfig(), Rng(0))


def test_float32_tanh_is_within_three_ulps_of_tanh():
    x = np.concatenate(
        [np.linspace(-12, 12, 200_001), np.geomspace(1e-30, 1e-2, 1001), [0.0, 3e-4, 5e-4]]
    )
    x = np.concatenate([x, -x]).astype(np.float32)
    z = x.reshape(-1, 2).copy()
    bias_tanh(z, np.zeros(2, dtype=np.float32))
    exact = np.tanh(x.astype(np.float64))
    err = np.abs(z.ravel() - exact)
    assert np.all(err <= 4e-7 * np.maximum(np.abs(exact), 1e-30))  # relative, to 0 included
    z64 = x.astype(np.float64).reshape(-1, 2).copy()
    bias_tanh(z64, np.full(2, 0.5))
    np.testing.assert_allclose(z64.ravel(), np.tanh(x.astype(np.float64) + 0.5), rtol=1e-15)


def test_tanh_rows_four_at_a_time_give_each_rows_own_bits():
    rng = np.random.default_rng(21)
    z = (rng.standard_normal((11, 64)) * 3).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    together = z.copy()
    bias_tanh(together, b)  # rows 0-7 four at a time, 8-10 one by one
    for i in range(11):
        alone = z[i : i + 1].copy()
        bias_tanh(alone, b)
        assert alone.tobytes() == together[i : i + 1].tobytes(), f"row {i}"


@pytest.mark.parametrize("n", [2, 3, 6])
@pytest.mark.parametrize("masked", [False, True])
def test_log_softmax_rows_have_the_bits_of_every_exponential_summed_in_order(n, masked):
    """The largest legal logit's exponential is 1 without a call, and the rows' libm
    calls run in passes: the probabilities and log-probabilities keep the bits of
    exp(l_k - max) summed in the actions' order, row by row (Python's math, libm's)."""
    rng = np.random.default_rng(n + 10 * masked)
    rows = 300
    logits = (rng.standard_normal((rows, n)) * 2).astype(np.float32)
    ties = rng.random(rows) < 0.2
    logits[ties, rng.integers(n)] = logits[ties].max(axis=1)  # a tie for the largest
    if masked:
        masks = rng.random((rows, n)) < 0.6
        masks[np.arange(rows), rng.integers(n, size=rows)] = True  # one legal at least
    else:
        masks = np.zeros((rows, 0), dtype=bool)
    logp, probs, ent = np.empty((rows, n), np.float32), np.empty((rows, n)), np.empty(rows)
    log_softmax_rows(logits, masks, logp, probs, ent)
    for i in range(rows):
        legal = masks[i] if masked else np.ones(n, dtype=bool)
        top = max(float(v) for v, ok in zip(logits[i], legal) if ok)
        e = [math.exp(float(v) - top) if ok else 0.0 for v, ok in zip(logits[i], legal)]
        total = 0.0
        for v in e:
            total += v
        lse = top + math.log(total)
        want_p = np.array([v * (1.0 / total) for v in e])
        want_logp = np.array([float(v) - lse if ok else -np.inf
                              for v, ok in zip(logits[i], legal)], dtype=np.float32)  # fmt: skip
        assert probs[i].tobytes() == want_p.tobytes(), f"row {i}"
        assert logp[i].tobytes() == want_logp.tobytes(), f"row {i}"
        assert ent[i] == pytest.approx(-sum(p * float(v) for p, v in zip(want_p, logp[i]) if p))


def test_masked_policy_uses_legal_actions_alone():
    net = perturbed(make_net(False, "relu", n_actions=4, dtype=np.float64), seed=11)
    obs = np.random.default_rng(12).normal(size=(400, 4))
    masks = np.random.default_rng(13).random((400, 4)) < 0.5
    masks[np.arange(400), np.random.default_rng(14).integers(0, 4, 400)] = True
    logits, _ = net.forward(obs)
    legal = np.where(masks, logits, -np.inf)
    ref_logp = log_softmax(legal)
    greedy, _, _ = net.act(obs, Rng(0), deterministic=True, action_masks=masks)
    np.testing.assert_array_equal(greedy, np.argmax(legal, axis=1))
    sampled, logp, _ = net.act(obs, Rng(1), action_masks=masks)
    assert masks[np.arange(400), sampled].all()
    np.testing.assert_allclose(logp, ref_logp[np.arange(400), sampled], rtol=1e-12)
    actions = np.argmax(masks, axis=1)  # a legal action of each row
    logp, entropy, _ = net.evaluate(obs, actions, action_masks=masks)
    np.testing.assert_allclose(logp, ref_logp[np.arange(400), actions], rtol=1e-12)
    p_logp = np.where(masks, np.exp(ref_logp) * np.where(masks, ref_logp, 0.0), 0.0)
    np.testing.assert_allclose(entropy, -p_logp.sum(axis=1), rtol=1e-12, atol=1e-15)
    illegal = (actions + 1) % 4
    assert np.isneginf(net.evaluate(obs, illegal, action_masks=masks)[0][~masks[np.arange(400),
                       illegal]]).all()  # fmt: skip
    with pytest.raises(ValueError, match="a legal \\(True\\) action in every row"):
        net.act(obs[:2], Rng(0), action_masks=np.zeros((2, 4), dtype=bool))
