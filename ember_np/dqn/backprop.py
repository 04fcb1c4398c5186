"""Compiled backward pass of the Q-network's MLP (numba kernel, public to the package).

:func:`backward` takes any gradient of the output layer, so the plain Q head
(``learn.py``: the Huber TD loss) and the distributional heads
(``distributional.py``: cross-entropy, quantile Huber) share it.
"""

from __future__ import annotations

import numpy as np

from ember_np._blas import gemm
from ember_np._jit import kernel
from ember_np.dqn.head_kernels import n_atoms
from ember_np.dqn.head_kernels import n_layers as n_layers_of
from ember_np.dqn.mlp import layer, layer_norm_backward, layout


@kernel
def backward(
    params: np.ndarray, sizes: np.ndarray, obs: np.ndarray, acts: np.ndarray, dq: np.ndarray,
    grads: np.ndarray,
) -> None:  # fmt: skip
    """MLP backward pass from any gradient of the output layer.

    params : float (num_params,); sizes : int64 (n_layers + 1,), or with a head's suffix.
    obs : float (B, obs_size), the input of the forward pass.
    acts : the workspace :func:`forward_into` filled for ``obs`` with these params.
    dq : float (B, n_out), d loss / d(output layer), n_out = n_actions * n_atoms
        (n_atoms 1 for a plain Q head: d loss / d Q); rows may be sparse (zeros
        are skipped). A dueling network (:func:`layout`) gets its two heads'
        gradients from the same ``dq``, per atom (see the comment inside).
    grads : float (num_params,), written with d loss / d params (same layout).
    """
    batch = obs.shape[0]
    n_layers = n_layers_of(sizes)
    n_act = sizes[n_layers]  # the output layer's width: actions x atoms
    atoms = n_atoms(sizes)
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
    # loops are contiguous and vectorise. A distributional head's rows hold
    # n_atoms nonzeros each: BLAS then (dQ^T h, and dQ W_L^T below).
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
    if atoms > 1:
        gemm(dq, h_in, gw_t, True, False, 0.0)
        for i in range(batch):
            for j in range(n_act):
                gb[j] += dq[i, j]
    for i in range(batch if atoms == 1 else 0):
        for j in range(n_act):
            gij = dq[i, j]
            if gij != 0.0:
                gb[j] += gij
                row = gw_t[j]
                for k in range(n_in):
                    row[k] += h_in[i, k] * gij
    # Dueling head (the last layer is A and V's W_V (n_in, atoms), b_V (atoms,)
    # follow at ``p``; a plain Q head has one atom): Q_j = V + A_j - mean(A),
    # per atom t over the units j = a * atoms + t. With g a row of dQ,
    # dLoss/dA_j = g_j - mean_a(g) and dLoss/dV_t = sum_a(g), so from the sums
    # above (taken as if A were Q): dW_V[:, t] = sum_a dW[:, j], db_V[t] =
    # sum_a db_j, dW_A[:, j] = dW[:, j] - dW_V[:, t] / n_actions and db_A =
    # db - db_V / n_actions. And Q is linear in h through W_eff[:, j] =
    # W_A[:, j] - mean_a(W_A[:, j]) + W_V[:, t], which gives dh below from the
    # same sparse dQ (no dense dA rows). One atom (a plain Q head) keeps its own
    # loops: the general ones, compiled with fast-math, round its sums differently.
    dueling = v_off >= 0
    n_heads = n_act // atoms  # the actions
    if dueling and atoms == 1:
        gw_v1 = grads[p : p + n_in]
        gw_v1[:] = 0.0
        gb_v1 = gb[0]
        for j in range(1, n_act):
            gb_v1 += gb[j]
        for j in range(n_act):
            row = gw_t[j]
            for k in range(n_in):
                gw_v1[k] += row[k]
        grads[p + n_in] = gb_v1
        inv_n = params.dtype.type(1.0 / n_act)
        for j in range(n_act):
            gb[j] -= gb_v1 * inv_n
            row = gw_t[j]
            for k in range(n_in):
                row[k] -= gw_v1[k] * inv_n
    elif dueling:
        gw_v = grads[p : p + n_in * atoms].reshape((n_in, atoms))
        gw_v[:, :] = 0.0
        gb_v = grads[p + n_in * atoms : p + (n_in + 1) * atoms]
        for t in range(atoms):
            s = gb[t]
            for a in range(1, n_heads):
                s += gb[a * atoms + t]
            gb_v[t] = s
        for j in range(n_act):
            t = j % atoms
            row = gw_t[j]
            for k in range(n_in):
                gw_v[k, t] += row[k]
        inv_n = params.dtype.type(1.0 / n_heads)
        for j in range(n_act):
            t = j % atoms
            gb[j] -= gb_v[t] * inv_n
            row = gw_t[j]
            for k in range(n_in):
                row[k] -= gw_v[k, t] * inv_n
    for k in range(n_in):
        for j in range(n_act):
            gw[k, j] = gw_t[j, k]
    if last == 0:
        return
    w_t = gw_t  # reuse the scratch for W_L transposed (W_eff for a dueling head)
    for k in range(n_in):
        if dueling and atoms == 1:
            mean = w_last[k, 0]
            for j in range(1, n_act):
                mean += w_last[k, j]
            shift = params[p + k] - mean / n_act
            for j in range(n_act):
                w_t[j, k] = w_last[k, j] + shift
        elif dueling:
            for t in range(atoms):
                mean = w_last[k, t]
                for a in range(1, n_heads):
                    mean += w_last[k, a * atoms + t]
                shift = params[p + k * atoms + t] - mean / n_heads
                for a in range(n_heads):
                    w_t[a * atoms + t, k] = w_last[k, a * atoms + t] + shift
        else:
            for j in range(n_act):
                w_t[j, k] = w_last[k, j]
    delta = delta_a[: batch * n_in].reshape((batch, n_in))
    if atoms > 1:
        gemm(dq, w_t, delta, False, False, 0.0)
        for i in range(batch):
            for k in range(n_in):
                delta[i, k] = delta[i, k] if h_in[i, k] > 0.0 else 0.0
    for i in range(batch if atoms == 1 else 0):
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
