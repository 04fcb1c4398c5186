"""Compiled learning step of the Q-network: TD targets, Huber loss, backward pass,
gradient clipping, Adam and Polyak averaging (numba kernels, public to the package).

Reading map of one update, in call order::

    checked_update         QNetwork.update's one compiled call
      check_batch          actions in range, everything finite, weights >= 0
      dqn_update
        loss_and_grads
          td_targets       y = r + discount * Q_target(s', a*)     (the batch's discounts:
                           gamma^m * mask; masks: a* over the next state's legal actions)
          forward_into     online forward, every activation kept  (dueling: dueling_combine)
          huber_grad       dLoss/dQ = w * clip(Q - y, +-delta) / B  (PER: weights in, |TD| out)
          backward         MLP backward from any dLoss/dQ           (dueling: both heads, W_eff)
        clip_grad_norm     torch's clip_grad_norm_ rule
        adam_step          torch.optim.Adam
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ember_np._blas import gemm
from ember_np._jit import kernel
from ember_np.dqn.mlp import (
    acts_size,
    argmax,
    argmax_packed,
    forward_into,
    layer,
    layer_norm_backward,
    layout,
)  # fmt: skip
from ember_np.types import Batch

ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.999
ADAM_EPS = 1e-8
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6)
ADAM_FLUSH = 1e-30  # Adam moments below this are set to 0 (see adam_step)


class NetState(NamedTuple):
    """The arrays one DQN update reads and writes, passed to kernels as one value.

    params : ndarray of float32, shape (num_params,)
        The online network's parameters (layout above); updated in place.
    target : ndarray of float32, shape (num_params,)
        The target network's parameters (read only during an update).
    sizes : ndarray of int64, shape (n_layers + 1,)
        ``(obs_size, hidden..., n_actions)``.
    grads : ndarray of float32, shape (num_params,)
        Scratch for the gradient (overwritten by every update).
    adam_m, adam_v : ndarray of float32, shape (num_params,)
        Adam's first and second moments.
    adam_t : ndarray of int64, shape (1,)
        Adam's step count (the bias-correction ``t``).

    Tests build one of float64 arrays for finite differences: every kernel
    below works in the dtype of ``params``.
    """

    params: np.ndarray
    target: np.ndarray
    sizes: np.ndarray
    grads: np.ndarray
    adam_m: np.ndarray
    adam_v: np.ndarray
    adam_t: np.ndarray


class UpdateSettings(NamedTuple):
    """The scalar settings of one DQN update (build with :func:`update_settings`).

    There is no discount here: the batch carries one per sample
    (``Batch.discounts``, gamma * mask or gamma^m * mask, written by the replay
    buffer, the one owner of gamma and n_step).
    """

    learning_rate: float
    huber_delta: float
    double_dqn: bool
    max_grad_norm: float  # <= 0: no clipping


def update_settings(
    learning_rate: float, huber_delta: float, double_dqn: bool, max_grad_norm: float | None
) -> UpdateSettings:
    """The one place an :class:`UpdateSettings` is built: fixed Python types, so
    kernels taking it compile once (an int where a float was would compile again)."""
    clip = -1.0 if max_grad_norm is None else float(max_grad_norm)
    return UpdateSettings(float(learning_rate), float(huber_delta), bool(double_dqn), clip)


class PerSample(NamedTuple):
    """Per-sample arrays of an update beyond the batch's transitions and discounts;
    each may have length 0.

    weights : ndarray of float32, shape (batch,) or (0,)
        Non-negative importance weights: loss = mean_i w_i * Huber_i; length 0: all 1.
    td_errors : ndarray of float32, shape (batch,) or (0,)
        Filled with |y_i - Q(s_i, a_i)| (before the step) when of length batch.
    """

    weights: np.ndarray
    td_errors: np.ndarray


@kernel
def td_targets(
    net: NetState, batch: Batch, hp: UpdateSettings, acts: np.ndarray, y: np.ndarray
) -> None:
    """TD targets of a batch: y_i = r_i + discount_i * Q_target(s'_i, a*_i).

    net : NetState; params and target are read (any float dtype).
    batch : Batch; obs/next_obs (B, obs_size), actions/rewards (B,), float like
        params; discounts float64 (B,): gamma * mask_i for a one-step
        transition, gamma^m * mask_i for an m-step one (the buffer's).
    hp : UpdateSettings; double_dqn is read.
    acts : scratch of the params dtype, at least B * sum(sizes[1:]) values.
    y : float64 (B,), written.

    a*_i = argmax_a Q_target(s'_i, a), or argmax_a Q_online(s'_i, a) for
    double DQN, with a over the legal actions of s'_i when the batch has
    ``next_action_masks`` rows (packed bits, :func:`argmax_packed`); y is a
    constant (no gradient flows into the target).
    Assumes finite inputs (QNetwork.update checks them).
    """
    sizes = net.sizes
    rewards = batch.rewards
    batch_size = rewards.shape[0]
    n_act = sizes[sizes.shape[0] - 1]
    best = np.empty(batch_size, dtype=np.int64)
    legal = batch.next_action_masks
    masked = legal.shape[0] > 0
    if hp.double_dqn:
        q_off = forward_into(net.params, sizes, batch.next_obs, acts)
        q_next = acts[q_off : q_off + batch_size * n_act].reshape((batch_size, n_act))
        for i in range(batch_size):
            best[i] = argmax_packed(q_next[i], legal[i]) if masked else argmax(q_next[i])
    q_off = forward_into(net.target, sizes, batch.next_obs, acts)
    q_next = acts[q_off : q_off + batch_size * n_act].reshape((batch_size, n_act))
    if not hp.double_dqn:
        for i in range(batch_size):
            best[i] = argmax_packed(q_next[i], legal[i]) if masked else argmax(q_next[i])
    discounts = batch.discounts
    for i in range(batch_size):
        y[i] = rewards[i] + discounts[i] * q_next[i, best[i]]


@kernel
def huber_grad(
    q: np.ndarray, actions: np.ndarray, y: np.ndarray, huber_delta: float, per: PerSample,
    dq: np.ndarray,
) -> float:  # fmt: skip
    """Weighted mean Huber loss and its gradient w.r.t. the Q-values.

    q : float (B, n_actions), the online Q-values; actions : int (B,) in [0, n_actions).
    y : float64 (B,), the TD targets. huber_delta : float > 0.
    per : PerSample; weights (B,) >= 0 or (0,) for all 1; td_errors (B,) or (0,),
        written with |d_i| when of length B.
    dq : float (B, n_actions), written: d loss / d q (zero except at (i, a_i)).

    d_i = Q(s_i, a_i) - y_i; loss = mean_i w_i * Huber(d_i), Huber(d) = d^2 / 2
    for |d| <= delta, else delta * (|d| - delta / 2);
    d loss / d Q(s_i, a_i) = w_i * clip(d_i, -delta, delta) / B. Returns the loss.
    """
    batch_size = q.shape[0]
    weights = per.weights
    weighted = weights.shape[0] > 0
    td_out = per.td_errors
    write_td = td_out.shape[0] > 0
    dq[:, :] = 0.0
    loss = 0.0
    inv_b = 1.0 / batch_size
    for i in range(batch_size):
        w = weights[i] if weighted else 1.0
        d = q[i, actions[i]] - y[i]
        ad = abs(d)
        if write_td:
            td_out[i] = ad
        if ad <= huber_delta:
            loss += w * (0.5 * d * d)
            dq[i, actions[i]] = w * d * inv_b
        else:
            loss += w * (huber_delta * (ad - 0.5 * huber_delta))
            dq[i, actions[i]] = w * (huber_delta if d > 0 else -huber_delta) * inv_b
    return loss * inv_b


@kernel
def backward(
    params: np.ndarray, sizes: np.ndarray, obs: np.ndarray, acts: np.ndarray, dq: np.ndarray,
    grads: np.ndarray,
) -> None:  # fmt: skip
    """MLP backward pass from any gradient of the output layer.

    params : float (num_params,); sizes : int64 (n_layers + 1,).
    obs : float (B, obs_size), the input of the forward pass.
    acts : the workspace :func:`forward_into` filled for ``obs`` with these params.
    dq : float (B, n_actions), d loss / d Q; rows may be sparse (zeros are skipped).
        A dueling network (``params`` longer than :func:`plain_size`) gets its
        two heads' gradients from the same ``dq`` (see the comment inside).
    grads : float (num_params,), written with d loss / d params (same layout).
    """
    batch = obs.shape[0]
    n_layers = sizes.shape[0] - 1
    n_act = sizes[n_layers]
    width = 0
    for l in range(1, n_layers + 1):
        width = max(width, sizes[l])
    # Offsets of each layer's parameters and of its activation in ``acts``.
    p_offs = np.empty(n_layers, dtype=np.int64)
    a_offs = np.empty(n_layers, dtype=np.int64)
    p = 0
    a = 0
    for l in range(n_layers):
        p_offs[l] = p
        a_offs[l] = a
        p += sizes[l] * sizes[l + 1] + sizes[l + 1]
        a += batch * sizes[l + 1]
    # LayerNorm (see layout, forward_into): hidden layer l's gain and bias
    # start at ln_p[l] in params, its saved xhat and rstd at ln_a[l] in acts.
    v_off, ln_off = layout(params.shape[0], sizes)
    layer_norm = ln_off >= 0
    ln_p = np.empty(n_layers, dtype=np.int64)
    ln_a = np.empty(n_layers, dtype=np.int64)
    for l in range(n_layers - 1):
        ln_p[l] = ln_off
        ln_a[l] = a
        ln_off += 2 * sizes[l + 1]
        a += batch * (sizes[l + 1] + 1)

    delta_a = np.empty(batch * width, dtype=params.dtype)
    delta_b = np.empty(batch * width, dtype=params.dtype)

    # Output layer: dW_L = h^T dQ, db_L = column sums of dQ, dh = dQ W_L^T.
    # dQ is mostly zeros for DQN (only Q(s_i, a_i) enters the loss), so loop
    # over its nonzeros, on transposed (n_actions, n_in) copies so the inner
    # loops are contiguous and vectorise.
    last = n_layers - 1
    n_in = sizes[last]
    w_last, _ = layer(params, sizes, p_offs[last], last)
    gw, gb = layer(grads, sizes, p_offs[last], last)
    gb[:] = 0.0
    if last == 0:
        h_in = obs
    else:
        h_in = acts[a_offs[last - 1] : a_offs[last - 1] + batch * n_in].reshape((batch, n_in))
    gw_t = np.zeros((n_act, n_in), dtype=params.dtype)
    for i in range(batch):
        for j in range(n_act):
            gij = dq[i, j]
            if gij != 0.0:
                gb[j] += gij
                row = gw_t[j]
                for k in range(n_in):
                    row[k] += h_in[i, k] * gij
    # Dueling head (params longer than the plain MLP; the last layer is A and
    # V's W_V (n_in,), b_V follow at ``p``): Q_j = V + A_j - mean(A). With g a
    # row of dQ, dLoss/dA_j = g_j - mean(g) and dLoss/dV = sum(g), so from the
    # sums above (taken as if A were Q): dW_V = sum_j dW[:, j], db_V = sum_j db_j,
    # dW_A[:, j] = dW[:, j] - dW_V / n and db_A = db - db_V / n. And Q is linear
    # in h through W_eff[:, j] = W_A[:, j] - mean_j(W_A) + W_V, which gives dh
    # below from the same sparse dQ (no dense dA rows).
    dueling = v_off >= 0
    if dueling:
        gw_v = grads[p : p + n_in]
        gw_v[:] = 0.0
        gb_v = gb[0]
        for j in range(1, n_act):
            gb_v += gb[j]
        for j in range(n_act):
            row = gw_t[j]
            for k in range(n_in):
                gw_v[k] += row[k]
        grads[p + n_in] = gb_v
        inv_n = params.dtype.type(1.0 / n_act)
        for j in range(n_act):
            gb[j] -= gb_v * inv_n
            row = gw_t[j]
            for k in range(n_in):
                row[k] -= gw_v[k] * inv_n
    for k in range(n_in):
        for j in range(n_act):
            gw[k, j] = gw_t[j, k]
    if last == 0:
        return
    w_t = gw_t  # reuse the scratch for W_L transposed (W_eff for a dueling head)
    for k in range(n_in):
        if dueling:
            mean = w_last[k, 0]
            for j in range(1, n_act):
                mean += w_last[k, j]
            shift = params[p + k] - mean / n_act
            for j in range(n_act):
                w_t[j, k] = w_last[k, j] + shift
        else:
            for j in range(n_act):
                w_t[j, k] = w_last[k, j]
    delta = delta_a[: batch * n_in].reshape((batch, n_in))
    for i in range(batch):
        # dh_i = sum_j dQ[i, j] W_L[:, j]; DQN's rows have one nonzero, taken
        # in one pass (with the ReLU below) as before the split.
        nonzero = 0
        j_last = 0
        for j in range(n_act):
            if dq[i, j] != 0.0:
                nonzero += 1
                j_last = j
        row = delta[i]
        if nonzero <= 1:
            gij = dq[i, j_last]
            w_row = w_t[j_last]
            for k in range(n_in):
                # dh through ReLU: zero where the activation was clipped at 0.
                v = gij * w_row[k]
                row[k] = v if h_in[i, k] > 0.0 else 0.0
            continue
        row[:] = 0.0
        for j in range(n_act):
            gij = dq[i, j]
            if gij != 0.0:
                w_row = w_t[j]
                for k in range(n_in):
                    row[k] += gij * w_row[k]
        for k in range(n_in):
            row[k] = row[k] if h_in[i, k] > 0.0 else 0.0

    # Hidden layers, from the top down: delta is dLoss/d(pre-activation)
    # (with LayerNorm, first taken back through it from dLoss/d(its output)).
    for l in range(last - 1, -1, -1):
        n_in = sizes[l]
        n_out = sizes[l + 1]
        w, _ = layer(params, sizes, p_offs[l], l)
        gw, gb = layer(grads, sizes, p_offs[l], l)
        if layer_norm:
            o = ln_a[l]
            xhat = acts[o : o + batch * n_out].reshape((batch, n_out))
            rstd = acts[o + batch * n_out : o + batch * n_out + batch]
            g = ln_p[l]
            g_gain = grads[g : g + n_out]
            g_beta = grads[g + n_out : g + 2 * n_out]
            layer_norm_backward(params[g : g + n_out], xhat, rstd, delta, g_gain, g_beta)
        if l == 0:
            h_in = obs
        else:
            h_in = acts[a_offs[l - 1] : a_offs[l - 1] + batch * n_in].reshape((batch, n_in))
        # dW_l = h_l^T delta and db_l = column sums of delta. A narrow input
        # (the observation layer, in <= 8) is faster by hand than through BLAS.
        gb[:] = 0.0
        if n_in <= 8:
            gw[:, :] = 0.0
            for i in range(batch):
                for k in range(n_in):
                    a = h_in[i, k]
                    for j in range(n_out):
                        gw[k, j] += a * delta[i, j]
        else:
            gemm(h_in, delta, gw, True, False, 0.0)  # h_l^T delta
        for i in range(batch):
            for j in range(n_out):
                gb[j] += delta[i, j]
        if l > 0:
            spare = delta_b if (last - 1 - l) % 2 == 0 else delta_a
            nxt = spare[: batch * n_in].reshape((batch, n_in))
            gemm(delta, w, nxt, False, True, 0.0)  # dh_l = delta W_l^T
            for i in range(batch):
                for k in range(n_in):
                    # a select, not a branch: the ReLU pattern is unpredictable
                    nxt[i, k] = nxt[i, k] if h_in[i, k] > 0.0 else 0.0
            delta = nxt


@kernel
def loss_and_grads(net: NetState, batch: Batch, per: PerSample, hp: UpdateSettings) -> float:
    """Weighted mean Huber TD loss of a batch; its gradient goes to ``net.grads``.

    The whole update, in reading order: TD targets (:func:`td_targets`), the
    online forward pass keeping every activation (:func:`forward_into`), the
    per-sample loss gradient (:func:`huber_grad`), the backward pass
    (:func:`backward`). Arguments as those kernels document; works in any
    float dtype (float32 in production, float64 for finite-difference tests).
    """
    params = net.params
    sizes = net.sizes
    obs = batch.obs
    batch_size = obs.shape[0]
    n_layers = sizes.shape[0] - 1
    n_act = sizes[n_layers]
    acts = np.empty(acts_size(params.shape[0], sizes, batch_size), dtype=params.dtype)
    y = np.empty(batch_size, dtype=np.float64)
    td_targets(net, batch, hp, acts, y)
    q_off = forward_into(params, sizes, obs, acts)
    q = acts[q_off : q_off + batch_size * n_act].reshape((batch_size, n_act))
    dq = np.empty((batch_size, n_act), dtype=params.dtype)
    loss = huber_grad(q, batch.actions, y, hp.huber_delta, per, dq)
    backward(params, sizes, obs, acts, dq, net.grads)
    return loss


@kernel
def clip_grad_norm(grads: np.ndarray, max_norm: float) -> float:
    """Scale ``grads`` so its global L2 norm is at most ``max_norm`` (torch rule).

    grads : float (num_params,), scaled in place. max_norm : float; <= 0
    disables clipping. coef = max_norm / (norm + 1e-6), applied when coef < 1.
    Returns the norm before clipping.
    """
    acc = np.float32(0.0)
    for i in range(grads.shape[0]):
        acc += grads[i] * grads[i]
    norm = math.sqrt(acc)
    if max_norm > 0.0:
        coef = max_norm / (norm + CLIP_EPS)
        if coef < 1.0:
            c = grads.dtype.type(coef)
            for i in range(grads.shape[0]):
                grads[i] *= c
    return norm


@kernel
def adam_step(net: NetState, lr: float) -> None:
    """One bias-corrected Adam step of ``net.params`` along ``net.grads``, as
    ``torch.optim.Adam`` (betas 0.9, 0.999, eps 1e-8, no weight decay).

    net : NetState; params, adam_m, adam_v, adam_t are updated in place.
    lr : float > 0.

    t += 1; m <- m + (1 - b1)(g - m); v <- b2 v + (1 - b2) g^2;
    p <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
    """
    params = net.params
    grads = net.grads
    m = net.adam_m
    v = net.adam_v
    adam_t = net.adam_t
    adam_t[0] += 1
    t = adam_t[0]
    step_size = lr / (1.0 - ADAM_BETA1**t)
    bc2_sqrt = math.sqrt(1.0 - ADAM_BETA2**t)
    dt = params.dtype.type
    s = dt(step_size)
    inv_bc2 = dt(1.0 / bc2_sqrt)
    one_m_b1 = dt(1.0 - ADAM_BETA1)
    b2 = dt(ADAM_BETA2)
    one_m_b2 = dt(1.0 - ADAM_BETA2)
    e = dt(ADAM_EPS)
    tiny = dt(ADAM_FLUSH)
    zero = dt(0.0)
    for i in range(params.shape[0]):
        gi = grads[i]
        mi = m[i] + one_m_b1 * (gi - m[i])
        vi = b2 * v[i] + one_m_b2 * gi * gi
        # A unit whose gradient stays 0 (a dead ReLU) decays m and v towards
        # subnormal floats, which x86 handles ~100x slower: flush them to 0.
        # Below 1e-30 the step lr * m / (sqrt(v) + eps) is < 1e-19, i.e. nothing.
        mi = mi if abs(mi) >= tiny else zero
        vi = vi if vi >= tiny else zero
        m[i] = mi
        v[i] = vi
        params[i] -= s * mi / (math.sqrt(vi) * inv_bc2 + e)


@kernel
def dqn_update(net: NetState, batch: Batch, per: PerSample, hp: UpdateSettings) -> float:
    """One full DQN gradient step: loss and gradients, clipping, Adam.

    Parameters
    ----------
    net : NetState
        ``params``, ``grads``, ``adam_m``, ``adam_v`` and ``adam_t`` are updated
        in place; ``target`` is read.
    batch : Batch
        obs, next_obs of float32, shape (B, obs_size); actions of int64, rewards
        and masks of float32, shape (B,); discounts of float64, shape (B,);
        next_action_masks of uint8, shape (B, ceil(n_actions / 8)) or no rows.
        Precondition: valid (see :func:`check_batch`).
    per : PerSample
        Importance weights in, |TD errors| out (each of length B or 0).
    hp : UpdateSettings
        learning_rate > 0, huber_delta > 0, double_dqn, max_grad_norm (<= 0:
        no clipping).

    Returns
    -------
    float
        The (weighted) mean Huber loss before the step.
    """
    loss = loss_and_grads(net, batch, per, hp)
    clip_grad_norm(net.grads, hp.max_grad_norm)
    adam_step(net, hp.learning_rate)
    return loss


@kernel
def checked_update(net: NetState, batch: Batch, per: PerSample, hp: UpdateSettings) -> tuple:
    """:func:`check_batch`, then :func:`dqn_update` if the batch is valid.

    One call from Python instead of two.

    Parameters
    ----------
    net, batch, per, hp
        As :func:`dqn_update` (the batch need not be valid).

    Returns
    -------
    code : int
        0, or :func:`check_batch`'s nonzero code (nothing changed then).
    loss : float
        The loss before the step, or NaN.
    """
    code = check_batch(batch, net.sizes[net.sizes.shape[0] - 1], per)
    if code != 0:
        return code, np.nan
    return 0, dqn_update(net, batch, per, hp)


@kernel
def polyak(dst: np.ndarray, src: np.ndarray, tau: float) -> None:
    """dst <- tau * src + (1 - tau) * dst (Polyak averaging).

    Parameters
    ----------
    dst : ndarray of float32 (or float64), shape (n,)
        Updated in place.
    src : ndarray of dst's dtype, shape (n,)
    tau : float
        Precondition: ``0 < tau <= 1``.
    """
    t = dst.dtype.type(tau)
    keep = dst.dtype.type(1.0 - tau)
    for i in range(dst.shape[0]):
        dst[i] = t * src[i] + keep * dst[i]


@kernel
def check_batch(batch: Batch, n_actions: int, per: PerSample) -> int:
    """0 if the batch is valid, else the code of the first problem found.

    batch : Batch as :func:`td_targets` takes it; n_actions : int;
    per : PerSample (arrays of length B or 0).

    1: an action outside [0, n_actions); 2: a non-finite observation; 3: a
    non-finite reward, mask, discount or weight; 4: a negative weight;
    5: ``batch.discounts`` not of length B.
    """
    actions = batch.actions
    obs = batch.obs
    next_obs = batch.next_obs
    for i in range(actions.shape[0]):
        if actions[i] < 0 or actions[i] >= n_actions:
            return 1
    for i in range(obs.shape[0]):
        for j in range(obs.shape[1]):
            if not np.isfinite(obs[i, j]) or not np.isfinite(next_obs[i, j]):
                return 2
        if not np.isfinite(batch.rewards[i]) or not np.isfinite(batch.masks[i]):
            return 3
    if batch.discounts.shape[0] != actions.shape[0]:
        return 5
    for i in range(actions.shape[0]):
        if not np.isfinite(batch.discounts[i]):
            return 3
    for i in range(per.weights.shape[0]):
        if not np.isfinite(per.weights[i]):
            return 3
        if per.weights[i] < 0.0:
            return 4
    return 0
