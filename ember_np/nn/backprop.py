"""Compiled backward pass of an MLP (``mlp.py``'s layout; numba kernels, public
to the package).

:func:`backward` takes any gradient of a plain output layer (rows may be sparse:
DQN's Huber TD loss touches one action per sample) and
:func:`distributional_backward` any gradient of a grouped one (DQN's C51 and
QR-DQN losses, ``dqn/learner/distributional.py``); both handle a two-stream
(dueling) output and share the hidden layers (:func:`hidden_backward`).
"""

from __future__ import annotations

import numpy as np

from ember_np._jit import kernel
from ember_np.nn._blas import gemm
from ember_np.nn.mlp import layer, layer_norm_backward, layout
from ember_np.nn.shape import n_atoms
from ember_np.nn.shape import n_layers as n_layers_of


@kernel
def rows_by_action(actions: np.ndarray, n_act: int, order: np.ndarray, starts: np.ndarray) -> None:
    """The batch's rows grouped by action (a counting sort).

    actions : int (B,), each in [0, n_act); order : int64 (B,), written: the
    rows of action 0, then of action 1, ...; starts : int64 (n_act + 1,),
    written: action a's rows are order[starts[a]:starts[a + 1]].
    """
    starts[:] = 0
    for i in range(actions.shape[0]):
        starts[actions[i] + 1] += 1
    for a in range(n_act):
        starts[a + 1] += starts[a]
    fill = starts[:n_act].copy()
    for i in range(actions.shape[0]):
        a = actions[i]
        order[fill[a]] = i
        fill[a] += 1


#: The largest hidden layer (n_in x n_out weights) whose dh = delta W^T runs as
#: an NN product on a copy of W^T (:func:`columns_transposed`): 64 x 64, batch
#: 64, took 6.1 us against the NT product's 7.8 (batch 128: 10.6 against
#: 13.3); at 128 x 128 the copy costs more than it saves (batch 64: 32.6
#: against 28.3; batch 128: 52.7 against 49.0), one thread, OpenBLAS 0.3.31's
#: SkylakeX kernels (2026-12-03).
SMALL_TRANSPOSE = 64 * 64


@kernel
def columns_transposed(w: np.ndarray, col: int | np.int64, out: np.ndarray) -> None:
    """out[t, k] = w[k, col + t]: columns col .. col + n of ``w`` as rows.

    w : float (n_in, width), rows contiguous; col >= 0; out : float (n, n_in),
    written, col + n <= width.

    :func:`head_backward` copies each action's block of W_eff this way and
    takes dh = dQ_a W_a^T as an NN product: OpenBLAS 0.3.31's NT path (B
    transposed) took 1.4-2x the time of its NN one at a distributional head's
    sizes (32 x 51 by 51 x 64: 4.6 us against 2.3, one thread, SkylakeX
    kernels), and the block is copied either way; :func:`backward` does the
    same for hidden layers up to ``SMALL_TRANSPOSE`` weights. The result can
    differ from the NT product's in the last float32 bits (another order of
    the BLAS's blocks).
    """
    n_in = w.shape[0]
    for t in range(out.shape[0]):  # strided reads, contiguous writes: at 256 x 51,
        row = out[t]  # 3.9 us against 19 for contiguous reads and strided writes
        for k in range(n_in):
            row[k] = w[k, col + t]


@kernel
def head_backward(
    params: np.ndarray, grads: np.ndarray, v_off: int, atoms: int, h_in: np.ndarray,
    dq: np.ndarray, actions: np.ndarray, w_last: np.ndarray, gw: np.ndarray, gb: np.ndarray,
    delta: np.ndarray, hidden: bool,
) -> None:  # fmt: skip
    """:func:`backward`'s output layer for a distributional head (atoms > 1), by BLAS.

    params, grads : float (num_params,); v_off : the dueling value head's offset,
    W_V (n_in, atoms) then b_V (atoms,), or -1; h_in : float (B, n_in), the
    layer's input; dq : float (B, n_out), n_out = n_actions * atoms; actions :
    int (B,), row i of dq being zero outside action actions[i]'s atoms, or (0,)
    for a dense dq; w_last :
    float (n_in, n_out); gw, gb : its gradient's views, written; delta : float
    (B, n_in), written with d loss / d(pre-activation of h_in) when ``hidden``.

    dW = h^T dQ, db = column sums of dQ. Dueling, per atom t over the units
    j = a * atoms + t (x_j = V_t + A_j - mean_a A): dW_V[:, t] = sum_a dW[:, j],
    db_V[t] = sum_a db_j, dW_A[:, j] = dW[:, j] - dW_V[:, t] / n_actions, and
    db_A likewise; dh = dQ W_eff^T with W_eff[:, j] = W_A[:, j] - mean_a(W_A[:, j])
    + W_V[:, t] (plain: W_eff = W), then through ReLU.
    """
    batch, n_in = h_in.shape
    n_out = dq.shape[1]
    n_act = n_out // atoms
    # A loss on one action per sample (C51, QR-DQN) leaves each row of dQ zero
    # but at that action's atoms: grouped by action, the two products below
    # take 1 / n_actions of the FLOPs of the dense ones (h^T dQ, dQ W^T).
    grouped = actions.shape[0] > 0
    order = np.empty(batch, dtype=np.int64)
    starts = np.empty(n_act + 1, dtype=np.int64)
    if grouped:
        rows_by_action(actions, n_act, order, starts)
        h_g = np.empty((batch, n_in), dtype=h_in.dtype)
        dq_g = np.empty((batch, atoms), dtype=dq.dtype)
        block = np.empty((n_in, atoms), dtype=gw.dtype)  # a column block of dW
        gb[:] = 0.0
        for a in range(n_act):
            lo, hi = starts[a], starts[a + 1]
            c = a * atoms
            for r in range(lo, hi):  # (loops: numba's row assignment costs 50 ns a row)
                i = order[r]
                for k in range(n_in):
                    h_g[r, k] = h_in[i, k]
                for t in range(atoms):
                    g = dq[i, c + t]
                    dq_g[r, t] = g
                    gb[c + t] += g
            if hi > lo:
                gemm(h_g[lo:hi], dq_g[lo:hi], block, True, False, 0.0)
            else:
                block[:, :] = 0.0
            for k in range(n_in):  # (a strided view for BLAS would compile gemm again)
                for t in range(atoms):
                    gw[k, c + t] = block[k, t]
    else:
        gemm(h_in, dq, gw, True, False, 0.0)
        gb[:] = 0.0
        for i in range(batch):
            for j in range(n_out):
                gb[j] += dq[i, j]
    w_eff = w_last
    if v_off >= 0:
        gw_v = grads[v_off : v_off + n_in * atoms].reshape((n_in, atoms))
        gb_v = grads[v_off + n_in * atoms : v_off + (n_in + 1) * atoms]
        w_v = params[v_off : v_off + n_in * atoms].reshape((n_in, atoms))
        inv_n = params.dtype.type(1.0 / n_act)
        w_eff = np.empty((n_in, n_out), dtype=params.dtype)
        for t in range(atoms):
            s = gb[t]
            for a in range(1, n_act):
                s += gb[a * atoms + t]
            gb_v[t] = s
            for a in range(n_act):
                gb[a * atoms + t] -= s * inv_n
        # Atom t innermost (contiguous, so the loops vectorise), each value's sums in
        # the same order as action by action.
        s = np.empty(atoms, dtype=params.dtype)
        shift = np.empty(atoms, dtype=params.dtype)
        for k in range(n_in):
            gw_k = gw[k]
            w_k = w_last[k]
            for t in range(atoms):
                s[t] = gw_k[t]
                shift[t] = w_k[t]  # (the sum of W's columns first)
            for a in range(1, n_act):
                c = a * atoms
                for t in range(atoms):
                    s[t] += gw_k[c + t]
                    shift[t] += w_k[c + t]
            for t in range(atoms):
                gw_v[k, t] = s[t]
                shift[t] = w_v[k, t] - shift[t] * inv_n
                s[t] = s[t] * inv_n  # (rounded here, as the scalar loop did: not fused below)
            for a in range(n_act):
                c = a * atoms
                for t in range(atoms):
                    gw_k[c + t] -= s[t]
                    w_eff[k, c + t] = w_k[c + t] + shift[t]
    if not hidden:
        return
    if grouped:  # dh = dQ W_eff^T, action by action
        block_t = np.empty((atoms, n_in), dtype=gw.dtype)  # W_eff's columns of action a
        for a in range(n_act):
            lo, hi = starts[a], starts[a + 1]
            if hi > lo:
                columns_transposed(w_eff, a * atoms, block_t)
                gemm(dq_g[lo:hi], block_t, h_g[lo:hi], False, False, 0.0)  # (h_g is free now)
        for r in range(batch):
            i = order[r]
            for k in range(n_in):
                delta[i, k] = h_g[r, k] if h_in[i, k] > 0.0 else 0.0
        return
    gemm(dq, w_eff, delta, False, True, 0.0)  # dh = dQ W_eff^T
    for i in range(delta.shape[0]):
        for k in range(n_in):
            delta[i, k] = delta[i, k] if h_in[i, k] > 0.0 else 0.0


@kernel
def backward_layout(n_params: int, sizes: np.ndarray, batch: int) -> tuple:
    """Where the backward pass finds each layer, for ``batch`` rows.

    n_params : ``len(params)``; sizes : int64, as :func:`~ember_np.nn.mlp.layout`.
    Returns (p_offs, a_offs, ln_p, ln_a, v_off, width): layer l's parameters
    start at p_offs[l] and its activation at a_offs[l] in ``acts``
    (:func:`~ember_np.nn.mlp.forward_into`'s workspace); with LayerNorm,
    hidden layer l's gain and bias start at ln_p[l] in params and its saved
    xhat and rstd at ln_a[l] in acts (ln_p[0] < 0 without LayerNorm); v_off
    is the dueling value head's offset or -1; width the widest layer.
    """
    n_layers = n_layers_of(sizes)
    width = 0
    for l in range(1, n_layers + 1):
        width = max(width, sizes[l])
    p_offs = np.empty(n_layers, dtype=np.int64)
    a_offs = np.empty(n_layers, dtype=np.int64)
    p = 0
    a = 0
    for l in range(n_layers):
        p_offs[l] = p
        a_offs[l] = a
        p += sizes[l] * sizes[l + 1] + sizes[l + 1]
        a += batch * sizes[l + 1]
    v_off, ln_off = layout(n_params, sizes)
    ln_p = np.full(n_layers, -1, dtype=np.int64)
    ln_a = np.empty(n_layers, dtype=np.int64)
    if ln_off >= 0:
        for l in range(n_layers - 1):
            ln_p[l] = ln_off
            ln_a[l] = a
            ln_off += 2 * sizes[l + 1]
            a += batch * (sizes[l + 1] + 1)
    return p_offs, a_offs, ln_p, ln_a, v_off, width


@kernel
def output_layer(
    params: np.ndarray, sizes: np.ndarray, obs: np.ndarray, acts: np.ndarray,
    grads: np.ndarray, p_offs: np.ndarray, a_offs: np.ndarray,
) -> tuple:  # fmt: skip
    """The output layer's (W, dW, db, input h) for the backward pass, db zeroed.

    Arguments as :func:`backward` takes them, and :func:`backward_layout`'s offsets.
    """
    batch = obs.shape[0]
    last = n_layers_of(sizes) - 1
    n_in = sizes[last]
    w_last, _ = layer(params, sizes, p_offs[last], last)
    gw, gb = layer(grads, sizes, p_offs[last], last)
    gb[:] = 0.0
    if last == 0:
        return w_last, gw, gb, obs
    return w_last, gw, gb, acts[a_offs[last - 1] : a_offs[last - 1] + batch * n_in].reshape(
        (batch, n_in))  # fmt: skip


@kernel
def backward(
    params: np.ndarray, sizes: np.ndarray, obs: np.ndarray, acts: np.ndarray, dq: np.ndarray,
    actions: np.ndarray, grads: np.ndarray,
) -> None:  # fmt: skip
    """MLP backward pass from the gradient of a plain Q head's output layer.

    params : float (num_params,); sizes : int64 (n_layers + 1,), a plain head's.
    obs : float (B, obs_size), the input of the forward pass.
    acts : the workspace :func:`forward_into` filled for ``obs`` with these params.
    dq : float (B, n_actions), d loss / d Q; rows may be sparse (zeros are
        skipped). A dueling network (:func:`layout`) gets its two heads'
        gradients from the same ``dq`` (see the comment inside).
    actions : int (B,), or (0,): not read (each row's nonzeros are found in dq).
    grads : float (num_params,), written with d loss / d params (same layout).

    A distributional head's output layer is :func:`distributional_backward`'s:
    the two share the hidden layers (:func:`hidden_backward`), and a plain
    network's kernels never compile the distributional one.
    """
    batch = obs.shape[0]
    n_layers = n_layers_of(sizes)
    n_act = sizes[n_layers]
    p_offs, a_offs, _, _, v_off, width = backward_layout(params.shape[0], sizes, batch)
    delta_a = np.empty(batch * width, dtype=params.dtype)
    delta_b = np.empty(batch * width, dtype=params.dtype)
    # Output layer: dW_L = h^T dQ, db_L = column sums of dQ, dh = dQ W_L^T.
    # dQ is mostly zeros for DQN (only Q(s_i, a_i) enters the loss), so loop
    # over its nonzeros, on transposed (n_actions, n_in) copies so the inner
    # loops are contiguous and vectorise.
    last = n_layers - 1
    n_in = sizes[last]
    w_last, gw, gb, h_in = output_layer(params, sizes, obs, acts, grads, p_offs, a_offs)
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
    # V's W_V (n_in,), b_V follow at ``v_off``): Q_j = V + A_j - mean(A). With g a
    # row of dQ, dLoss/dA_j = g_j - mean(g) and dLoss/dV = sum(g), so from the
    # sums above (taken as if A were Q): dW_V = sum_j dW[:, j], db_V = sum_j db_j,
    # dW_A[:, j] = dW[:, j] - dW_V / n and db_A = db - db_V / n. And Q is linear
    # in h through W_eff[:, j] = W_A[:, j] - mean_j(W_A) + W_V, which gives dh
    # below from the same sparse dQ (no dense dA rows).
    dueling = v_off >= 0
    if dueling:
        gw_v = grads[v_off : v_off + n_in]
        gw_v[:] = 0.0
        gb_v = gb[0]
        for j in range(1, n_act):
            gb_v += gb[j]
        for j in range(n_act):
            row = gw_t[j]
            for k in range(n_in):
                gw_v[k] += row[k]
        grads[v_off + n_in] = gb_v
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
            shift = params[v_off + k] - mean / n_act
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
    hidden_backward(params, sizes, obs, acts, grads, delta_a, delta_b)


@kernel
def distributional_backward(
    params: np.ndarray, sizes: np.ndarray, obs: np.ndarray, acts: np.ndarray, dq: np.ndarray,
    actions: np.ndarray, grads: np.ndarray,
) -> None:  # fmt: skip
    """:func:`backward` for a distributional head (C51, QR-DQN): the same
    arguments, with sizes having the head's suffix, dq (B, n_actions * n_atoms)
    and ``actions`` int (B,), the action whose atoms hold row i's nonzeros in
    ``dq`` (the loss's a_i, so that the output layer skips the zeros), or (0,)
    for a dense dq. The output layer is :func:`head_backward` (BLAS, per action).
    """
    batch = obs.shape[0]
    last = n_layers_of(sizes) - 1
    n_in = sizes[last]
    p_offs, a_offs, _, _, v_off, width = backward_layout(params.shape[0], sizes, batch)
    delta_a = np.empty(batch * width, dtype=params.dtype)
    delta_b = np.empty(batch * width, dtype=params.dtype)
    w_last, gw, gb, h_in = output_layer(params, sizes, obs, acts, grads, p_offs, a_offs)
    delta = delta_a[: batch * n_in].reshape((batch, n_in))
    head_backward(params, grads, v_off, n_atoms(sizes), h_in, dq, actions, w_last, gw, gb, delta,
                  last > 0)  # fmt: skip
    if last > 0:
        hidden_backward(params, sizes, obs, acts, grads, delta_a, delta_b)


@kernel
def hidden_backward(
    params: np.ndarray, sizes: np.ndarray, obs: np.ndarray, acts: np.ndarray,
    grads: np.ndarray, delta_a: np.ndarray, delta_b: np.ndarray,
) -> None:  # fmt: skip
    """The hidden layers' part of :func:`backward`, from the top down.

    params, sizes, obs, acts, grads : as :func:`backward`; delta_a : float
    (>= B * width,), its first B * sizes[-2] values d loss / d(pre-activation)
    of the last hidden layer's output (through its ReLU); delta_b : float, the
    same length, scratch (the two take turns, layer by layer).
    """
    batch = obs.shape[0]
    last = n_layers_of(sizes) - 1
    p_offs, a_offs, ln_p, ln_a, _, _ = backward_layout(params.shape[0], sizes, batch)
    layer_norm = ln_p[0] >= 0
    w_t_small = np.empty(SMALL_TRANSPOSE, dtype=params.dtype)  # a small hidden layer's W^T
    delta = delta_a[: batch * sizes[last]].reshape((batch, sizes[last]))
    # From the top down: delta is dLoss/d(pre-activation) (with LayerNorm,
    # first taken back through it from dLoss/d(its output)).
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
            if n_in * n_out <= SMALL_TRANSPOSE:  # dh_l = delta W_l^T
                w_t = w_t_small[: n_out * n_in].reshape((n_out, n_in))
                columns_transposed(w, np.int64(0), w_t)  # (a Literal 0 would compile it again)
                gemm(delta, w_t, nxt, False, False, 0.0)
            else:
                gemm(delta, w, nxt, False, True, 0.0)
            for i in range(batch):
                for k in range(n_in):
                    # a select, not a branch: the ReLU pattern is unpredictable
                    nxt[i, k] = nxt[i, k] if h_in[i, k] > 0.0 else 0.0
            delta = nxt
