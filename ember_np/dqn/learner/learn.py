"""Compiled learning step of the Q-network: TD targets, Huber loss, then the
backward pass, gradient clipping and Adam of ``ember_np/nn/`` (numba kernels,
public to the package).

Reading map of one update, in call order::

    checked_update         QNetwork.update's one compiled call
      check_batch          actions in range, everything finite, weights >= 0
      dqn_update
        resample_noise     noisy layers only: new online and target noise (noisy.py)
        loss_and_grads     (head_loss_and_grads: the plain head's, or a distributional one's)
          td_targets       y = r + discount * Q_target(s', a*)     (the batch's discounts:
                           gamma^m * mask; masks: a* over the next state's legal actions)
          forward_into     nn/mlp.py: online forward, activations kept  (dueling: dueling_combine)
          huber_grad       dLoss/dQ = w * clip(Q - y, +-delta) / B  (PER: weights in, |TD| out)
          backward         nn/backprop.py: MLP backward from any dLoss/dQ (dueling: both heads)
        | distributional_loss_and_grads   a C51 or QR-DQN head: distributional.py
        | noisy_loss_and_grads   noisy layers: any of the above on mu + sigma * eps (noisy.py)
        clip_grad_norm     nn/optim.py: torch's clip_grad_norm_ rule
        adam_step          nn/optim.py: torch.optim.Adam

The NamedTuples the kernels pass (NetState, UpdateSettings, PerSample) live in
``update_types.py`` and are re-exported here.
"""

from __future__ import annotations

import numpy as np
from numba.extending import overload

from ember_np._jit import KERNEL_OPTIONS, inlined_kernel, kernel
from ember_np.dqn.learner.distributional import distributional_loss_and_grads
from ember_np.dqn.learner.noisy import noise_grads, perturb, resample_noise
from ember_np.dqn.learner.update_types import (
    DistNetState,
    NetState,
    NoisyNetState,
    PerSample,
    UpdateSettings,
    net_state,
    update_settings,
)  # fmt: skip
from ember_np.nn.backprop import backward
from ember_np.nn.mlp import acts_size, argmax, argmax_packed, forward_into
from ember_np.nn.optim import ADAM_EPS, adam_step, clip_grad_norm
from ember_np.nn.shape import n_actions
from ember_np.types import Batch

__all__ = [
    "DistNetState",
    "NetState",
    "PerSample",
    "UpdateSettings",
    "backward",
    "check_batch",
    "checked_update",
    "dqn_update",
    "huber_grad",
    "loss_and_grads",
    "net_state",
    "noisy_loss_and_grads",
    "td_targets",
    "update_settings",
]


@inlined_kernel
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
    n_act = n_actions(sizes)
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


@inlined_kernel
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


@inlined_kernel
def loss_and_grads(net: NetState, batch: Batch, per: PerSample, hp: UpdateSettings) -> float:
    """The loss of a batch; its gradient goes to ``net.grads``: the plain head's
    (:func:`plain_loss_and_grads`), or a distributional head's for a
    :class:`DistNetState`, or either's on perturbed weights for a
    :class:`NoisyNetState` (:func:`head_loss_and_grads`). Arguments as those
    kernels document; works in any float dtype (float64 for finite differences)."""
    return head_loss_and_grads(net, batch, per, hp)


def head_loss_and_grads(net: NetState, batch: Batch, per: PerSample, hp: UpdateSettings) -> float:
    """Called by kernels only: chosen when they compile, by the class of ``net``
    (:func:`_head_loss_and_grads_for`), so a plain network's kernels never compile
    the distributional loss (a third more compiling for every first run)."""
    raise TypeError("head_loss_and_grads is dispatched inside compiled kernels only")


@overload(head_loss_and_grads, jit_options=KERNEL_OPTIONS, strict=False)
def _head_loss_and_grads_for(net, batch, per, hp):  # noqa: ANN001, ANN202
    # numba compiles an overload's implementation in full (even one it inlines), so
    # the plain loss is the implementation itself: one compile, linked into its caller
    # (a lambda calling it would be a level more of LLVM's work on the whole update).
    if getattr(net, "instance_class", None) is DistNetState:
        return lambda net, batch, per, hp: distributional_loss_and_grads(net, batch, per, hp)
    if getattr(net, "instance_class", None) is NoisyNetState:
        return lambda net, batch, per, hp: noisy_loss_and_grads(net, batch, per, hp)
    return plain_loss_and_grads.py_func


@inlined_kernel
def plain_loss_and_grads(net: NetState, batch: Batch, per: PerSample, hp: UpdateSettings) -> float:
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
    n_act = n_actions(sizes)
    acts = np.empty(acts_size(params.shape[0], sizes, batch_size), dtype=params.dtype)
    y = np.empty(batch_size, dtype=np.float64)
    td_targets(net, batch, hp, acts, y)
    q_off = forward_into(params, sizes, obs, acts)
    q = acts[q_off : q_off + batch_size * n_act].reshape((batch_size, n_act))
    dq = np.empty((batch_size, n_act), dtype=params.dtype)
    loss = huber_grad(q, batch.actions, y, hp.huber_delta, per, dq)
    backward(params, sizes, obs, acts, dq, batch.actions, net.grads)
    return loss


@kernel
def noisy_loss_and_grads(
    net: NoisyNetState, batch: Batch, per: PerSample, hp: UpdateSettings
) -> float:
    """The loss of a noisy network (``noisy.py``) under the noise in ``net.noise``
    (row 0 the online network's, row 1 the target's); the gradient w.r.t. the
    means and sigmas goes to ``net.grads``.

    The online and target weights are perturbed (mu + sigma * eps, into
    ``net.inner``), the inner network's loss and gradient computed as for any
    network (plain or distributional head), then d/d mu = g and
    d/d sigma = g * eps (:func:`~ember_np.dqn.learner.noisy.noise_grads`).
    """
    inner = net.inner
    perturb(net.params, net.noise[0], net.layers, inner.params)
    perturb(net.target, net.noise[1], net.layers, inner.target)
    # (the dispatch itself, not the loss_and_grads kernel: a kernel calling its own
    # dispatcher for another type loads from numba's cache with an unresolved symbol)
    loss = head_loss_and_grads(inner, batch, per, hp)
    noise_grads(inner.grads, net.noise[0], net.layers, net.grads)
    return loss


@inlined_kernel
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
        The (weighted) mean Huber loss before the step (a distributional
        head's: its weighted mean cross-entropy or quantile Huber loss).
    """
    resample_noise(net)
    loss = loss_and_grads(net, batch, per, hp)
    clip_grad_norm(net.grads, hp.max_grad_norm)
    adam_step(net, hp.learning_rate, ADAM_EPS)
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
    code = check_batch(batch, n_actions(net.sizes), per)
    if code != 0:
        return code, np.nan
    return 0, dqn_update(net, batch, per, hp)


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
