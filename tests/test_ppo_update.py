"""PPO's update: the minibatch loss and every gradient against torch (CleanRL's
``ppo.py`` minibatch code with SB3's value loss) and against finite differences, 5
epochs of minibatch updates against torch's Adam, target_kl's early stop, and
bit-identical results for a fixed seed."""

from __future__ import annotations

import naive
import numpy as np
import pytest

from ember_np.ppo.config import PPOConfig
from ember_np.ppo.network import ActorCritic
from ember_np.ppo.rollout import shuffled_indices
from ember_np.ppo.update import (
    STAT_NAMES,
    Rollout,
    loss_and_grads,
    update,
    update_settings,
)
from ember_np.rng import Rng

ARCHS = [(False, "tanh"), (False, "relu"), (True, "tanh"), (True, "relu")]
ARCH_IDS = ["separate-tanh", "separate-relu", "shared-tanh", "shared-relu"]
HIDDEN = (6, 5)
OBS_DIM, N_ACT = 4, 3


def make(shared, activation, dtype=np.float32, seed=0, **config):
    cfg = PPOConfig(hidden_sizes=HIDDEN, activation=activation, shared_trunk=shared, **config)
    net = ActorCritic(OBS_DIM, N_ACT, cfg, Rng(seed), dtype=dtype)
    # larger weights than the init's 0.01 policy gain, so the policy is far from uniform
    net.params[:] += np.random.default_rng(seed + 100).normal(0, 0.3, net.num_params).astype(dtype)
    return cfg, net


def make_rollout(net, n, seed=1, spread=0.3):
    """A rollout whose old log-probabilities and values differ from the network's, so
    that ratios fall on both sides of the clip range and values on both of clip_range_vf."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, OBS_DIM))
    actions = rng.integers(0, N_ACT, n)
    logp, _, values = net.evaluate(obs, actions)
    dtype = net.params.dtype
    return Rollout(
        obs.astype(dtype),
        actions,
        (logp + rng.normal(0, spread, n)).astype(dtype),
        rng.normal(size=n).astype(dtype),
        (values + rng.normal(0, 1.0, n)).astype(dtype),
        (values + rng.normal(0, spread, n)).astype(dtype),
    )


# -- references -------------------------------------------------------------------------


def torch_loss(torch, weights, shared, activation, rollout, idx, s):
    """CleanRL's minibatch loss (SB3's value loss) of the layers ``weights`` (torch tensors
    (W (in, out), b), in ActorCritic's documented order)."""
    F = torch.nn.functional
    act = torch.tanh if activation == "tanh" else torch.relu
    k = len(HIDDEN)
    x = torch.as_tensor(rollout.obs[idx])

    def mlp(h, stack):
        for w, b in stack:
            h = act(F.linear(h, w.T, b))
        return h

    if shared:
        h = mlp(x, weights[:k])
        logits = F.linear(h, weights[k][0].T, weights[k][1])
        value = F.linear(h, weights[k + 1][0].T, weights[k + 1][1]).view(-1)
    else:
        logits = F.linear(mlp(x, weights[:k]), weights[k][0].T, weights[k][1])
        critic = mlp(x, weights[k + 1 : 2 * k + 1])
        value = F.linear(critic, weights[2 * k + 1][0].T, weights[2 * k + 1][1]).view(-1)
    if rollout.masks is not None:  # sb3-contrib's MaskableCategorical: illegal logits -1e8
        logits = torch.where(torch.as_tensor(rollout.masks[idx]), logits, -1e8)
    dist = torch.distributions.Categorical(logits=logits)
    newlogprob = dist.log_prob(torch.as_tensor(rollout.actions[idx]))
    entropy = dist.entropy()
    logratio = newlogprob - torch.as_tensor(rollout.old_logp[idx])
    ratio = logratio.exp()
    approx_kl = ((ratio - 1) - logratio).mean()
    clipfrac = ((ratio - 1.0).abs() > s.clip_range).float().mean()
    mb_adv = torch.as_tensor(rollout.advantages[idx])
    if s.normalize_advantage and len(idx) > 1:
        mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
    pg_loss1 = -mb_adv * ratio
    pg_loss2 = -mb_adv * torch.clamp(ratio, 1 - s.clip_range, 1 + s.clip_range)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()
    old_values = torch.as_tensor(rollout.old_values[idx])
    pred = value
    if s.clip_range_vf > 0:
        pred = old_values + torch.clamp(value - old_values, -s.clip_range_vf, s.clip_range_vf)
    v_loss = F.mse_loss(torch.as_tensor(rollout.returns[idx]), pred)
    entropy_loss = -entropy.mean()
    loss = pg_loss + s.ent_coef * entropy_loss + s.vf_coef * v_loss
    stats = {"loss": loss, "policy_loss": pg_loss, "value_loss": v_loss,
             "entropy_loss": entropy_loss, "approx_kl": approx_kl, "clip_fraction": clipfrac}  # fmt: skip
    return loss, {k: float(v.detach()) for k, v in stats.items()}


def torch_weights(torch, net):
    return [tuple(torch.tensor(np.array(p), requires_grad=True) for p in net.layer(l))
            for l in range(len(net.layers))]  # fmt: skip


def flat_grads(weights):
    return np.concatenate([t.grad.numpy().ravel() for pair in weights for t in pair])


def numpy_loss(params, net, shared, activation, rollout, idx, s):
    """The same loss in float64 NumPy, of a flat parameter vector (for finite differences)."""
    act = np.tanh if activation == "tanh" else (lambda z: np.maximum(z, 0.0))
    layers, off = [], 0
    for n_in, n_out in net.layers[:, :2]:
        w = params[off : off + n_in * n_out].reshape(n_in, n_out)
        layers.append((w, params[off + n_in * n_out : off + n_in * n_out + n_out]))
        off += n_in * n_out + n_out
    k = len(HIDDEN)
    x = rollout.obs[idx].astype(np.float64)

    def mlp(h, stack):
        for w, b in stack:
            h = act(h @ w + b)
        return h

    if shared:
        h = mlp(x, layers[:k])
        logits, value = h @ layers[k][0] + layers[k][1], (h @ layers[k + 1][0] + layers[k + 1][1])
    else:
        logits = mlp(x, layers[:k]) @ layers[k][0] + layers[k][1]
        value = mlp(x, layers[k + 1 : 2 * k + 1]) @ layers[2 * k + 1][0] + layers[2 * k + 1][1]
    value = value[:, 0]
    if rollout.masks is not None:
        logits = np.where(rollout.masks[idx], logits, -np.inf)
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    entropy = -(np.exp(logp) * np.where(np.isinf(logp), 0.0, logp)).sum(axis=1)
    ratio = np.exp(logp[np.arange(len(idx)), rollout.actions[idx]] - rollout.old_logp[idx])
    adv = rollout.advantages[idx].astype(np.float64)
    if s.normalize_advantage and len(idx) > 1:
        adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    c = s.clip_range
    pg = np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - c, 1 + c)).mean()
    old = rollout.old_values[idx]
    pred = value if s.clip_range_vf <= 0 else old + np.clip(value - old, -s.clip_range_vf,
                                                            s.clip_range_vf)  # fmt: skip
    vf = np.mean((rollout.returns[idx] - pred) ** 2)
    return pg + s.vf_coef * vf - s.ent_coef * entropy.mean()


def check_against_torch(torch, net, shared, activation, rollout, idx, s):
    """loss_and_grads on ``rollout[idx]`` against torch: every statistic and every
    gradient. Returns the statistics and the largest of torch's gradients."""
    stats = loss_and_grads(net, rollout, idx, s)
    weights = torch_weights(torch, net)
    loss, ref = torch_loss(torch, weights, shared, activation, rollout, idx, s)
    loss.backward()
    ref_grads = flat_grads(weights)
    for name, value in ref.items():
        assert stats[name] == pytest.approx(value, rel=1e-5, abs=1e-7), name
    # every gradient within 1e-5 of torch's, relative to the largest (float32 sums in
    # another order differ by ~1e-7 of the terms summed)
    scale = np.abs(ref_grads).max()
    np.testing.assert_allclose(net.grads, ref_grads, rtol=1e-5, atol=1e-5 * scale)
    return stats, scale


def check_against_finite_differences(net, shared, activation, rollout, idx, s):
    """loss_and_grads of a float64 ``net`` on ``rollout[idx]`` against the NumPy loss
    and its central differences."""
    stats = loss_and_grads(net, rollout, idx, s)

    def fn(p):
        return numpy_loss(p, net, shared, activation, rollout, idx, s)

    params = net.params.astype(np.float64).copy()
    assert stats["loss"] == pytest.approx(fn(params), rel=1e-12)
    fd = naive.finite_difference_grad(fn, params)
    np.testing.assert_allclose(net.grads, fd, rtol=1e-5, atol=1e-8)


VARIANTS = [
    {},
    {"clip_range_vf": 0.1, "ent_coef": 0.05},
    {"normalize_advantage": False, "ent_coef": 0.01, "vf_coef": 1.3},
]
VARIANT_IDS = ["default", "clip_vf+entropy", "raw-advantages"]


# -- one minibatch --------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize(("shared", "activation"), ARCHS, ids=ARCH_IDS)
def test_loss_and_every_gradient_match_torch(shared, activation, variant):
    torch = pytest.importorskip("torch")
    cfg, net = make(shared, activation, **variant)
    rollout = make_rollout(net, 40)
    idx = np.random.default_rng(2).permutation(40)[:24]
    s = update_settings(cfg, 3e-4, 0.2)
    stats, scale = check_against_torch(torch, net, shared, activation, rollout, idx, s)
    assert 0.0 < stats["clip_fraction"] < 1.0  # both sides of the clip are exercised
    assert scale > 1e-3


@pytest.mark.parametrize("variant", VARIANTS[:2], ids=VARIANT_IDS[:2])
@pytest.mark.parametrize(("shared", "activation"), ARCHS, ids=ARCH_IDS)
def test_every_gradient_matches_finite_differences(shared, activation, variant):
    cfg, net = make(shared, activation, dtype=np.float64, seed=4, **variant)
    rollout = make_rollout(net, 30, seed=5)
    idx = np.arange(30)[::-1][:20].copy()
    s = update_settings(cfg, 3e-4, 0.2)
    check_against_finite_differences(net, shared, activation, rollout, idx, s)
    assert np.abs(net.grads).max() > 1e-3 and np.count_nonzero(net.grads) > 0.5 * net.num_params


def test_one_transition_is_not_normalised_as_sb3():
    cfg, net = make(False, "tanh", dtype=np.float64, batch_size=2)
    rollout = make_rollout(net, 5)
    s = update_settings(cfg, 3e-4, 0.2)
    stats = loss_and_grads(net, rollout, np.array([3]), s)
    expected = numpy_loss(net.params.copy(), net, False, "tanh", rollout, np.array([3]), s)
    assert np.isfinite(stats["loss"]) and stats["loss"] == pytest.approx(expected, rel=1e-12)


# -- whole updates --------------------------------------------------------------------


def torch_update(torch, net, shared, activation, rollout, s, state, n_epochs):
    """SB3's ``PPO.train`` loop in torch on ``net``'s initial weights, with the same
    shuffles (:func:`shuffled_indices` from a copy of ``state``)."""
    weights = torch_weights(torch, net)
    params = [t for pair in weights for t in pair]
    opt = torch.optim.Adam(params, lr=s.learning_rate, eps=s.adam_eps)
    order = np.empty(len(rollout.obs), dtype=np.int64)
    valid = np.ones(len(order), dtype=bool) if rollout.valid is None else rollout.valid
    steps = 0
    for _ in range(n_epochs):
        n = shuffled_indices(state, valid, order)
        for start in range(0, n, s.batch_size):
            idx = order[start : min(start + s.batch_size, n)]
            loss, stats = torch_loss(torch, weights, shared, activation, rollout, idx, s)
            if s.target_kl > 0 and stats["approx_kl"] > 1.5 * s.target_kl:
                return flat_params(weights), steps
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, s.max_grad_norm)
            opt.step()
            steps += 1
    return flat_params(weights), steps


def flat_params(weights):
    return np.concatenate([t.detach().numpy().ravel() for pair in weights for t in pair])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    ("shared", "activation"), [ARCHS[0], ARCHS[3]], ids=[ARCH_IDS[0], ARCH_IDS[3]]
)
def test_five_epochs_match_torch_adam(shared, activation, dtype):
    torch = pytest.importorskip("torch")
    # 50 transitions in minibatches of 16: the fourth of each epoch has 2 (SB3's cut)
    cfg, net = make(shared, activation, dtype=dtype, n_epochs=5, batch_size=16,
                    clip_range_vf=0.2, ent_coef=0.01, max_grad_norm=0.5)  # fmt: skip
    rollout = make_rollout(net, 50, seed=7)
    s = update_settings(cfg, 3e-3, 0.2)
    ref, ref_steps = torch_update(torch, net, shared, activation, rollout, s, Rng(11).state, 5)
    start = net.params.copy()
    stats = update(net, rollout, s, Rng(11))
    assert stats["n_gradient_steps"] == ref_steps == 20 and stats["n_epochs"] == 5
    assert net.adam_t[0] == 20
    moved = np.abs(ref - start).max()
    assert moved > 1e-2  # the updates did change the weights
    np.testing.assert_allclose(net.params, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_target_kl_stops_where_sb3_stops():
    torch = pytest.importorskip("torch")
    cfg, net = make(False, "tanh", dtype=np.float64, n_epochs=10, batch_size=10,
                    target_kl=0.02)  # fmt: skip
    rollout = make_rollout(net, 40, seed=8, spread=0.01)  # starts near the old policy
    s = update_settings(cfg, 1e-2, 0.2)  # a large step: the policy soon moves away
    ref, ref_steps = torch_update(torch, net, False, "tanh", rollout, s, Rng(4).state, 10)
    stats = update(net, rollout, s, Rng(4))
    assert stats["stopped_early"] == 1.0 and 0 < stats["n_gradient_steps"] == ref_steps < 40
    assert stats["n_epochs"] == ref_steps // 4 + 1  # the epoch it stopped in counts (SB3)
    assert stats["approx_kl"] > 0.0
    np.testing.assert_allclose(net.params, ref, rtol=1e-9, atol=1e-12)
    # without target_kl, the same update takes every step
    _, free = make(False, "tanh", dtype=np.float64, n_epochs=10, batch_size=10)
    assert update(free, rollout, update_settings(cfg.replace(target_kl=None), 1e-2, 0.2),
                  Rng(4))["n_gradient_steps"] == 40  # fmt: skip


def test_target_kl_exceeded_at_once_changes_nothing():
    cfg, net = make(True, "relu", target_kl=1e-6)
    rollout = make_rollout(net, 32, spread=0.5)
    before = net.params.copy()
    stats = update(net, rollout, update_settings(cfg, 3e-4, 0.2), Rng(0))
    assert (stats["n_gradient_steps"], stats["n_epochs"], stats["stopped_early"]) == (0, 1, 1)
    np.testing.assert_array_equal(net.params, before)
    assert net.adam_t[0] == 0


def test_stats_are_sb3s_means():
    cfg, net = make(False, "tanh", dtype=np.float64, n_epochs=1, batch_size=64)
    rollout = make_rollout(net, 64)
    s = update_settings(cfg, 0.0, 0.2)  # lr 0: one minibatch, nothing moves
    order = np.empty(64, dtype=np.int64)
    assert shuffled_indices(Rng(2).state, np.ones(64, dtype=bool), order) == 64
    one = loss_and_grads(net, rollout, order, s)
    stats = update(net, rollout, s, Rng(2))
    assert list(stats) == list(STAT_NAMES)
    for name in ("policy_loss", "value_loss", "entropy_loss", "approx_kl", "clip_fraction",
                 "loss"):  # fmt: skip
        assert stats[name] == pytest.approx(one[name], rel=1e-12), name


def test_shuffles_are_permutations_of_the_valid_rows_and_follow_the_stream():
    every = np.ones(100, dtype=bool)
    order, again = np.empty(100, dtype=np.int64), np.empty(100, dtype=np.int64)
    shuffled_indices(Rng(1).state, every, order)
    shuffled_indices(Rng(1).state, every, again)
    assert sorted(order) == list(range(100)) and np.array_equal(order, again)
    shuffled_indices(Rng(2).state, every, again)
    assert not np.array_equal(order, again)
    valid = np.random.default_rng(0).random(100) < 0.7
    k = shuffled_indices(Rng(1).state, valid, order)
    assert k == valid.sum() and sorted(order[:k]) == list(np.flatnonzero(valid))
    # Fisher-Yates from the back on the valid indices, one next_below per position
    rng, expected = Rng(1), list(np.flatnonzero(valid))
    for i in range(k - 1, 0, -1):
        j = rng.integers(i + 1)
        expected[i], expected[j] = expected[j], expected[i]
    assert order[:k].tolist() == expected


def test_invalid_rows_are_never_learned_from():
    torch = pytest.importorskip("torch")
    cfg, net = make(True, "tanh", dtype=np.float64, n_epochs=3, batch_size=8)
    rollout = make_rollout(net, 30, seed=9)
    valid = np.ones(30, dtype=bool)
    valid[[0, 7, 8, 29]] = False  # a next-step autoreset's reset rows
    poisoned = rollout._replace(
        obs=np.where(valid[:, None], rollout.obs, np.nan),
        advantages=np.where(valid, rollout.advantages, np.nan), valid=valid,
    )  # fmt: skip
    s = update_settings(cfg, 3e-3, 0.2)
    ref, ref_steps = torch_update(torch, net, True, "tanh", poisoned, s, Rng(3).state, 3)
    stats = update(net, poisoned, s, Rng(3))
    assert stats["n_gradient_steps"] == ref_steps == 12  # 26 rows: 4 minibatches an epoch
    assert np.isfinite(net.params).all()
    np.testing.assert_allclose(net.params, ref, rtol=1e-9, atol=1e-12)
    none = update(net, poisoned._replace(valid=np.zeros(30, dtype=bool)), s, Rng(3))
    assert (none["n_epochs"], none["n_gradient_steps"]) == (0, 0)


def test_fixed_seed_gives_bit_identical_updates():
    results = []
    for _ in range(2):
        cfg, net = make(True, "tanh", n_epochs=3, batch_size=8, clip_range_vf=0.3)
        stats = update(net, make_rollout(net, 30), update_settings(cfg, 1e-3, 0.1), Rng(5))
        results.append((net.params.tobytes(), net.adam_m.tobytes(), net.adam_v.tobytes(), stats))
    assert results[0] == results[1]


def test_bad_rollouts_and_settings_say_what_is_expected():
    cfg, net = make(False, "tanh")
    rollout = make_rollout(net, 10)
    with pytest.raises(ValueError, match="rollout.obs must have shape \\(N >= 1, 4\\)"):
        update(net, rollout._replace(obs=rollout.obs[:, :3]), update_settings(cfg, 1e-3, 0.2),
               Rng(0))  # fmt: skip
    with pytest.raises(ValueError, match="rollout.returns must have shape \\(10,\\)"):
        update(net, rollout._replace(returns=rollout.returns[:9]),
               update_settings(cfg, 1e-3, 0.2), Rng(0))  # fmt: skip
    with pytest.raises(ValueError, match="rollout.actions must be 10 integers in \\[0, 3\\)"):
        update(net, rollout._replace(actions=rollout.actions + 3),
               update_settings(cfg, 1e-3, 0.2), Rng(0))  # fmt: skip
    with pytest.raises(ValueError, match="rollout.valid must be None or a bool array of shape"):
        update(net, rollout._replace(valid=np.ones(10)), update_settings(cfg, 1e-3, 0.2), Rng(0))
    with pytest.raises(ValueError, match="learning_rate must be a finite number >= 0"):
        update_settings(cfg, float("nan"), 0.2)


def masked(rollout, seed=3):
    """``rollout`` with random action masks (the action taken always legal)."""
    rng = np.random.default_rng(seed)
    masks = rng.random((len(rollout.actions), N_ACT)) < 0.6
    masks[np.arange(len(masks)), rollout.actions] = True
    return rollout._replace(masks=masks)


@pytest.mark.parametrize(("shared", "activation"), ARCHS, ids=ARCH_IDS)
def test_masked_loss_and_gradients_match_torch_and_finite_differences(shared, activation):
    torch = pytest.importorskip("torch")
    cfg, net = make(shared, activation, ent_coef=0.05)
    rollout = masked(make_rollout(net, 40))
    assert not rollout.masks.all()
    idx = np.arange(40)[5:29]
    s = update_settings(cfg, 3e-4, 0.2)
    check_against_torch(torch, net, shared, activation, rollout, idx, s)
    # float64 against finite differences of the masked loss
    cfg, net = make(shared, activation, dtype=np.float64, seed=4, ent_coef=0.05)
    rollout = masked(make_rollout(net, 30, seed=5), seed=6)
    check_against_finite_differences(net, shared, activation, rollout, idx[:20], s)


def test_masked_updates_match_torch_adam():
    torch = pytest.importorskip("torch")
    cfg, net = make(False, "relu", dtype=np.float64, n_epochs=5, batch_size=16, ent_coef=0.01)
    rollout = masked(make_rollout(net, 50, seed=7))
    s = update_settings(cfg, 3e-3, 0.2)
    ref, ref_steps = torch_update(torch, net, False, "relu", rollout, s, Rng(11).state, 5)
    stats = update(net, rollout, s, Rng(11))
    assert stats["n_gradient_steps"] == ref_steps == 20
    np.testing.assert_allclose(net.params, ref, rtol=1e-9, atol=1e-12)


def test_masks_that_forbid_a_taken_action_are_refused():
    cfg, net = make(False, "tanh")
    rollout = masked(make_rollout(net, 10))
    bad = rollout.masks.copy()
    bad[4, rollout.actions[4]] = False
    with pytest.raises(ValueError, match="rollout.masks must allow every action taken in a "
                       "valid row, got rows \\[4\\]"):  # fmt: skip
        update(net, rollout._replace(masks=bad), update_settings(cfg, 1e-3, 0.2), Rng(0))
    with pytest.raises(ValueError, match="rollout.masks must be None or a bool array"):
        update(net, rollout._replace(masks=np.ones((10, 2), dtype=bool)),
               update_settings(cfg, 1e-3, 0.2), Rng(0))  # fmt: skip
