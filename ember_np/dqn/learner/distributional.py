"""Compiled loss of the distributional heads, C51 and QR-DQN: the target
distribution, the loss, and its gradient for the shared backward pass (numba
kernels, public to the package). ``head.py`` describes the heads.

Reading map of one distributional update (``learn.loss_and_grads`` comes here
when ``sizes`` has a head), in call order::

    distributional_loss_and_grads
      next_actions          a* = argmax over legal a of E[Z(s', a)] (double DQN: online net)
      c51_targets           m = Phi(r + discount * z), p'(s', a*) projected on the support
      | qr_targets          T theta_j = r + discount * theta_target(s', a*)_j
      forward_into          online forward, every activation kept (dueling: per atom)
      c51_grad              cross-entropy -sum_k m_k log p_k(s, a); d/dx_k = p_k - m_k
      | qr_grad             quantile Huber loss (kappa = huber_delta), pairs of quantiles
      distributional_backward   backprop.py, from the output layer's gradient

Per-sample weights (PER's importance weights) scale each sample's loss; the
priorities written to ``per.td_errors`` are the cross-entropy for C51 (as
Rainbow, Hessel et al. 2018) and the mean |T theta_j' - theta_j| over all
pairs of quantiles for QR-DQN (the distributional counterpart of |TD error|).
"""

from __future__ import annotations

import math

import numpy as np

from ember_np._jit import kernel, ordered_kernel
from ember_np.dqn.heads.head import C51
from ember_np.dqn.heads.head_kernels import expected_q, support_bounds
from ember_np.dqn.learner.update_types import NetState, PerSample, UpdateSettings
from ember_np.nn.backprop import distributional_backward
from ember_np.nn.mlp import acts_size, argmax, argmax_packed, first_nonfinite_row, forward_into
from ember_np.nn.shape import head_kind, n_actions, n_atoms
from ember_np.nn.softmax import exp_blocks, exp_rows, normalized
from ember_np.types import Batch


@kernel
def next_actions(
    net: NetState, batch: Batch, hp: UpdateSettings, acts: np.ndarray, best: np.ndarray
) -> int:
    """The bootstrap actions a*_i, and the target network's outputs for s'.

    a*_i = argmax_a E[Z_target(s'_i, a)], or argmax_a E[Z_online(s'_i, a)]
    for double DQN (:func:`expected_q`), over the legal actions of s'_i when
    the batch has ``next_action_masks`` rows (packed bits).

    net, batch, hp : as ``learn.td_targets``; acts : scratch of the params
    dtype (``acts_size`` values for B rows); best : int64 (B,), written.

    Returns
    -------
    int
        The offset in ``acts`` of the target network's output layer for
        ``batch.next_obs``, (B, n_actions * n_atoms).
    """
    sizes = net.sizes
    batch_size = batch.rewards.shape[0]
    n_act = n_actions(sizes)
    n_out = n_act * n_atoms(sizes)
    q = np.empty((batch_size, n_act), dtype=net.params.dtype)
    if hp.double_dqn:
        off = forward_into(net.params, sizes, batch.next_obs, acts)
        expected_q(acts[off : off + batch_size * n_out].reshape((batch_size, n_out)), sizes, q)
    off = forward_into(net.target, sizes, batch.next_obs, acts)
    if not hp.double_dqn:
        expected_q(acts[off : off + batch_size * n_out].reshape((batch_size, n_out)), sizes, q)
    legal = batch.next_action_masks
    masked = legal.shape[0] > 0
    for i in range(batch_size):
        best[i] = argmax_packed(q[i], legal[i]) if masked else argmax(q[i])
    return off


@ordered_kernel
def c51_project(
    p: np.ndarray, reward: float, discount: float, v_min: float, v_max: float, m: np.ndarray,
    parts: np.ndarray,
) -> None:  # fmt: skip
    """The categorical projection of C51 (Bellemare et al. 2017, Algorithm 1).

    p : float (n_atoms,), the next state's probabilities; reward, discount >= 0 :
    float (discount = gamma^m * mask: 0 for a terminal transition, which puts
    all the mass at the clipped reward); v_min < v_max : float, the support's
    ends (:func:`support_bounds`); m : float64 (n_atoms,), written; parts :
    float64 (3, n_atoms), scratch.

    Each atom's return Tz_j = clip(r + discount * z_j, v_min, v_max) sits at
    b_j = (Tz_j - v_min) / dz; its mass p_j goes to the atoms l = floor(b_j)
    and l + 1, in proportion to the nearness: (1 - f) p_j and f p_j, f = b_j - l
    (all of it to l when b_j is an atom).

    Two passes: every atom's l, (1 - f) p_j and f p_j first, in a loop that
    vectorises (clipped by selects: min and max kept it scalar), then the
    sums. b_j never decreases with j (discount >= 0), so the masses of l and
    l + 1 are carried in registers and added to ``m`` when j moves past them:
    the same sums, in the same order, as adding each p_j's parts to ``m`` at
    once (whose store-to-load round trips cost twice the time). One pass with
    both took 10.1 us for 64 samples of 51 atoms, the two 6.3.
    """
    n = m.shape[0]
    dz = (v_max - v_min) / (n - 1)  # as support_step
    inv_dz = 1.0 / dz
    top = n - 1.0
    lows = parts[0]
    ups = parts[1]
    atoms = parts[2]  # l, as a float
    for j in range(n):
        tz = reward + discount * (v_min + j * dz)
        tz = tz if tz > v_min else v_min
        tz = tz if tz < v_max else v_max
        b = (tz - v_min) * inv_dz
        b = b if b > 0.0 else 0.0  # (rounding may step past the ends)
        b = b if b < top else top
        lo = np.floor(b)
        frac = b - lo
        atoms[j] = lo
        lows[j] = p[j] * (1.0 - frac)
        ups[j] = p[j] * frac  # frac = 0 at the last atom
    m[:] = 0.0
    cur = 0  # the atom l being filled, and the masses of l and l + 1 so far
    at_cur = 0.0
    at_next = 0.0
    for j in range(n):
        lo = int(atoms[j])
        if lo != cur:  # store the atoms left behind (any order is right; j's is rising)
            m[cur] += at_cur
            if lo == cur + 1:
                at_cur = at_next
            else:
                m[min(cur + 1, n - 1)] += at_next
                at_cur = 0.0
            at_next = 0.0
            cur = lo
        at_cur += lows[j]
        at_next += ups[j]
    m[cur] += at_cur
    m[min(cur + 1, n - 1)] += at_next


@kernel
def c51_targets(
    target_out: np.ndarray, best: np.ndarray, batch: Batch, sizes: np.ndarray, m: np.ndarray
) -> None:
    """C51's target distributions: row i of ``m`` (float64 (B, n_atoms), written) is
    :func:`c51_project` of softmax(target_out[i, a*_i]) with the batch's reward and
    discount. target_out : float (B, n_actions * n_atoms); best : int64 (B,)."""
    batch_size, n = m.shape
    e = exp_blocks(target_out, best, n)[0]
    p = np.empty(n, dtype=np.float64)
    parts = np.empty((3, n), dtype=np.float64)
    v_min, v_max = support_bounds(sizes)
    for i in range(batch_size):
        normalized(e[i * n : (i + 1) * n], p)
        c51_project(p, batch.rewards[i], batch.discounts[i], v_min, v_max, m[i], parts)


@kernel
def qr_targets(target_out: np.ndarray, best: np.ndarray, batch: Batch, t: np.ndarray) -> None:
    """QR-DQN's target quantiles: t[i, j] = r_i + discount_i * theta_target(s'_i, a*_i)_j.

    target_out : float (B, n_actions * n_quantiles); best : int64 (B,);
    t : float (B, n_quantiles), written (computed in float64, then rounded).
    """
    n = t.shape[1]
    for i in range(t.shape[0]):
        o = best[i] * n
        r = batch.rewards[i]
        d = batch.discounts[i]
        for j in range(n):
            t[i, j] = r + d * target_out[i, o + j]


@ordered_kernel
def c51_grad(
    out: np.ndarray, actions: np.ndarray, m: np.ndarray, per: PerSample, dq: np.ndarray
) -> float:
    """C51's weighted mean cross-entropy and its gradient w.r.t. the output layer.

    out : float (B, n_actions * n_atoms), the online outputs (logits); actions :
    int (B,); m : float64 (B, n_atoms), the target distributions; per : weights
    (B,) or (0,) for all 1, td_errors (B,) or (0,), written with CE_i;
    dq : float like out, written (zero but at action a_i's atoms).

    CE_i = -sum_k m_ik log p_k(s_i, a_i), p = softmax of the logits x;
    loss = mean_i w_i CE_i; d loss / d x_k = w_i (p_k - m_ik) / B (sum_k m_ik = 1).
    Returns the loss.
    """
    batch_size, n = m.shape
    weighted = per.weights.shape[0] > 0
    write_td = per.td_errors.shape[0] > 0
    e, row_max = exp_blocks(out, actions, n)
    p = np.empty(n, dtype=np.float64)
    dq[:, :] = 0.0
    inv_b = 1.0 / batch_size
    loss = 0.0
    for i in range(batch_size):
        o = actions[i] * n
        x = out[i, o : o + n]
        mi = m[i]
        total = normalized(e[i * n : (i + 1) * n], p)
        log_z = row_max[i] + math.log(total)  # log sum_k exp(x_k)
        ce = 0.0
        for k in range(n):
            ce -= mi[k] * (x[k] - log_z)
        w = per.weights[i] if weighted else 1.0
        if write_td:
            per.td_errors[i] = ce
        loss += w * ce
        scale = w * inv_b
        for k in range(n):
            dq[i, o + k] = scale * (p[k] - mi[k])
    return loss * inv_b


@ordered_kernel
def qr_grad(
    out: np.ndarray, actions: np.ndarray, t: np.ndarray, kappa: float, per: PerSample,
    dq: np.ndarray,
) -> float:  # fmt: skip
    """QR-DQN's weighted mean quantile Huber loss and its gradient (Dabney et al. 2018).

    out : float (B, n_actions * N), the online quantiles theta; actions : int (B,);
    t : float like out (B, N), the target quantiles; kappa : float > 0;
    per : weights (B,) or (0,) for all 1, td_errors (B,) or (0,), written with
    mean_{j,j'} |u_jj'|; dq : float like out, written (zero but at a_i's quantiles).

    With u_jj' = t_j' - theta_j and tau_j = (2j + 1) / (2N), the sample's loss is
    L_i = sum_j mean_j' |tau_j - 1{u < 0}| H_kappa(u) / kappa, where H_kappa is
    the Huber loss (computed as c (u - c / 2), c = clip(u, -kappa, kappa)):
    loss = mean_i w_i L_i, and d loss / d theta_j = -(w_i / B) mean_j'
    |tau_j - 1{u < 0}| c / kappa. The pair loop runs in the dtype of ``out``.
    """
    batch_size = out.shape[0]
    n = t.shape[1]
    dt = out.dtype.type
    weighted = per.weights.shape[0] > 0
    write_td = per.td_errors.shape[0] > 0
    k = dt(kappa)
    inv_k = dt(1.0 / kappa)
    half = dt(0.5)
    one = dt(1.0)
    zero = dt(0.0)
    dq[:, :] = 0.0
    inv_b = 1.0 / batch_size
    inv_n = 1.0 / n
    loss = 0.0
    # The pair loop runs over j innermost, each j's sums kept in lj / gj: it
    # vectorises without a horizontal sum per j (j' innermost, two per j, took
    # 1.3x the time), and each sum is still taken over j' in order.
    tau = np.empty(n, dtype=out.dtype)
    for j in range(n):
        tau[j] = dt((2.0 * j + 1.0) * 0.5 * inv_n)
    lj = np.empty(n, dtype=out.dtype)
    gj = np.empty(n, dtype=out.dtype)
    aj = np.empty(n, dtype=out.dtype)
    for i in range(batch_size):
        o = actions[i] * n
        ti = t[i]
        theta = out[i, o : o + n]
        w = per.weights[i] if weighted else 1.0
        scale = -w * inv_b * inv_n
        lj[:] = zero
        gj[:] = zero
        for jp in range(n):
            target = ti[jp]
            for j in range(n):
                u = target - theta[j]
                c = u if u > -k else -k  # (selects: min and max stop the loop vectorising)
                c = c if c < k else k
                wgt = one - tau[j] if u < zero else tau[j]
                lj[j] += wgt * c * (u - half * c)
                gj[j] += wgt * c
        sample = 0.0
        for j in range(n):
            sample += lj[j]
            dq[i, o + j] = scale * (gj[j] * inv_k)
        sample *= inv_n / kappa
        if write_td:  # (its own loop: without priorities the pair loop does less)
            aj[:] = zero
            for jp in range(n):
                target = ti[jp]
                for j in range(n):
                    aj[j] += abs(target - theta[j])
            spread = 0.0
            for j in range(n):
                spread += aj[j]
            per.td_errors[i] = spread * inv_n * inv_n
        loss += w * sample
    return loss * inv_b


@kernel
def distributional_loss_and_grads(
    net: NetState, batch: Batch, per: PerSample, hp: UpdateSettings
) -> float:
    """The weighted mean loss of a distributional head; its gradient goes to
    ``net.grads``. The module docstring has the steps; arguments as
    ``learn.loss_and_grads`` (``hp.huber_delta`` is QR-DQN's kappa). Works in
    any float dtype (float64 for finite-difference tests)."""
    params = net.params
    sizes = net.sizes
    obs = batch.obs
    batch_size = obs.shape[0]
    n = n_atoms(sizes)
    n_out = n_actions(sizes) * n
    acts = np.empty(acts_size(params.shape[0], sizes, batch_size), dtype=params.dtype)
    best = np.empty(batch_size, dtype=np.int64)
    off = next_actions(net, batch, hp, acts, best)
    target_out = acts[off : off + batch_size * n_out].reshape((batch_size, n_out))
    c51 = head_kind(sizes) == C51
    m = np.empty((batch_size if c51 else 0, n), dtype=np.float64)
    t = np.empty((0 if c51 else batch_size, n), dtype=params.dtype)
    if c51:
        c51_targets(target_out, best, batch, sizes, m)
    else:
        qr_targets(target_out, best, batch, t)
    off = forward_into(params, sizes, obs, acts)
    out = acts[off : off + batch_size * n_out].reshape((batch_size, n_out))
    dq = np.empty((batch_size, n_out), dtype=params.dtype)
    if c51:
        loss = c51_grad(out, batch.actions, m, per, dq)
    else:
        loss = qr_grad(out, batch.actions, t, hp.huber_delta, per, dq)
    distributional_backward(params, sizes, obs, acts, dq, batch.actions, net.grads)
    return loss


@kernel
def head_outputs_checked(
    params: np.ndarray, sizes: np.ndarray, x: np.ndarray, out: np.ndarray
) -> int:
    """A distributional head's distributions for every row of ``x``, if all are finite.

    params : float32 (num_params,); sizes : a distributional network's;
    x : float32 (B, obs_size), B >= 1; out : float32 (B, n_actions, n_atoms),
    written: C51's probabilities (softmax per action) or QR-DQN's quantiles.

    Returns -1, or the first row of ``x`` holding NaN or inf (nothing written then).
    """
    row = first_nonfinite_row(x)
    if row >= 0:
        return row
    batch_size = x.shape[0]
    n = n_atoms(sizes)
    n_act = n_actions(sizes)
    acts = np.empty(acts_size(params.shape[0], sizes, batch_size), dtype=params.dtype)
    off = forward_into(params, sizes, x, acts)
    raw = acts[off : off + batch_size * n_act * n].reshape((batch_size, n_act, n))
    if head_kind(sizes) != C51:
        out[:, :, :] = raw
        return -1
    e = exp_rows(raw.reshape((batch_size * n_act, n)))[0]
    for i in range(batch_size):
        for a in range(n_act):
            row = i * n_act + a
            normalized(e[row * n : (row + 1) * n], out[i, a])
    return -1
