"""Compiled Q-values and greedy actions of a Q-network (numba kernels, public to
the package): one observation without BLAS, a batch through ``nn/mlp.py``'s
forward pass, a distributional head's expected values (``head_kernels.py``),
the argmax over every or the legal actions, and the checked entry points.

Checked entry points: one rule for every way an observation is read (act,
act_batch, q_values, q_values_batch, forward, greedy_action(s)): an
observation holding NaN or inf (also a float64 beyond float32's range,
inf after the cast) computes nothing and the caller raises ValueError.
Without the check, a NaN came out as NaN from a batch but as finite numbers
from one observation (ReLU maps NaN to 0) and as action 0 from argmax.
"""

from __future__ import annotations

import numpy as np

from ember_np._jit import kernel
from ember_np.dqn.heads.head_kernels import expected_q
from ember_np.nn.mlp import (
    acts_size,
    all_finite,
    argmax,
    argmax_legal,
    dueling_combine,
    first_nonfinite_row,
    forward_into,
    layer,
    layer_norm_relu,
    layout,
)
from ember_np.nn.shape import head_kind, n_actions, n_atoms, n_layers


@kernel
def forward_one(params: np.ndarray, sizes: np.ndarray, x: np.ndarray, q_out: np.ndarray) -> None:
    """Q-values of a single observation into ``q_out``.

    Dueling networks and LayerNorm as :func:`forward_into`. No BLAS: for one
    row, plain loops that skip ReLU zeros are faster.

    Parameters
    ----------
    params : ndarray of float32, shape (num_params,)
    sizes : ndarray of int64, shape (n_layers + 1,), or with a head's suffix
    x : ndarray of float32, shape (sizes[0],)
    q_out : ndarray of float32, shape (n_actions(sizes),)
        Written.
    """
    n_layers_ = n_layers(sizes)
    width = 0
    for l in range(1, n_layers_ + 1):
        width = max(width, sizes[l])
    dist = head_kind(sizes) != 0  # the outputs go to nxt, then their expected values to q_out
    v_off, ln_off = layout(params.shape[0], sizes)
    n_ln = width if ln_off >= 0 else 0  # LayerNorm's scratch: xhat (1, width), rstd (1,)
    buf = np.empty(2 * width + 2 * n_ln, dtype=params.dtype)
    h = buf[:width]
    nxt = buf[width : 2 * width]
    xhat = buf[2 * width : 2 * width + n_ln]
    rstd = buf[2 * width + n_ln :]
    p_off = 0
    src = x
    for l in range(n_layers_):
        w, b = layer(params, sizes, p_off, l)
        n_out = sizes[l + 1]
        out = q_out if l == n_layers_ - 1 and not dist else nxt
        for j in range(n_out):
            out[j] = b[j]
        for k in range(sizes[l]):
            xk = src[k]
            if xk != 0.0:  # ReLU zeros: skipping a row beats the mispredicted branch
                for j in range(n_out):
                    out[j] += xk * w[k, j]
        if l < n_layers_ - 1:
            if ln_off >= 0:
                z = out[:n_out].reshape((1, n_out))
                gain = params[ln_off : ln_off + n_out]
                beta = params[ln_off + n_out : ln_off + 2 * n_out]
                # (a C-contiguous (1, n_out) view: one compiled version of the kernel)
                layer_norm_relu(z, gain, beta, xhat[:n_out].reshape((1, n_out)), rstd)
                ln_off += 2 * n_out
            for j in range(n_out):
                h[j] = out[j] if out[j] > 0.0 else 0.0
            src = h
        p_off += sizes[l] * n_out + n_out
    n_out = sizes[n_layers_]
    raw = nxt[:n_out].reshape((1, n_out)) if dist else q_out.reshape((1, n_out))
    if v_off >= 0:  # dueling head
        n_hid = sizes[n_layers_ - 1]
        dueling_combine(params, v_off, h[:n_hid].reshape((1, n_hid)), raw, n_atoms(sizes))
    if dist:
        expected_q(raw, sizes, q_out.reshape((1, q_out.shape[0])))


@kernel
def greedy_unchecked(params: np.ndarray, sizes: np.ndarray, x: np.ndarray) -> int:
    """argmax_a Q(x, a) (arguments as :func:`forward_one`); assumes ``x`` is finite."""
    q = np.empty(n_actions(sizes), dtype=params.dtype)
    forward_one(params, sizes, x, q)
    return argmax(q)


@kernel
def greedy_action(params: np.ndarray, sizes: np.ndarray, limit: float, x: np.ndarray) -> int:
    """argmax_a Q(x, a), or a negative code for callers to raise (``forward.py``'s):
    -1 when ``x`` holds NaN or inf, -2 when max|x| > ``limit`` (``forward.obs_limit``;
    ``inf``: no limit), -3 when a Q-value is not finite (never an action from NaN).

    params : float32 (num_params,); sizes : int64 (n_layers + 1,); limit : float;
    x : float32 (sizes[0],).
    """
    if not all_finite(x):
        return -1
    for k in range(x.shape[0]):
        if abs(x[k]) > limit:
            return -2
    q = np.empty(n_actions(sizes), dtype=params.dtype)
    forward_one(params, sizes, x, q)
    return argmax(q) if all_finite(q) else -3


@kernel
def greedy_legal(params: np.ndarray, sizes: np.ndarray, x: np.ndarray, legal: np.ndarray) -> int:
    """argmax over the legal actions of Q(x, a) (:func:`argmax_legal`); assumes ``x`` is finite."""
    q = np.empty(n_actions(sizes), dtype=params.dtype)
    forward_one(params, sizes, x, q)
    return argmax_legal(q, legal)


@kernel
def greedy_action_legal(
    params: np.ndarray, sizes: np.ndarray, x: np.ndarray, legal: np.ndarray
) -> int:
    """argmax over the legal actions (bool (n_actions,), one True at least) of Q(x, a);
    -1 when ``x`` (float32 (sizes[0],)) holds NaN or inf, -3 when a Q-value is not finite."""
    if not all_finite(x):
        return -1
    q = np.empty(n_actions(sizes), dtype=params.dtype)
    forward_one(params, sizes, x, q)
    return argmax_legal(q, legal) if all_finite(q) else -3


@kernel
def greedy_actions_legal_checked(
    params: np.ndarray, sizes: np.ndarray, x: np.ndarray, legal: np.ndarray, out: np.ndarray
) -> int:
    """argmax over the legal actions of every row of ``x`` into ``out``.

    Parameters
    ----------
    params : ndarray of float32, shape (num_params,)
    sizes : ndarray of int64, shape (n_layers + 1,)
    x : ndarray of float32, shape (B, sizes[0])
    legal : ndarray of bool, shape (B, n_actions(sizes))
        Precondition: each row has a True.
    out : ndarray of int64, shape (B,)
        Written (unless a row is not finite).

    Returns
    -------
    int
        -1, or the first row of ``x`` holding NaN or inf (nothing written then).
    """
    row = first_nonfinite_row(x)
    if row < 0:
        q = np.empty((x.shape[0], n_actions(sizes)), dtype=params.dtype)
        forward_batch(params, sizes, x, q)
        for i in range(x.shape[0]):
            out[i] = argmax_legal(q[i], legal[i])
    return row


@kernel
def forward_batch(params: np.ndarray, sizes: np.ndarray, x: np.ndarray, q_out: np.ndarray) -> None:
    """Q-values of every row of ``x`` into ``q_out``.

    params : float (num_params,); sizes : int64 (n_layers + 1,);
    x : float (B, sizes[0]), C-contiguous, B >= 1; q_out : float (B, n_actions(sizes)),
    written (a distributional head's expected values: :func:`expected_q`).
    """
    batch = x.shape[0]
    acts = np.empty(acts_size(params.shape[0], sizes, batch), dtype=params.dtype)
    q_off = forward_into(params, sizes, x, acts)
    n_out = sizes[n_layers(sizes)]
    raw = acts[q_off : q_off + batch * n_out].reshape((batch, n_out))
    if head_kind(sizes) != 0:
        expected_q(raw, sizes, q_out)
    else:
        q_out[:, :] = raw


@kernel
def greedy_actions(params: np.ndarray, sizes: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """argmax_a Q(x_i, a) of every row of ``x`` into ``out``.

    Arguments as :func:`forward_batch`; out : int64 (B,), written.
    Assumes finite inputs (callers check).
    """
    q = np.empty((x.shape[0], n_actions(sizes)), dtype=params.dtype)
    forward_batch(params, sizes, x, q)
    for i in range(x.shape[0]):
        out[i] = argmax(q[i])


@kernel
def q_values_checked(
    params: np.ndarray, sizes: np.ndarray, x: np.ndarray, q_out: np.ndarray
) -> bool:
    """:func:`forward_one` if ``x`` is finite.

    Parameters
    ----------
    params : ndarray of float32, shape (num_params,)
    sizes : ndarray of int64, shape (n_layers + 1,)
    x : ndarray of float32, shape (sizes[0],)
    q_out : ndarray of float32, shape (n_actions(sizes),)
        Written when ``x`` is finite.

    Returns
    -------
    bool
        False (nothing written) when ``x`` holds NaN or inf.
    """
    if not all_finite(x):
        return False
    forward_one(params, sizes, x, q_out)
    return True


@kernel
def q_values_batch_checked(
    params: np.ndarray, sizes: np.ndarray, x: np.ndarray, q_out: np.ndarray
) -> int:
    """:func:`forward_batch` if every row of ``x`` is finite.

    Parameters
    ----------
    params : ndarray of float32, shape (num_params,)
    sizes : ndarray of int64, shape (n_layers + 1,)
    x : ndarray of float32, shape (B, sizes[0])
    q_out : ndarray of float32, shape (B, n_actions(sizes))
        Written when every row is finite.

    Returns
    -------
    int
        -1, or the first row holding NaN or inf (nothing written then).
    """
    row = first_nonfinite_row(x)
    if row < 0:
        forward_batch(params, sizes, x, q_out)
    return row


@kernel
def greedy_actions_checked(
    params: np.ndarray, sizes: np.ndarray, x: np.ndarray, out: np.ndarray
) -> int:
    """:func:`greedy_actions` if every row of ``x`` is finite.

    Parameters
    ----------
    params : ndarray of float32, shape (num_params,)
    sizes : ndarray of int64, shape (n_layers + 1,)
    x : ndarray of float32, shape (B, sizes[0])
    out : ndarray of int64, shape (B,)
        Written when every row is finite.

    Returns
    -------
    int
        -1, or the first row holding NaN or inf (nothing written then).
    """
    row = first_nonfinite_row(x)
    if row < 0:
        greedy_actions(params, sizes, x, out)
    return row
