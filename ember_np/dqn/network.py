"""QNetwork: an MLP Q-function with hand-written backprop and Adam, compiled.

The network maps an observation to one Q-value per action:
``obs -> Linear -> ReLU -> ... -> Linear -> Q``. All parameters live in one
flat float32 array; ``weights[l]`` (shape ``(in, out)``) and ``biases[l]``
(shape ``(out,)``) are views into it, so writing into them changes the
network, and the optimiser, gradient clipping and target-network sync are
single loops over that array. A dueling network (``dueling=True``) has the
advantage head as its last layer and the value head's ``W_V`` (hidden,) and
``b_V`` after it; with ``layer_norm=True`` each hidden layer is Linear ->
LayerNorm -> ReLU and the LayerNorms' gains and biases come last. Kernels
see the architecture in the parameter count (:func:`_layout`, exact) and
branch once per call.

One DQN step (:meth:`QNetwork.update`) runs entirely in compiled code:
target forward, online forward, Huber loss, backward pass, global-norm
clipping and Adam, with BLAS ``?gemm`` for the matrix products (see _blas.py).
The kernels take the network's arrays as one :class:`NetState`, the batch as
one :class:`~ember_np.types.Batch`, the per-sample extras as one
:class:`PerSample` and the scalars as one :class:`UpdateSettings`.

Reading map of one update, in call order (each a kernel below)::

    _checked_update        QNetwork.update's one compiled call
      _check_batch         actions in range, everything finite, weights >= 0
      _update
        _loss_and_grads
          _td_targets      y = r + discount * Q_target(s', a*)     (n-step: discounts;
                           masks: a* over the next state's legal actions)
          _forward_into    online forward, every activation kept  (dueling: _dueling_combine)
          _huber_grad      dLoss/dQ = w * clip(Q - y, +-delta) / B  (PER: weights in, |TD| out)
          _backward        MLP backward from any dLoss/dQ           (dueling: both heads, W_eff)
        _clip_grad_norm    torch's clip_grad_norm_ rule
        _adam_step         torch.optim.Adam
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ember_np._arrays import as_f32, as_i64
from ember_np._blas import gemm
from ember_np._jit import entry_point, kernel
from ember_np._masks import check_action_masks
from ember_np._memory import check_network_memory
from ember_np._validate import F32_RULE, positive_in_f32
from ember_np.checkpoint import (
    architecture_name,
    dueling_flag,
    layer_norm_flag,
    layer_norm_name,
)
from ember_np.encoding import nonfinite_observation as _nonfinite_observation
from ember_np.encoding import nonfinite_row as _nonfinite_row
from ember_np.rng import Rng
from ember_np.types import Batch

__all__ = ["NetState", "PerSample", "QNetwork", "UpdateSettings", "update_settings"]

_F32 = np.dtype(np.float32)

ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.999
ADAM_EPS = 1e-8
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6)
ADAM_FLUSH = 1e-30  # Adam moments below this are set to 0 (see _adam_step)
LN_EPS = 1e-5  # torch.nn.LayerNorm's default eps


# ---------------------------------------------------------------------------
# Kernels. Parameter layout, layer l (0-based) mapping sizes[l] -> sizes[l+1]:
#   W_l: sizes[l] * sizes[l+1] values, row-major (in, out); then b_l: sizes[l+1].
# ---------------------------------------------------------------------------


@kernel
def _layer(params: np.ndarray, sizes: np.ndarray, offset: int, l: int):  # noqa: ANN202
    """Views (W, b) of layer ``l`` whose weights start at ``offset``.

    params : float (num_params,), any float dtype; sizes : int64 (n_layers + 1,);
    offset : int, where layer ``l``'s W starts in ``params``; l : int in [0, n_layers).
    Returns W (sizes[l], sizes[l+1]) and b (sizes[l+1],), views into ``params``.
    """
    n_in = sizes[l]
    n_out = sizes[l + 1]
    w = params[offset : offset + n_in * n_out].reshape((n_in, n_out))
    b = params[offset + n_in * n_out : offset + n_in * n_out + n_out]
    return w, b


@kernel
def _plain_size(sizes: np.ndarray) -> int:
    """Number of parameters of the plain MLP ``sizes`` (int64 (n_layers + 1,)).

    A dueling network's ``params`` are longer: they end with the value head
    (see :func:`_dueling_combine`). Kernels compare ``params.shape[0]`` with
    this once per call to tell the two architectures apart.
    """
    n = 0
    for l in range(sizes.shape[0] - 1):
        n += sizes[l] * sizes[l + 1] + sizes[l + 1]
    return n


@kernel
def _layout(n_params: int, sizes: np.ndarray) -> tuple:
    """Where a network's optional parameters start: (v_off, ln_off), -1 when absent.

    The flat layout is the plain MLP (:func:`_plain_size` values); then a
    dueling network's value head, ``W_V`` (n_hid,) and ``b_V`` (n_hid + 1
    values, see :func:`_dueling_combine`); then, with LayerNorm, for each
    hidden layer l its gain then its bias (``sizes[l+1]`` values each). The
    three extras have distinct lengths, n_hid + 1, 2H and n_hid + 1 + 2H (H the
    sum of hidden widths; LayerNorm needs every hidden width >= 2, so 2H >
    n_hid + 1): the parameter count names the architecture exactly. Kernels
    decode it once per call.
    """
    plain = _plain_size(sizes)
    extra = n_params - plain
    n_layers = sizes.shape[0] - 1
    if extra == 0 or n_layers < 2:
        return -1, -1
    duel = sizes[n_layers - 1] + 1
    if extra == duel:
        return plain, -1
    norm = 0
    for l in range(1, n_layers):
        norm += 2 * sizes[l]
    if extra == duel + norm:  # a dueling head, then LayerNorm
        return plain, plain + duel
    return -1, plain


@kernel
def _acts_size(n_params: int, sizes: np.ndarray, batch: int) -> int:
    """Length of the workspace :func:`_forward_into` needs for ``batch`` rows.

    Every layer's output (B * sum(sizes[1:])); with LayerNorm also, per hidden
    layer, its normalised pre-activation xhat (B * width) and 1 / std (B).
    """
    n_layers = sizes.shape[0] - 1
    total = 0
    for l in range(1, n_layers + 1):
        total += sizes[l]
    if _layout(n_params, sizes)[1] >= 0:
        for l in range(1, n_layers):
            total += sizes[l] + 1
    return batch * total


@kernel
def _layer_norm_relu(
    z: np.ndarray, gain: np.ndarray, beta: np.ndarray, xhat: np.ndarray, rstd: np.ndarray
) -> None:
    """LayerNorm then ReLU over each row (Ba et al. 2016; torch.nn.LayerNorm, eps 1e-5).

    z : float (B, n), the pre-activation h W + b on entry, ReLU(gain * xhat + beta)
    on return. gain, beta : float (n,). xhat : float (B, n) and rstd : float (B,),
    written for the backward pass: xhat = (z - mean) * rstd, rstd = 1 / sqrt(var + eps),
    mean and (biased) var over the row. Sums run in float64.

    The float32 passes (forward.py's NumPy pass, the ONNX graph of export.py) first
    divide the row by a power of two s (forward.ln_scales) so that no square
    overflows float32 (|z| from 1.8e19), and use eps / s^2. Dividing by 2^k commutes
    with rounding, so that is this very formula, bit for bit, wherever it is finite;
    here the float64 sums cannot overflow for any float32 z, so the scale would
    change no bit and is skipped (it cost 15% of a LayerNorm update).
    """
    n = z.shape[1]
    inv_n = 1.0 / n
    for i in range(z.shape[0]):
        mean = 0.0
        for k in range(n):
            mean += z[i, k]
        mean *= inv_n
        var = 0.0
        for k in range(n):
            d = z[i, k] - mean
            var += d * d
        r = 1.0 / math.sqrt(var * inv_n + LN_EPS)
        rstd[i] = r
        for k in range(n):
            xh = (z[i, k] - mean) * r
            xhat[i, k] = xh
            v = gain[k] * xh + beta[k]
            z[i, k] = v if v > 0.0 else 0.0


@kernel
def _layer_norm_backward(
    gain: np.ndarray, xhat: np.ndarray, rstd: np.ndarray, dy: np.ndarray, g_gain: np.ndarray,
    g_beta: np.ndarray,
) -> None:  # fmt: skip
    """Backward pass of :func:`_layer_norm_relu`'s LayerNorm, in place.

    gain : float (n,); xhat (B, n), rstd (B,) as the forward pass wrote them.
    dy : float (B, n), d loss / d(LayerNorm output) on entry (ReLU already
    applied), d loss / dz on return. g_gain, g_beta : float (n,), written.

    dgain = sum_i dy * xhat, dbeta = sum_i dy; with g = dy * gain,
    dz = rstd * (g - mean(g) - xhat * mean(g * xhat)).
    """
    n = dy.shape[1]
    inv_n = 1.0 / n
    g_gain[:] = 0.0
    g_beta[:] = 0.0
    for i in range(dy.shape[0]):
        s1 = 0.0
        s2 = 0.0
        for k in range(n):
            d = dy[i, k]
            g_gain[k] += d * xhat[i, k]
            g_beta[k] += d
            g = d * gain[k]
            s1 += g
            s2 += g * xhat[i, k]
        s1 *= inv_n
        s2 *= inv_n
        r = rstd[i]
        for k in range(n):
            dy[i, k] = r * (dy[i, k] * gain[k] - s1 - xhat[i, k] * s2)


@kernel
def _dueling_combine(params: np.ndarray, v_off: int, h: np.ndarray, q: np.ndarray) -> None:
    """Dueling head (Wang et al. 2016): Q = V + A - mean_a(A), in place.

    params : float (num_params,); the value head is ``W_V = params[v_off : v_off + n_hid]``
    (shape (n_hid, 1), row-major) then ``b_V = params[v_off + n_hid]``.
    h : float (B, n_hid), the last hidden activation; q : float (B, n_actions),
    the advantage head's output A on entry, Q on return.
    """
    n_hid = h.shape[1]
    n_act = q.shape[1]
    b_v = params[v_off + n_hid]
    for i in range(q.shape[0]):
        v = b_v
        for k in range(n_hid):
            v += h[i, k] * params[v_off + k]
        mean = q[i, 0]
        for j in range(1, n_act):
            mean += q[i, j]
        mean = mean / n_act
        for j in range(n_act):
            q[i, j] = v + q[i, j] - mean


@kernel
def _bias_act(h: np.ndarray, b: np.ndarray, relu: bool) -> None:
    """h <- h + b (broadcast over rows), then ReLU if ``relu``.

    h : float (B, n), updated in place; b : float (n,), same dtype; relu : bool.
    """
    for r in range(h.shape[0]):
        for c in range(h.shape[1]):
            v = h[r, c] + b[c]
            if relu and v < 0.0:
                v = 0.0
            h[r, c] = v


@kernel
def _forward_into(params: np.ndarray, sizes: np.ndarray, x: np.ndarray, acts: np.ndarray) -> int:
    """Batch forward pass; layer l's output goes to ``acts`` at a running offset.

    params : float (num_params,); sizes : int64 (n_layers + 1,);
    x : float (B, sizes[0]), same dtype as params, rows contiguous (a BLAS operand).
    acts : flat workspace of at least ``B * sum(sizes[1:])`` values. Layer l's
    activation (post-ReLU for hidden layers) is the ``(B, sizes[l+1])`` block
    starting at ``B * sum(sizes[1:l+1])``; the Q-values are the last block.
    A dueling network (``params`` longer than :func:`_plain_size`) has its
    advantage head as the last layer and combines it in place with the value
    head (:func:`_dueling_combine`). With LayerNorm (:func:`_layout`) each
    hidden layer is Linear -> LayerNorm -> ReLU, and ``acts`` must hold
    :func:`_acts_size` values: after the activations come each hidden layer's
    xhat (B, width) and rstd (B,). Returns the offset of the Q-value block.
    """
    batch = x.shape[0]
    n_layers = sizes.shape[0] - 1
    v_off, ln_off = _layout(params.shape[0], sizes)
    ln_a = 0  # where LayerNorm's saved values start in acts
    for l in range(1, n_layers + 1):
        ln_a += batch * sizes[l]
    p_off = 0
    a_off = 0
    h = x
    for l in range(n_layers):
        w, b = _layer(params, sizes, p_off, l)
        n_out = sizes[l + 1]
        out = acts[a_off : a_off + batch * n_out].reshape((batch, n_out))
        gemm(h, w, out, False, False, 0.0)
        hidden = l < n_layers - 1
        if hidden and ln_off >= 0:
            _bias_act(out, b, False)
            xhat = acts[ln_a : ln_a + batch * n_out].reshape((batch, n_out))
            rstd = acts[ln_a + batch * n_out : ln_a + batch * n_out + batch]
            gain = params[ln_off : ln_off + n_out]
            _layer_norm_relu(out, gain, params[ln_off + n_out : ln_off + 2 * n_out], xhat, rstd)
            ln_a += batch * (n_out + 1)
            ln_off += 2 * n_out
        else:
            _bias_act(out, b, hidden)
        p_off += sizes[l] * n_out + n_out
        if hidden:
            a_off += batch * n_out
            h = out
    if v_off >= 0:  # dueling: the last layer was A; h is the last hidden layer
        n_act = sizes[n_layers]
        q = acts[a_off : a_off + batch * n_act].reshape((batch, n_act))
        _dueling_combine(params, v_off, h, q)
    return a_off


@kernel
def _forward_one(params: np.ndarray, sizes: np.ndarray, x: np.ndarray, q_out: np.ndarray) -> None:
    """Q-values of a single observation into ``q_out``.

    params : float32 (num_params,); sizes : int64 (n_layers + 1,);
    x : float32 (sizes[0],); q_out : float32 (sizes[-1],), written.
    Dueling networks and LayerNorm as :func:`_forward_into`. No BLAS: for
    one row, plain loops that skip ReLU zeros are faster.
    """
    width = 0
    for l in range(1, sizes.shape[0]):
        width = max(width, sizes[l])
    n_layers = sizes.shape[0] - 1
    v_off, ln_off = _layout(params.shape[0], sizes)
    n_ln = width if ln_off >= 0 else 0  # LayerNorm's scratch: xhat (1, width), rstd (1,)
    buf = np.empty(2 * width + 2 * n_ln, dtype=params.dtype)
    h = buf[:width]
    nxt = buf[width : 2 * width]
    xhat = buf[2 * width : 2 * width + n_ln]
    rstd = buf[2 * width + n_ln :]
    p_off = 0
    src = x
    for l in range(n_layers):
        w, b = _layer(params, sizes, p_off, l)
        n_out = sizes[l + 1]
        out = q_out if l == n_layers - 1 else nxt
        for j in range(n_out):
            out[j] = b[j]
        for k in range(sizes[l]):
            xk = src[k]
            if xk != 0.0:  # ReLU zeros: skipping a row beats the mispredicted branch
                for j in range(n_out):
                    out[j] += xk * w[k, j]
        if l < n_layers - 1:
            if ln_off >= 0:
                z = out[:n_out].reshape((1, n_out))
                gain = params[ln_off : ln_off + n_out]
                beta = params[ln_off + n_out : ln_off + 2 * n_out]
                # (a C-contiguous (1, n_out) view: one compiled version of the kernel)
                _layer_norm_relu(z, gain, beta, xhat[:n_out].reshape((1, n_out)), rstd)
                ln_off += 2 * n_out
            for j in range(n_out):
                h[j] = out[j] if out[j] > 0.0 else 0.0
            src = h
        p_off += sizes[l] * n_out + n_out
    if v_off >= 0:  # dueling head
        n_hid = sizes[n_layers - 1]
        n_act = sizes[n_layers]
        _dueling_combine(params, v_off, h[:n_hid].reshape((1, n_hid)), q_out.reshape((1, n_act)))


@kernel
def _argmax(q: np.ndarray) -> int:
    """Index of the first maximum of ``q`` (float (n,), n >= 1; NaN never wins)."""
    best = 0
    for j in range(1, q.shape[0]):
        if q[j] > q[best]:
            best = j
    return best


@kernel
def _all_finite(x: np.ndarray) -> bool:
    """Whether every value of ``x`` (float (n,)) is finite."""
    for k in range(x.shape[0]):
        if not np.isfinite(x[k]):
            return False
    return True


@kernel
def _greedy_unchecked(params: np.ndarray, sizes: np.ndarray, x: np.ndarray) -> int:
    """argmax_a Q(x, a) (arguments as :func:`_forward_one`); assumes ``x`` is finite."""
    q = np.empty(sizes[sizes.shape[0] - 1], dtype=params.dtype)
    _forward_one(params, sizes, x, q)
    return _argmax(q)


@kernel
def _greedy_action(params: np.ndarray, sizes: np.ndarray, x: np.ndarray) -> int:
    """argmax_a Q(x, a), or -1 when ``x`` holds NaN or inf (callers raise).

    params : float32 (num_params,); sizes : int64 (n_layers + 1,); x : float32 (sizes[0],).
    """
    return _greedy_unchecked(params, sizes, x) if _all_finite(x) else -1


# Action masks (see ember_np/_masks.py): a bool (n_actions,) mask of length 0
# means every action is legal; the replay buffer hands the TD target packed
# bits (np.packbits layout). Callers guarantee at least one legal action.


@kernel
def _argmax_legal(q: np.ndarray, legal: np.ndarray) -> int:
    """Index of the first maximum of ``q`` over the legal actions.

    q : float (n,); legal : bool (n,), at least one True, or (0,): :func:`_argmax`.
    """
    if legal.shape[0] == 0:
        return _argmax(q)
    best = 0
    while not legal[best]:
        best += 1
    for j in range(best + 1, q.shape[0]):
        if legal[j] and q[j] > q[best]:
            best = j
    return best


@kernel
def _argmax_packed(q: np.ndarray, bits: np.ndarray) -> int:
    """Index of the first maximum of ``q`` over the actions whose bit is set.

    q : float (n,); bits : uint8 (ceil(n / 8),), packed as ``np.packbits``
    (action j is bit ``7 - j % 8`` of byte ``j // 8``), at least one of the
    first n bits set.
    """
    best = -1
    for j in range(q.shape[0]):
        if (bits[j >> 3] >> (7 - (j & 7))) & 1 and (best < 0 or q[j] > q[best]):
            best = j
    return best


@kernel
def _greedy_legal(params: np.ndarray, sizes: np.ndarray, x: np.ndarray, legal: np.ndarray) -> int:
    """argmax over the legal actions of Q(x, a) (:func:`_argmax_legal`); assumes ``x`` is finite."""
    q = np.empty(sizes[sizes.shape[0] - 1], dtype=params.dtype)
    _forward_one(params, sizes, x, q)
    return _argmax_legal(q, legal)


@kernel
def _greedy_action_legal(
    params: np.ndarray, sizes: np.ndarray, x: np.ndarray, legal: np.ndarray
) -> int:
    """:func:`_greedy_legal`, or -1 when ``x`` holds NaN or inf (callers raise)."""
    return _greedy_legal(params, sizes, x, legal) if _all_finite(x) else -1


@kernel
def _greedy_actions_legal_checked(
    params: np.ndarray, sizes: np.ndarray, x: np.ndarray, legal: np.ndarray, out: np.ndarray
) -> int:
    """argmax over legal actions of every row of ``x`` into ``out`` (int64 (B,)).

    legal : bool (B, n_actions), each row with a legal action. Returns -1, or
    the first row of ``x`` holding NaN or inf (nothing written then).
    """
    row = _first_nonfinite_row(x)
    if row < 0:
        q = np.empty((x.shape[0], sizes[sizes.shape[0] - 1]), dtype=params.dtype)
        _forward_batch(params, sizes, x, q)
        for i in range(x.shape[0]):
            out[i] = _argmax_legal(q[i], legal[i])
    return row


@kernel
def _forward_batch(params: np.ndarray, sizes: np.ndarray, x: np.ndarray, q_out: np.ndarray) -> None:
    """Q-values of every row of ``x`` into ``q_out``.

    params : float (num_params,); sizes : int64 (n_layers + 1,);
    x : float (B, sizes[0]), C-contiguous, B >= 1; q_out : float (B, sizes[-1]), written.
    """
    batch = x.shape[0]
    acts = np.empty(_acts_size(params.shape[0], sizes, batch), dtype=params.dtype)
    q_off = _forward_into(params, sizes, x, acts)
    n_act = sizes[sizes.shape[0] - 1]
    q_out[:, :] = acts[q_off : q_off + batch * n_act].reshape((batch, n_act))


@kernel
def _greedy_actions(params: np.ndarray, sizes: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """argmax_a Q(x_i, a) of every row of ``x`` into ``out``.

    Arguments as :func:`_forward_batch`; out : int64 (B,), written.
    Assumes finite inputs (callers check).
    """
    q = np.empty((x.shape[0], sizes[sizes.shape[0] - 1]), dtype=params.dtype)
    _forward_batch(params, sizes, x, q)
    for i in range(x.shape[0]):
        out[i] = _argmax(q[i])


# Checked entry points: one rule for every way an observation is read (act,
# act_batch, q_values, q_values_batch, forward, greedy_action(s)): an
# observation holding NaN or inf (also a float64 beyond float32's range,
# inf after the cast) computes nothing and the caller raises ValueError.
# Without the check, a NaN came out as NaN from a batch but as finite numbers
# from one observation (ReLU maps NaN to 0) and as action 0 from argmax.


@kernel
def _first_nonfinite_row(x: np.ndarray) -> int:
    """Index of the first row of ``x`` (batch, n) holding NaN or inf, else -1.

    First one pass that vectorises (``v * 0`` is 0 for finite v, NaN for NaN
    or inf; the flags leave out nnan/ninf, so LLVM keeps it), then the rows.
    """
    flat = x.reshape(x.size)
    acc = 0.0
    for k in range(flat.shape[0]):
        acc += flat[k] * 0.0
    if acc == 0.0:
        return -1
    for i in range(x.shape[0]):
        for k in range(x.shape[1]):
            if not np.isfinite(x[i, k]):
                return i
    return -1


@kernel
def _q_values_checked(
    params: np.ndarray, sizes: np.ndarray, x: np.ndarray, q_out: np.ndarray
) -> bool:
    """:func:`_forward_one` if ``x`` (in,) is finite; returns False (nothing written) if not."""
    if not _all_finite(x):
        return False
    _forward_one(params, sizes, x, q_out)
    return True


@kernel
def _q_values_batch_checked(
    params: np.ndarray, sizes: np.ndarray, x: np.ndarray, q_out: np.ndarray
) -> int:
    """:func:`_forward_batch` if every row of ``x`` is finite (returns -1), else the bad row."""
    row = _first_nonfinite_row(x)
    if row < 0:
        _forward_batch(params, sizes, x, q_out)
    return row


@kernel
def _greedy_actions_checked(
    params: np.ndarray, sizes: np.ndarray, x: np.ndarray, out: np.ndarray
) -> int:
    """:func:`_greedy_actions` if every row of ``x`` is finite (returns -1), else the bad row."""
    row = _first_nonfinite_row(x)
    if row < 0:
        _greedy_actions(params, sizes, x, out)
    return row


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
    """The scalar settings of one DQN update (build with :func:`update_settings`)."""

    gamma: float
    learning_rate: float
    huber_delta: float
    double_dqn: bool
    max_grad_norm: float  # <= 0: no clipping


def update_settings(
    gamma: float, learning_rate: float, huber_delta: float, double_dqn: bool,
    max_grad_norm: float | None,
) -> UpdateSettings:  # fmt: skip
    """The one place an :class:`UpdateSettings` is built: fixed Python types, so
    kernels taking it compile once (an int where a float was would compile again)."""
    clip = -1.0 if max_grad_norm is None else float(max_grad_norm)
    return UpdateSettings(
        float(gamma), float(learning_rate), float(huber_delta), bool(double_dqn), clip
    )


class PerSample(NamedTuple):
    """Per-sample arrays of an update beyond the transitions; each may have length 0.

    discounts : ndarray of float32, shape (batch,) or (0,)
        When given, y_i = r_i + discounts_i * Q_target(s'_i, a*_i) (e.g.
        gamma^m * mask for an m-step return); length 0: gamma * mask_i.
    weights : ndarray of float32, shape (batch,) or (0,)
        Non-negative importance weights: loss = mean_i w_i * Huber_i; length 0: all 1.
    td_errors : ndarray of float32, shape (batch,) or (0,)
        Filled with |y_i - Q(s_i, a_i)| (before the step) when of length batch.
    """

    discounts: np.ndarray
    weights: np.ndarray
    td_errors: np.ndarray


@kernel
def _td_targets(
    net: NetState, batch: Batch, discounts: np.ndarray, hp: UpdateSettings, acts: np.ndarray,
    y: np.ndarray,
) -> None:  # fmt: skip
    """TD targets of a batch: y_i = r_i + discount_i * Q_target(s'_i, a*_i).

    net : NetState; params and target are read (any float dtype).
    batch : Batch; obs/next_obs (B, obs_size), actions/rewards/masks (B,), float like params.
    discounts : float (B,) or (0,); length 0 means discount_i = gamma * mask_i.
    hp : UpdateSettings; gamma and double_dqn are read.
    acts : scratch of the params dtype, at least B * sum(sizes[1:]) values.
    y : float64 (B,), written.

    a*_i = argmax_a Q_target(s'_i, a), or argmax_a Q_online(s'_i, a) for
    double DQN, with a over the legal actions of s'_i when the batch has
    ``next_action_masks`` rows (packed bits, :func:`_argmax_packed`); y is a
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
        q_off = _forward_into(net.params, sizes, batch.next_obs, acts)
        q_next = acts[q_off : q_off + batch_size * n_act].reshape((batch_size, n_act))
        for i in range(batch_size):
            best[i] = _argmax_packed(q_next[i], legal[i]) if masked else _argmax(q_next[i])
    q_off = _forward_into(net.target, sizes, batch.next_obs, acts)
    q_next = acts[q_off : q_off + batch_size * n_act].reshape((batch_size, n_act))
    if not hp.double_dqn:
        for i in range(batch_size):
            best[i] = _argmax_packed(q_next[i], legal[i]) if masked else _argmax(q_next[i])
    if discounts.shape[0] == 0:
        masks = batch.masks
        for i in range(batch_size):
            y[i] = rewards[i] + hp.gamma * masks[i] * q_next[i, best[i]]
    else:
        for i in range(batch_size):
            y[i] = rewards[i] + discounts[i] * q_next[i, best[i]]


@kernel
def _huber_grad(
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
def _backward(
    params: np.ndarray, sizes: np.ndarray, obs: np.ndarray, acts: np.ndarray, dq: np.ndarray,
    grads: np.ndarray,
) -> None:  # fmt: skip
    """MLP backward pass from any gradient of the output layer.

    params : float (num_params,); sizes : int64 (n_layers + 1,).
    obs : float (B, obs_size), the input of the forward pass.
    acts : the workspace :func:`_forward_into` filled for ``obs`` with these params.
    dq : float (B, n_actions), d loss / d Q; rows may be sparse (zeros are skipped).
        A dueling network (``params`` longer than :func:`_plain_size`) gets its
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
    # LayerNorm (see _layout, _forward_into): hidden layer l's gain and bias
    # start at ln_p[l] in params, its saved xhat and rstd at ln_a[l] in acts.
    v_off, ln_off = _layout(params.shape[0], sizes)
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
    w_last, _ = _layer(params, sizes, p_offs[last], last)
    gw, gb = _layer(grads, sizes, p_offs[last], last)
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
        w, _ = _layer(params, sizes, p_offs[l], l)
        gw, gb = _layer(grads, sizes, p_offs[l], l)
        if layer_norm:
            o = ln_a[l]
            xhat = acts[o : o + batch * n_out].reshape((batch, n_out))
            rstd = acts[o + batch * n_out : o + batch * n_out + batch]
            g = ln_p[l]
            g_gain = grads[g : g + n_out]
            g_beta = grads[g + n_out : g + 2 * n_out]
            _layer_norm_backward(params[g : g + n_out], xhat, rstd, delta, g_gain, g_beta)
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
def _loss_and_grads(net: NetState, batch: Batch, per: PerSample, hp: UpdateSettings) -> float:
    """Weighted mean Huber TD loss of a batch; its gradient goes to ``net.grads``.

    The whole update, in reading order: TD targets (:func:`_td_targets`), the
    online forward pass keeping every activation (:func:`_forward_into`), the
    per-sample loss gradient (:func:`_huber_grad`), the backward pass
    (:func:`_backward`). Arguments as those kernels document; works in any
    float dtype (float32 in production, float64 for finite-difference tests).
    """
    params = net.params
    sizes = net.sizes
    obs = batch.obs
    batch_size = obs.shape[0]
    n_layers = sizes.shape[0] - 1
    n_act = sizes[n_layers]
    acts = np.empty(_acts_size(params.shape[0], sizes, batch_size), dtype=params.dtype)
    y = np.empty(batch_size, dtype=np.float64)
    _td_targets(net, batch, per.discounts, hp, acts, y)
    q_off = _forward_into(params, sizes, obs, acts)
    q = acts[q_off : q_off + batch_size * n_act].reshape((batch_size, n_act))
    dq = np.empty((batch_size, n_act), dtype=params.dtype)
    loss = _huber_grad(q, batch.actions, y, hp.huber_delta, per, dq)
    _backward(params, sizes, obs, acts, dq, net.grads)
    return loss


@kernel
def _clip_grad_norm(grads: np.ndarray, max_norm: float) -> float:
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
def _adam_step(net: NetState, lr: float) -> None:
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
def _update(net: NetState, batch: Batch, per: PerSample, hp: UpdateSettings) -> float:
    """One full DQN gradient step: loss and gradients, clipping, Adam.

    Arguments as :func:`_loss_and_grads`; ``hp.learning_rate`` > 0 and
    ``hp.max_grad_norm`` (<= 0: no clipping) are read too. Returns the loss
    before the step.
    """
    loss = _loss_and_grads(net, batch, per, hp)
    _clip_grad_norm(net.grads, hp.max_grad_norm)
    _adam_step(net, hp.learning_rate)
    return loss


@kernel
def _checked_update(net: NetState, batch: Batch, per: PerSample, hp: UpdateSettings) -> tuple:
    """:func:`_check_batch`, then :func:`_update` if the batch is valid.

    Returns (code, loss): code 0 and the loss, or the check's nonzero code
    and NaN with nothing changed. One call from Python instead of two.
    """
    code = _check_batch(batch, net.sizes[net.sizes.shape[0] - 1], per)
    if code != 0:
        return code, np.nan
    return 0, _update(net, batch, per, hp)


@kernel
def _polyak(dst: np.ndarray, src: np.ndarray, tau: float) -> None:
    """dst <- tau * src + (1 - tau) * dst (Polyak averaging).

    dst : float (n,), updated in place; src : float (n,), same dtype; tau : float in (0, 1].
    """
    t = dst.dtype.type(tau)
    keep = dst.dtype.type(1.0 - tau)
    for i in range(dst.shape[0]):
        dst[i] = t * src[i] + keep * dst[i]


@kernel
def _check_batch(batch: Batch, n_actions: int, per: PerSample) -> int:
    """0 if the batch is valid, else the code of the first problem found.

    batch : Batch as :func:`_td_targets` takes it; n_actions : int;
    per : PerSample (arrays of length B or 0).

    1: an action outside [0, n_actions); 2: a non-finite observation; 3: a
    non-finite reward, mask, discount or weight; 4: a negative weight.
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
    for i in range(per.discounts.shape[0]):
        if not np.isfinite(per.discounts[i]):
            return 3
    for i in range(per.weights.shape[0]):
        if not np.isfinite(per.weights[i]):
            return 3
        if per.weights[i] < 0.0:
            return 4
    return 0


# ---------------------------------------------------------------------------
# Python API
# ---------------------------------------------------------------------------


def _check_positive_float(name: str, value: Any) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number, got {value!r}") from None
    if not (v > 0.0 and math.isfinite(v)):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    if not positive_in_f32(v):  # applied to float32 weights
        raise ValueError(f"{name} must be {F32_RULE}, got {value!r}")
    return v


_NONE = np.empty(0, dtype=np.float32)  # an absent per-sample array (never written)
_NO_PER_SAMPLE = PerSample(_NONE, _NONE, _NONE)


def _optional_per_sample(name: str, value: Any, batch: int) -> np.ndarray:
    """A per-sample input as float32 (batch,), or an empty array when None."""
    if value is None:
        return _NONE
    arr = as_f32(value, name)
    if arr.shape != (batch,):
        raise ValueError(f"expected {name} of shape ({batch},), got {arr.shape}")
    return arr


def _split_batch_tail(
    first: Any, tail: tuple[Any, ...], discounts: Any, weights: Any
) -> tuple[Any, Any, Any, Any]:
    """``update(*batch, target)`` with a 9-field Batch: (target, discounts, weights, packed).

    ``first`` and ``tail`` are the positional arguments after ``masks``: the
    batch's discounts, weights, indices and packed next_action_masks, then the
    target. A field of length 0 is "not given" (packed: None); given both in the
    batch and by keyword is an error (the caller checks the packed masks).
    """
    if len(tail) != 4:
        raise ValueError(
            "update() takes obs, actions, rewards, next_obs, masks (or a whole Batch: "
            "*batch) and then the target network; got "
            f"{6 + len(tail)} positional arguments"
        )
    discounts = _from_batch("discounts", first, discounts)
    weights = _from_batch("weights", tail[0], weights)
    packed = tail[2] if _holds_data(tail[2]) else None
    return tail[3], discounts, weights, packed


def _holds_data(field: Any) -> bool:
    """Whether a Batch field was given (a field of length 0 was not)."""
    # .size of an ndarray (the usual case) costs a fifth of np.size's dispatch
    return (field.size if type(field) is np.ndarray else np.size(field)) > 0


def _from_batch(name: str, field: Any, keyword: Any) -> Any:
    """The batch's ``field`` if it holds data (``keyword`` must then be None), else ``keyword``."""
    if not _holds_data(field):
        return keyword
    if keyword is not None:
        raise ValueError(f"{name} given twice: in the batch and as a keyword")
    return field


def _td_errors_out(out: Any, batch: int) -> np.ndarray:
    """The array the update writes |TD errors| into, or an empty one when None."""
    if out is None:
        return _NONE
    if (
        not isinstance(out, np.ndarray)
        or out.dtype != _F32
        or not (out.flags.c_contiguous and out.flags.aligned)
    ):
        raise ValueError(
            "td_errors_out must be a C-contiguous float32 ndarray, aligned (e.g. "
            f"np.empty({batch}, np.float32)), got {type(out).__name__}"
            + (f" of dtype {out.dtype}" if isinstance(out, np.ndarray) else "")
        )
    if out.shape != (batch,):
        raise ValueError(f"expected td_errors_out of shape ({batch},), got {out.shape}")
    if not out.flags.writeable:
        raise ValueError("td_errors_out must be writeable")
    return out


def _layer_sizes(layer_sizes: Sequence[int]) -> tuple[int, ...]:
    try:
        sizes = tuple(operator.index(s) for s in layer_sizes)
    except TypeError:
        raise ValueError(
            f"layer_sizes must be a sequence of positive integers such as (4, 64, 64, 2), "
            f"got {layer_sizes!r}"
        ) from None
    if len(sizes) < 2 or any(s <= 0 for s in sizes):
        raise ValueError(
            "layer_sizes must list at least an input and an output size, all positive "
            f"(e.g. (4, 64, 64, 2) for 4 inputs, two hidden layers of 64, 2 actions), got {sizes}"
        )
    return sizes


class QNetwork:
    """An MLP Q-network ``obs -> hidden... -> Q-values`` with its Adam state.

    Parameters
    ----------
    layer_sizes : sequence of int
        ``(obs_size, hidden..., n_actions)``, e.g. ``(4, 64, 64, 2)``.
    seed : int or Rng
        Initialisation seed (or stream). Each layer's W and b are drawn
        uniformly from ``±1/sqrt(fan_in)``, like ``torch.nn.Linear``.
    dueling : bool
        Dueling head (Wang et al. 2016): the last hidden layer feeds an
        advantage head A (hidden -> n_actions) and a value head V (hidden -> 1),
        and Q = V + A - mean_a(A). Needs at least one hidden layer. Default False.
    layer_norm : bool
        LayerNorm (Ba et al. 2016) after each hidden layer's Linear, before its
        ReLU, as in Gallici et al. 2024 (PQN): ``Linear -> LayerNorm -> ReLU``,
        each with its own gain (init 1) and bias (init 0), eps 1e-5 as
        ``torch.nn.LayerNorm``. Needs hidden layers at least 2 wide. Default False.

    Attributes
    ----------
    layer_sizes : tuple of int
    weights : list of ndarray of float32, shape (in, out)
        Live views into the parameter vector: writing into them changes the
        network. With ``dueling``, ``weights[-2]`` is the advantage head and
        ``weights[-1]`` (shape (hidden, 1)) the value head.
    biases : list of ndarray of float32, shape (out,)
    norm_gains, norm_biases : list of ndarray of float32, shape (hidden_l,)
        With ``layer_norm``, each hidden layer's LayerNorm gain and bias (live
        views, like ``weights``); empty lists otherwise.
    """

    def __init__(
        self, layer_sizes: Sequence[int], seed: int | Rng = 0, dueling: bool = False,
        layer_norm: bool = False,
    ) -> None:  # fmt: skip
        sizes = _layer_sizes(layer_sizes)
        if not isinstance(dueling, (bool, np.bool_)):
            raise ValueError(f"dueling must be True or False, got {dueling!r}")
        if dueling and len(sizes) < 3:
            raise ValueError(
                "a dueling network needs at least one hidden layer to feed its two heads "
                f"(e.g. (4, 64, 2)), got layer_sizes {sizes}"
            )
        if not isinstance(layer_norm, (bool, np.bool_)):
            raise ValueError(f"layer_norm must be True or False, got {layer_norm!r}")
        if layer_norm and (len(sizes) < 3 or min(sizes[1:-1]) < 2):
            raise ValueError(
                "layer_norm needs hidden layers of width >= 2 to normalise (over one unit "
                f"LayerNorm outputs its bias alone), got layer_sizes {sizes}"
            )
        check_network_memory(sizes, 1, bool(dueling), bool(layer_norm))  # before allocating
        self._init_storage(sizes, bool(dueling), bool(layer_norm))
        rng = seed if isinstance(seed, Rng) else Rng(seed)
        for w, b in zip(self.weights, self.biases):
            bound = 1.0 / math.sqrt(w.shape[0])
            w[...] = (rng.random(w.size) * 2.0 - 1.0).reshape(w.shape) * bound
            b[...] = (rng.random(b.size) * 2.0 - 1.0) * bound
        for gain in self.norm_gains:  # as torch.nn.LayerNorm: gain 1, bias 0
            gain[...] = 1.0

    def _init_storage(self, sizes: tuple[int, ...], dueling: bool, layer_norm: bool) -> None:
        self._sizes_tuple = sizes
        self._dueling = dueling
        self._layer_norm = layer_norm
        self._sizes = np.array(sizes, dtype=np.int64)
        n = sum(sizes[i] * sizes[i + 1] + sizes[i + 1] for i in range(len(sizes) - 1))
        if dueling:  # the value head follows the plain layout (see _layout)
            n += sizes[-2] + 1
        ln_off = n
        if layer_norm:  # then each hidden layer's gain and bias
            n += 2 * sum(sizes[1:-1])
        self._params = np.zeros(n, dtype=np.float32)
        self._grads = np.zeros(n, dtype=np.float32)
        self._adam_m = np.zeros(n, dtype=np.float32)
        self._adam_v = np.zeros(n, dtype=np.float32)
        self._adam_t = np.zeros(1, dtype=np.int64)
        # (target, NetState with it, compiled entry point of _checked_update),
        # resolved at the first update.
        self._cached: tuple[Any, NetState, Any] | None = None
        self._hp: UpdateSettings | None = None  # the last update's settings, and their key
        self._hp_key: tuple[Any, ...] = ()
        self.weights: list[np.ndarray] = []
        self.biases: list[np.ndarray] = []
        off = 0
        for n_in, n_out in zip(sizes[:-1], sizes[1:]):
            self.weights.append(self._params[off : off + n_in * n_out].reshape(n_in, n_out))
            off += n_in * n_out
            self.biases.append(self._params[off : off + n_out])
            off += n_out
        if dueling:
            n_hid = sizes[-2]
            self.weights.append(self._params[off : off + n_hid].reshape(n_hid, 1))
            self.biases.append(self._params[off + n_hid : off + n_hid + 1])
        self.norm_gains: list[np.ndarray] = []
        self.norm_biases: list[np.ndarray] = []
        for width in sizes[1:-1] if layer_norm else ():
            self.norm_gains.append(self._params[ln_off : ln_off + width])
            self.norm_biases.append(self._params[ln_off + width : ln_off + 2 * width])
            ln_off += 2 * width

    # -- shape ---------------------------------------------------------------
    @property
    def layer_sizes(self) -> tuple[int, ...]:
        """``(obs_size, hidden..., n_actions)``."""
        return self._sizes_tuple

    @property
    def dueling(self) -> bool:
        """Whether Q = V + A - mean(A) from two heads (see the class docstring)."""
        return self._dueling

    @property
    def layer_norm(self) -> bool:
        """Whether each hidden layer is Linear -> LayerNorm -> ReLU (see the class docstring)."""
        return self._layer_norm

    @property
    def obs_size(self) -> int:
        return self._sizes_tuple[0]

    @property
    def n_actions(self) -> int:
        return self._sizes_tuple[-1]

    @property
    def num_params(self) -> int:
        """Total number of weights and biases."""
        return int(self._params.size)

    @property
    def adam_step(self) -> int:
        """Number of Adam steps taken so far (the bias-correction ``t``)."""
        return int(self._adam_t[0])

    @property
    def params(self) -> np.ndarray:
        """All weights and biases as one live float32 vector (layer by layer, W then b)."""
        return self._params

    @property
    def sizes_array(self) -> np.ndarray:
        """:attr:`layer_sizes` as the int64 array kernels take."""
        return self._sizes

    def kernel_state(self, target: QNetwork) -> NetState:
        """This network's arrays and ``target``'s parameters as one :class:`NetState`
        (live views: kernels that take it update this network in place)."""
        self._check_same_shape(target)
        return NetState(
            self._params, target._params, self._sizes, self._grads, self._adam_m,
            self._adam_v, self._adam_t,
        )  # fmt: skip

    # -- inference -----------------------------------------------------------
    def _obs(self, obs: Any, name: str = "obs") -> np.ndarray:
        x = obs
        if not (type(x) is np.ndarray and x.dtype is _F32 and x.flags.carray):
            x = as_f32(x, name)  # (its no-copy test inlined above: forward's hot path)
        n_in = self._sizes_tuple[0]
        if x.ndim == 1 and x.shape[0] == n_in:
            return x
        if x.ndim == 2 and x.shape[1] == n_in:
            return x
        raise ValueError(f"expected {name} of shape ({n_in},) or (batch, {n_in}), got {x.shape}")

    def forward(self, obs: Any) -> np.ndarray:
        """Q-values.

        Parameters
        ----------
        obs : array_like of float32, shape (obs_size,) or (batch, obs_size)

        Returns
        -------
        ndarray of float32, shape (n_actions,) or (batch, n_actions)

        Raises
        ------
        ValueError
            On a wrong shape, or an observation holding NaN or inf (the
            message names the row of a batch); nothing is computed then.
        """
        x = self._obs(obs)
        if x.ndim == 1:
            q = np.empty(self.n_actions, dtype=np.float32)
            if not _q_values_checked(self._params, self._sizes, x, q):
                raise _nonfinite_observation(x)
            return q
        q = np.empty((x.shape[0], self.n_actions), dtype=np.float32)
        if x.shape[0] > 0:
            row = _q_values_batch_checked(self._params, self._sizes, x, q)
            if row >= 0:
                raise _nonfinite_row(x, row, "obs")
        return q

    __call__ = forward

    def greedy_action(self, obs: Any) -> int:
        """``argmax_a Q(obs, a)`` for one observation (first index on ties).

        Raises ValueError for NaN or inf in ``obs``, as :meth:`forward` does.
        """
        x = self._obs(obs)
        if x.ndim != 1:
            raise ValueError(f"expected one observation of shape ({self.obs_size},), got {x.shape}")
        action = int(_greedy_action(self._params, self._sizes, x))
        if action < 0:
            raise _nonfinite_observation(x)
        return action

    def greedy_actions(self, obs: Any) -> np.ndarray:
        """Greedy action of every row of ``obs`` (batch, obs_size) -> int64 (batch,).

        Raises ValueError naming the first row holding NaN or inf, as :meth:`forward` does.
        """
        x = self._obs(obs)
        if x.ndim != 2:
            raise ValueError(
                f"expected a batch of observations of shape (batch, {self.obs_size}), got {x.shape}"
            )
        out = np.empty(x.shape[0], dtype=np.int64)
        if x.shape[0] > 0:
            row = _greedy_actions_checked(self._params, self._sizes, x, out)
            if row >= 0:
                raise _nonfinite_row(x, row, "obs")
        return out

    # -- target network ------------------------------------------------------
    def copy(self) -> QNetwork:
        """An independent deep copy (parameters and Adam state)."""
        other = QNetwork.__new__(QNetwork)
        other._init_storage(self._sizes_tuple, self._dueling, self._layer_norm)
        other._params[:] = self._params
        other._adam_m[:] = self._adam_m
        other._adam_v[:] = self._adam_v
        other._adam_t[:] = self._adam_t
        return other

    def _check_same_shape(self, other: QNetwork) -> None:
        if not isinstance(other, QNetwork):
            raise ValueError(f"expected a QNetwork, got {type(other).__name__}")
        if other._sizes_tuple != self._sizes_tuple:
            raise ValueError(
                f"network shapes differ: this one has layer_sizes {self._sizes_tuple}, "
                f"the other {other._sizes_tuple}"
            )
        if other._dueling != self._dueling:
            raise ValueError(
                f"network architectures differ: this one is {architecture_name(self._dueling)}, "
                f"the other {architecture_name(other._dueling)}"
            )
        if other._layer_norm != self._layer_norm:
            raise ValueError(
                f"network architectures differ: this one is {layer_norm_name(self._layer_norm)}, "
                f"the other {layer_norm_name(other._layer_norm)}"
            )

    def copy_from(self, other: QNetwork) -> None:
        """Hard sync: copy ``other``'s parameters into this network."""
        self._check_same_shape(other)
        self._params[:] = other._params

    def soft_update_from(self, other: QNetwork, tau: float) -> None:
        """Polyak averaging: ``theta <- tau * theta_other + (1 - tau) * theta``."""
        self._check_same_shape(other)
        t = float(tau)
        if not 0.0 < t <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {tau!r}")
        _polyak(self._params, other._params, t)

    # -- training ------------------------------------------------------------
    def update(
        self,
        obs: Any,
        actions: Any,
        rewards: Any,
        next_obs: Any,
        masks: Any,
        target: QNetwork,
        *batch_tail: Any,
        gamma: float,
        learning_rate: float,
        huber_delta: float = 1.0,
        double_dqn: bool = False,
        max_grad_norm: float | None = None,
        discounts: Any = None,
        weights: Any = None,
        td_errors_out: np.ndarray | None = None,
        next_action_masks: Any = None,
    ) -> float:
        """One DQN gradient step on a batch; returns the loss before the step.

        Parameters
        ----------
        obs, next_obs : array_like of float32, shape (batch, obs_size)
        actions : array_like of int, shape (batch,), each in [0, n_actions)
        rewards : array_like of float32, shape (batch,)
        masks : array_like of float32, shape (batch,)
            Bootstrap masks: 0 where the episode terminated, else 1.
        target : QNetwork
            The target network (same layer sizes); read only.
        gamma : float in [0, 1]
        learning_rate : float > 0
        huber_delta : float > 0
            Huber loss threshold (``torch.nn.HuberLoss(delta=...)``).
        double_dqn : bool
            Pick a* with the online network, evaluate it with the target.
        max_grad_norm : float > 0 or None
            Clip the global gradient norm as ``torch.nn.utils.clip_grad_norm_``.
        discounts : array_like of float32, shape (batch,), optional
            Per-sample discounts: the target is ``y = r + discounts * Q_target(s', a*)``
            and ``gamma`` and ``masks`` are not used for it (an n-step buffer
            hands over ``gamma**m * mask``). Default ``gamma * masks``.
        weights : array_like of float32, shape (batch,), optional
            Non-negative per-sample weights: the loss is the batch mean of
            ``weight * Huber`` (importance weights of prioritized replay). Default 1.
        td_errors_out : ndarray of float32, shape (batch,), optional
            Filled with ``|y - Q(s, a)|`` before the step (new priorities).
        next_action_masks : array_like of bool, shape (batch, n_actions), optional
            The next states' legal actions (1 / True = legal; each row at least
            one): the target's max (and double DQN's argmax) runs over them only.
            Default: every action is legal.

        ``net.update(*batch, target, ...)`` takes a whole sampled
        :class:`~ember_np.types.Batch` too (its nine fields, then the target):
        the batch's ``discounts`` and ``weights`` are used when not of length 0
        (n-step and prioritized buffers), and the packed ``next_action_masks``
        of a buffer with action masks, as if passed by keyword.

        Returns
        -------
        float
            (Weighted) mean Huber loss of the batch before the step.

        Raises
        ------
        ValueError
            On shapes that disagree with the network or each other, actions out
            of range, non-finite inputs, or out-of-range hyperparameters.
        """
        packed = None
        if batch_tail:  # update(*batch, target): the Batch's fields after masks, then the target
            target, discounts, weights, packed = _split_batch_tail(
                target, batch_tail, discounts, weights
            )
            if packed is not None and next_action_masks is not None:
                raise ValueError("next_action_masks given twice: in the batch and as a keyword")
        self._check_same_shape(target)
        x = self._obs(obs, "obs")
        nx = self._obs(next_obs, "next_obs")
        if x.ndim != 2 or x.shape[0] == 0:
            raise ValueError(
                f"expected obs of shape (batch, {self.obs_size}) with batch >= 1, got {x.shape}"
            )
        batch = x.shape[0]
        if nx.shape != x.shape:
            raise ValueError(f"expected next_obs of shape {x.shape} (like obs), got {nx.shape}")
        a = as_i64(actions, "actions")
        r = as_f32(rewards, "rewards")
        m = as_f32(masks, "masks")
        for name, arr in (("actions", a), ("rewards", r), ("masks", m)):
            if arr.shape != (batch,):
                raise ValueError(f"expected {name} of shape ({batch},), got {arr.shape}")
        if discounts is None and weights is None and td_errors_out is None:
            per = _NO_PER_SAMPLE
        else:
            per = PerSample(
                _optional_per_sample("discounts", discounts, batch),
                _optional_per_sample("weights", weights, batch),
                _td_errors_out(td_errors_out, batch),
            )
        g = float(gamma)
        if not 0.0 <= g <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
        lr = _check_positive_float("learning_rate", learning_rate)
        delta = _check_positive_float("huber_delta", huber_delta)
        clip = (
            None if max_grad_norm is None else _check_positive_float("max_grad_norm", max_grad_norm)
        )
        if packed is not None:
            bits = np.ascontiguousarray(packed, dtype=np.uint8)
            if bits.shape != (batch, (self.n_actions + 7) // 8):
                raise ValueError(
                    f"expected the batch's next_action_masks of shape "
                    f"({batch}, {(self.n_actions + 7) // 8}) (packed bits), got {bits.shape}"
                )
            legal = np.unpackbits(bits, axis=1, count=self.n_actions).astype(bool)
            data = Batch(x, a, r, nx, m, next_action_masks=np.packbits(check_action_masks(
                legal, batch, self.n_actions, "next_action_masks"), axis=1))  # fmt: skip
        elif next_action_masks is None:
            data = Batch(x, a, r, nx, m)
        else:
            legal = check_action_masks(next_action_masks, batch, self.n_actions,
                                       "next_action_masks")  # fmt: skip
            data = Batch(x, a, r, nx, m, next_action_masks=np.packbits(legal, axis=1))
        key = (g, lr, delta, bool(double_dqn), clip)
        hp = self._hp
        if hp is None or self._hp_key != key:
            hp = self._hp = update_settings(*key)
            self._hp_key = key
        cached = self._cached
        if cached is None or cached[0] is not target:  # the NetState with this target
            cached = self._cached = (target, self.kernel_state(target), None)
        net = cached[1]
        update = cached[2]
        if update is None:  # argument types are fixed by the checks above: skip dispatch
            update = entry_point(_checked_update, net, data, per, hp)
            self._cached = (target, net, update)
        bad, loss = update(net, data, per, hp)
        if bad == 1:
            raise ValueError(
                f"actions must be in [0, {self.n_actions}), got values from {a.min()} to {a.max()}"
            )
        if bad == 4:
            raise ValueError(
                f"weights must be >= 0, got a minimum of {per.weights.min()}; "
                "the network was not changed"
            )
        if bad:
            raise ValueError(
                "the batch contains NaN or infinite values; the network was not changed"
            )
        return float(loss)

    # -- state ---------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of everything that defines the network and its optimiser.

        Keys: ``layer_sizes`` (int64), ``dueling`` (bool, shape ()), ``w0, b0,
        w1, b1, ...`` (float32; a dueling network's last two are its A and V
        heads), ``adam_m``, ``adam_v`` (float32, shape (num_params,)), ``adam_t``
        (int64, (1,)), ``layer_norm`` (bool, shape ()) and with it ``ln_g0,
        ln_b0, ...`` (float32, each hidden layer's LayerNorm gain and bias).
        """
        state: dict[str, np.ndarray] = {"layer_sizes": self._sizes.copy()}
        state["dueling"] = np.array(self._dueling)
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            state[f"w{i}"] = w.copy()
            state[f"b{i}"] = b.copy()
        state["layer_norm"] = np.array(self._layer_norm)
        for key, view in self._norm_views():
            state[key] = view.copy()
        state["adam_m"] = self._adam_m.copy()
        state["adam_v"] = self._adam_v.copy()
        state["adam_t"] = self._adam_t.copy()
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore a :meth:`state_dict`; raises ValueError (nothing changed) on a mismatch.

        A state without a ``dueling`` entry (written before the dueling head
        existed) describes a plain network; one without ``layer_norm``, a
        network without LayerNorm.
        """
        sizes = tuple(int(s) for s in np.asarray(state["layer_sizes"]).ravel())
        if sizes != self._sizes_tuple:
            raise ValueError(
                f"layer_sizes mismatch: this network has {self._sizes_tuple}, the state has {sizes}"
            )
        stored = dueling_flag(state)
        if stored != self._dueling:
            raise ValueError(
                f"architecture mismatch: this network is {architecture_name(self._dueling)}, "
                f"the state is {architecture_name(stored)}"
            )
        stored_ln = layer_norm_flag(state)
        if stored_ln != self._layer_norm:
            raise ValueError(
                f"architecture mismatch: this network is {layer_norm_name(self._layer_norm)}, "
                f"the state is {layer_norm_name(stored_ln)}"
            )
        expected: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            expected[f"w{i}"] = (w.shape, _F32)
            expected[f"b{i}"] = (b.shape, _F32)
        for key, view in self._norm_views():
            expected[key] = (view.shape, _F32)
        expected["adam_m"] = (self._adam_m.shape, _F32)
        expected["adam_v"] = (self._adam_v.shape, _F32)
        expected["adam_t"] = ((1,), np.dtype(np.int64))
        arrays = {}
        for key, (shape, dtype) in expected.items():
            if key not in state:
                raise ValueError(f"network state is missing {key!r}")
            arr = np.asarray(state[key])
            if arr.shape != shape:
                raise ValueError(
                    f"network state {key!r}: expected shape {shape}, found {arr.shape}"
                )
            if arr.dtype != dtype:
                raise ValueError(
                    f"network state {key!r}: expected dtype {dtype}, found {arr.dtype}"
                )
            arrays[key] = arr
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            w[...] = arrays[f"w{i}"]
            b[...] = arrays[f"b{i}"]
        for key, view in self._norm_views():
            view[...] = arrays[key]
        self._adam_m[:] = arrays["adam_m"]
        self._adam_v[:] = arrays["adam_v"]
        self._adam_t[:] = arrays["adam_t"]

    # -- copying and pickling --------------------------------------------------
    # ``weights`` and ``biases`` are views of ``_params``; pickled or deep-copied
    # member by member they would come back as separate arrays that the kernels
    # never train. So a copy carries the state_dict and rebuilds the views.
    def __getstate__(self) -> dict[str, np.ndarray]:
        """What ``copy.deepcopy`` and ``pickle`` keep: :meth:`state_dict`."""
        return self.state_dict()

    def __setstate__(self, state: dict[str, np.ndarray]) -> None:
        dueling = bool(state["dueling"]) if "dueling" in state else False
        sizes = _layer_sizes(np.asarray(state["layer_sizes"]).tolist())
        self._init_storage(sizes, dueling, layer_norm_flag(state))
        self.load_state_dict(state)

    def _norm_views(self) -> list[tuple[str, np.ndarray]]:
        """(state_dict key, live view) of every LayerNorm gain and bias: ln_g<i>, ln_b<i>."""
        out = []
        for i, (gain, bias) in enumerate(zip(self.norm_gains, self.norm_biases)):
            out += [(f"ln_g{i}", gain), (f"ln_b{i}", bias)]
        return out

    def __repr__(self) -> str:
        duel = ", dueling=True" if self._dueling else ""
        norm = ", layer_norm=True" if self._layer_norm else ""
        return (
            f"QNetwork(layer_sizes={self._sizes_tuple}{duel}{norm}, num_params={self.num_params})"
        )
