"""Compiled forward pass of an MLP: parameter layout, Linear/LayerNorm/ReLU
layers, a two-stream (dueling) output, argmax (numba kernels, public to the package).

Parameter layout, layer l (0-based) mapping ``sizes[l] -> sizes[l+1]``:
``W_l`` (``sizes[l] * sizes[l+1]`` values, row-major ``(in, out)``) then
``b_l`` (``sizes[l+1]`` values); a dueling network's value stream and the
LayerNorms' gains and biases come last (see :func:`layout`). Every kernel
works in the dtype of ``params`` (float32 in use, float64 in gradient tests)
and assumes the shapes its docstring states; the Python wrappers that call
them (DQN's ``QNetwork``, ``DqnPolicy``) check them.

``sizes`` is ``(n_in, hidden..., n_out)`` for a plain output layer; a grouped
one (DQN's C51 and QR-DQN heads, ``n_actions`` groups of ``n_atoms`` units)
carries the suffix ``sizes.py`` describes, so the kernels read the shape through
``shape.py`` (:func:`~ember_np.nn.shape.n_layers`, :func:`~ember_np.nn.shape.n_atoms`).
What the outputs mean is the algorithm's (DQN's Q-values: ``dqn/heads/qvalues.py``).
"""

from __future__ import annotations

import math

import numpy as np

from ember_np._jit import kernel, ordered_kernel
from ember_np.nn._blas import gemm
from ember_np.nn.shape import head_dueling, head_kind, n_atoms, n_layers

LN_EPS = 1e-5  # torch.nn.LayerNorm's default eps


@kernel
def layer(params: np.ndarray, sizes: np.ndarray, offset: int, l: int):  # noqa: ANN202
    """Views (W, b) of layer ``l`` whose weights start at ``offset``.

    Parameters
    ----------
    params : ndarray of float32 (or float64), shape (num_params,)
    sizes : ndarray of int64, shape (n_layers + 1,)
    offset : int
        Where layer ``l``'s W starts in ``params``.
    l : int
        Precondition: ``0 <= l < n_layers``.

    Returns
    -------
    W : ndarray, shape (sizes[l], sizes[l+1]), a view into ``params``
    b : ndarray, shape (sizes[l+1],), a view into ``params``
    """
    n_in = sizes[l]
    n_out = sizes[l + 1]
    w = params[offset : offset + n_in * n_out].reshape((n_in, n_out))
    b = params[offset + n_in * n_out : offset + n_in * n_out + n_out]
    return w, b


@kernel
def plain_size(sizes: np.ndarray) -> int:
    """Number of parameters of the plain MLP ``sizes`` (int64 (n_layers + 1,)).

    A dueling network's ``params`` are longer: they end with the value head
    (see :func:`dueling_combine`). Kernels compare ``params.shape[0]`` with
    this once per call to tell the two architectures apart.
    """
    n = 0
    for l in range(n_layers(sizes)):
        n += sizes[l] * sizes[l + 1] + sizes[l + 1]
    return n


@kernel
def layout(n_params: int, sizes: np.ndarray) -> tuple:
    """Where a network's optional parameters start: (v_off, ln_off), -1 when absent.

    The flat layout is the plain MLP (:func:`plain_size` values); then a
    dueling network's value head, ``W_V`` (n_hid,) and ``b_V`` (n_hid + 1
    values, see :func:`dueling_combine`); then, with LayerNorm, for each
    hidden layer l its gain then its bias (``sizes[l+1]`` values each). The
    three extras have distinct lengths, n_hid + 1, 2H and n_hid + 1 + 2H (H the
    sum of hidden widths; LayerNorm needs every hidden width >= 2, so 2H >
    n_hid + 1): the parameter count names the architecture exactly. Kernels
    decode it once per call.

    Parameters
    ----------
    n_params : int
        ``len(params)``.
    sizes : ndarray of int64, shape (n_layers + 1,)

    Returns
    -------
    v_off, ln_off : int
        Offsets of the value head and of the LayerNorm parameters, -1 when absent.
    """
    plain = plain_size(sizes)
    extra = n_params - plain
    n_lay = n_layers(sizes)
    if extra == 0 or n_lay < 2:
        return -1, -1
    duel = (sizes[n_lay - 1] + 1) * n_atoms(sizes)  # W_V (n_hid, atoms), b_V (atoms,)
    if head_kind(sizes) != 0:  # (n_hid + 1) * atoms may equal 2H: the suffix says it
        if not head_dueling(sizes):
            return -1, plain
        return plain, (plain + duel if extra > duel else -1)
    if extra == duel:
        return plain, -1
    norm = 0
    for l in range(1, n_lay):
        norm += 2 * sizes[l]
    if extra == duel + norm:  # a dueling head, then LayerNorm
        return plain, plain + duel
    return -1, plain


@kernel
def acts_size(n_params: int, sizes: np.ndarray, batch: int) -> int:
    """Length of the workspace :func:`forward_into` needs for ``batch`` rows.

    Every layer's output (B * sum(sizes[1:])); with LayerNorm also, per hidden
    layer, its normalised pre-activation xhat (B * width) and 1 / std (B).

    Parameters
    ----------
    n_params : int
        ``len(params)`` (names the architecture, see :func:`layout`).
    sizes : ndarray of int64, shape (n_layers + 1,)
    batch : int >= 1

    Returns
    -------
    int
    """
    n_lay = n_layers(sizes)
    total = 0
    for l in range(1, n_lay + 1):
        total += sizes[l]
    if layout(n_params, sizes)[1] >= 0:
        for l in range(1, n_lay):
            total += sizes[l] + 1
    return batch * total


@ordered_kernel
def lane_sum(row: np.ndarray) -> float:
    """sum_k row[k] in float64, in one fixed order: four running sums over k mod 4,
    then (s0 + s1) + (s2 + s3), then the last n mod 4 values.

    Written as four lanes so LLVM can vectorise it without ``reassoc`` (see
    :func:`~ember_np._jit.ordered_kernel`): a single running sum is a chain of
    dependent additions (LayerNorm updates took 1.5x the time). Compiled for
    float32 rows (the forward pass) and float64 ones (the backward pass's sums).
    """
    n = row.shape[0]
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    k = 0
    while k + 4 <= n:
        s0 += row[k]
        s1 += row[k + 1]
        s2 += row[k + 2]
        s3 += row[k + 3]
        k += 4
    total = (s0 + s1) + (s2 + s3)
    while k < n:
        total += row[k]
        k += 1
    return total


@ordered_kernel
def lane_square_sum(row: np.ndarray, shift: float) -> float:
    """sum_k (row[k] - shift)^2 in float64, in :func:`lane_sum`'s fixed order."""
    n = row.shape[0]
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    k = 0
    while k + 4 <= n:
        d0 = row[k] - shift
        d1 = row[k + 1] - shift
        d2 = row[k + 2] - shift
        d3 = row[k + 3] - shift
        s0 += d0 * d0
        s1 += d1 * d1
        s2 += d2 * d2
        s3 += d3 * d3
        k += 4
    total = (s0 + s1) + (s2 + s3)
    while k < n:
        d = row[k] - shift
        total += d * d
        k += 1
    return total


@ordered_kernel
def layer_norm_relu(
    z: np.ndarray, gain: np.ndarray, beta: np.ndarray, xhat: np.ndarray, rstd: np.ndarray
) -> None:
    """LayerNorm then ReLU over each row (Ba et al. 2016; torch.nn.LayerNorm, eps 1e-5).

    z : float (B, n), the pre-activation h W + b on entry, ReLU(gain * xhat + beta)
    on return. gain, beta : float (n,). xhat : float (B, n) and rstd : float (B,),
    written for the backward pass: xhat = (z - mean) * rstd, rstd = 1 / sqrt(var + eps),
    mean and (biased) var over the row: sums in float64, the normalisation in z's
    dtype (in float64, each value converted twice, it took 2x the time).

    The float32 passes (forward.py's NumPy pass, export.py's ONNX graph) divide the
    row by a power of two s (forward.ln_scales) so no square overflows float32, with
    eps / s^2: the same formula wherever finite. The float64 sums here cannot
    overflow, so the scale is skipped (it cost 15% of a LayerNorm update).
    """
    n = z.shape[1]
    inv_n = 1.0 / n
    dt = z.dtype.type
    for i in range(z.shape[0]):
        row = z[i]
        mean = lane_sum(row) * inv_n
        r = 1.0 / math.sqrt(lane_square_sum(row, mean) * inv_n + LN_EPS)
        rstd[i] = r
        mean_z, r_z, zero = dt(mean), dt(r), dt(0.0)  # (the docstring says why)
        for k in range(n):
            xh = (z[i, k] - mean_z) * r_z
            xhat[i, k] = xh
            v = gain[k] * xh + beta[k]
            z[i, k] = v if v > zero else zero


@ordered_kernel
def layer_norm_backward(
    gain: np.ndarray, xhat: np.ndarray, rstd: np.ndarray, dy: np.ndarray, g_gain: np.ndarray,
    g_beta: np.ndarray,
) -> None:  # fmt: skip
    """Backward pass of :func:`layer_norm_relu`'s LayerNorm, in place.

    gain : float (n,); xhat (B, n), rstd (B,) as the forward pass wrote them.
    dy : float (B, n), d loss / d(LayerNorm output) on entry (ReLU already
    applied), d loss / dz on return. g_gain, g_beta : float (n,), written.

    dgain = sum_i dy * xhat, dbeta = sum_i dy; with g = dy * gain,
    dz = rstd * (g - mean(g) - xhat * mean(g * xhat)).
    """
    n = dy.shape[1]
    inv_n = 1.0 / n
    dt = dy.dtype.type
    g_gain[:] = 0.0
    g_beta[:] = 0.0
    g = np.empty(n, dtype=np.float64)  # dy * gain of a row, then summed in lanes
    gx = np.empty(n, dtype=np.float64)  # and times xhat
    for i in range(dy.shape[0]):
        for k in range(n):
            d = dy[i, k]
            g_gain[k] += d * xhat[i, k]
            g_beta[k] += d
            gk = d * gain[k]
            g[k] = gk
            gx[k] = gk * xhat[i, k]
        s1 = lane_sum(g)
        s2 = lane_sum(gx)
        s1_z, s2_z = dt(s1 * inv_n), dt(s2 * inv_n)  # (in dy's dtype: as the forward)
        r = rstd[i]
        for k in range(n):
            dy[i, k] = r * (dy[i, k] * gain[k] - s1_z - xhat[i, k] * s2_z)


@kernel
def dueling_combine(
    params: np.ndarray, v_off: int, h: np.ndarray, q: np.ndarray, atoms: int
) -> None:
    """Dueling head (Wang et al. 2016): Q = V + A - mean_a(A), in place, per atom.

    params : float (num_params,); the value head is ``W_V`` (n_hid, atoms),
    row-major, at ``v_off``, then ``b_V`` (atoms,). h : float (B, n_hid), the
    last hidden activation, rows contiguous; q : float (B, n_actions * atoms),
    the advantage head's output A on entry, Q on return: with a distributional
    head (atoms > 1) x[a, k] = V[k] + A[a, k] - mean_a A[a, k] (unit a * atoms + k).
    """
    n_hid = h.shape[1]
    if atoms > 1:
        n_act = q.shape[1] // atoms
        w_v = params[v_off : v_off + n_hid * atoms].reshape((n_hid, atoms))
        b_v = params[v_off + n_hid * atoms : v_off + (n_hid + 1) * atoms]
        v = np.empty((q.shape[0], atoms), dtype=q.dtype)
        gemm(h, w_v, v, False, False, 0.0)
        # Atom k innermost: contiguous, so it vectorises; each value's sums as before.
        mean = np.empty(atoms, dtype=q.dtype)
        shift = np.empty(atoms, dtype=np.float64)  # (a float / an int is a float64)
        for i in range(q.shape[0]):
            qi = q[i]
            vi = v[i]
            for k in range(atoms):
                mean[k] = qi[k]
            for a in range(1, n_act):
                qa = qi[a * atoms : (a + 1) * atoms]
                for k in range(atoms):
                    mean[k] += qa[k]
            for k in range(atoms):
                shift[k] = vi[k] + b_v[k] - mean[k] / n_act
            for a in range(n_act):
                qa = qi[a * atoms : (a + 1) * atoms]
                for k in range(atoms):
                    qa[k] += shift[k]
        return
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
def bias_act(h: np.ndarray, b: np.ndarray, relu: bool) -> None:
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
def forward_into(params: np.ndarray, sizes: np.ndarray, x: np.ndarray, acts: np.ndarray) -> int:
    """Batch forward pass; layer l's output goes to ``acts`` at a running offset.

    A dueling network (``params`` longer than :func:`plain_size`) has its
    advantage head as the last layer and combines it in place with the value
    head (:func:`dueling_combine`). With LayerNorm (:func:`layout`) each
    hidden layer is Linear -> LayerNorm -> ReLU.

    Parameters
    ----------
    params : ndarray of float32 (or float64), shape (num_params,)
    sizes : ndarray of int64, shape (n_layers + 1,), or with a head's suffix
    x : ndarray of params' dtype, shape (B, sizes[0])
        Rows contiguous (a BLAS operand).
    acts : ndarray of params' dtype, shape (>= acts_size(len(params), sizes, B),)
        Workspace, written. Layer l's activation (post-ReLU for hidden layers)
        is the ``(B, sizes[l+1])`` block starting at ``B * sum(sizes[1:l+1])``;
        the outputs are the last block (a grouped output layer's are of width
        n_actions * n_atoms: DQN reads them in ``dqn/heads/head_kernels.py``);
        with LayerNorm each hidden layer's xhat (B, width) and rstd (B,) follow.

    Returns
    -------
    int
        The offset of the output block in ``acts``.
    """
    batch = x.shape[0]
    n_layers_ = n_layers(sizes)
    v_off, ln_off = layout(params.shape[0], sizes)
    ln_a = 0  # where LayerNorm's saved values start in acts
    for l in range(1, n_layers_ + 1):
        ln_a += batch * sizes[l]
    p_off = 0
    a_off = 0
    h = x
    for l in range(n_layers_):
        w, b = layer(params, sizes, p_off, l)
        n_out = sizes[l + 1]
        out = acts[a_off : a_off + batch * n_out].reshape((batch, n_out))
        gemm(h, w, out, False, False, 0.0)
        hidden = l < n_layers_ - 1
        if hidden and ln_off >= 0:
            bias_act(out, b, False)
            xhat = acts[ln_a : ln_a + batch * n_out].reshape((batch, n_out))
            rstd = acts[ln_a + batch * n_out : ln_a + batch * n_out + batch]
            gain = params[ln_off : ln_off + n_out]
            layer_norm_relu(out, gain, params[ln_off + n_out : ln_off + 2 * n_out], xhat, rstd)
            ln_a += batch * (n_out + 1)
            ln_off += 2 * n_out
        else:
            bias_act(out, b, hidden)
        p_off += sizes[l] * n_out + n_out
        if hidden:
            a_off += batch * n_out
            h = out
    if v_off >= 0:  # dueling: the last layer was A; h is the last hidden layer
        n_act = sizes[n_layers_]
        q = acts[a_off : a_off + batch * n_act].reshape((batch, n_act))
        dueling_combine(params, v_off, h, q, n_atoms(sizes))
    return a_off


@kernel
def argmax(q: np.ndarray) -> int:
    """Index of the first maximum of ``q`` (float (n,), n >= 1; NaN never wins)."""
    best = 0
    for j in range(1, q.shape[0]):
        if q[j] > q[best]:
            best = j
    return best


@kernel
def all_finite(x: np.ndarray) -> bool:
    """Whether every value of ``x`` (float (n,)) is finite."""
    for k in range(x.shape[0]):
        if not np.isfinite(x[k]):
            return False
    return True


# Action masks (see ember_np/_masks.py): a bool (n_actions,) mask of length 0
# means every action is legal; the replay buffer hands the TD target packed
# bits (np.packbits layout). Callers guarantee at least one legal action.


@kernel
def argmax_legal(q: np.ndarray, legal: np.ndarray) -> int:
    """Index of the first maximum of ``q`` over the legal actions.

    q : float (n,); legal : bool (n,), at least one True, or (0,): :func:`argmax`.
    """
    if legal.shape[0] == 0:
        return argmax(q)
    best = 0
    while not legal[best]:
        best += 1
    for j in range(best + 1, q.shape[0]):
        if legal[j] and q[j] > q[best]:
            best = j
    return best


@kernel
def argmax_packed(q: np.ndarray, bits: np.ndarray) -> int:
    """Index of the first maximum of ``q`` over the actions whose bit is set.

    Parameters
    ----------
    q : ndarray of float, shape (n,)
    bits : ndarray of uint8, shape (ceil(n / 8),)
        Packed as ``np.packbits`` (action j is bit ``7 - j % 8`` of byte
        ``j // 8``); precondition: at least one of the first n bits set.

    Returns
    -------
    int
    """
    best = -1
    for j in range(q.shape[0]):
        if (bits[j >> 3] >> (7 - (j & 7))) & 1 and (best < 0 or q[j] > q[best]):
            best = j
    return best


@kernel
def first_nonfinite_row(x: np.ndarray) -> int:
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
