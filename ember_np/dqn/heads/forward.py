"""The two forward passes behind :class:`~ember_np.DqnPolicy`: plain NumPy, or compiled.

Both read the same flat float32 parameter array (layer l: ``W_l`` row-major
``(in, out)``, then ``b_l`` ``(out,)``; see ``network.py``) and compute

    h_0 = x;  h_{l+1} = ReLU(h_l @ W_l + b_l);  Q = h_{L-1} @ W_{L-1} + b_{L-1}

(with LayerNorm, h_{l+1} = ReLU(LayerNorm_l(h_l @ W_l + b_l)); see :func:`norm_views`;
with a distributional head (``head.py``), Q is the expected value of the
last layer's n_atoms outputs per action: :func:`expected_values`)

* :class:`NumpyForward` uses NumPy alone (``np.dot`` is NumPy's BLAS
  ``sgemv`` / ``sgemm`` in float32). This module never imports numba, so a
  deployed policy acts within NumPy's import time, in about 30 MB.
* :class:`CompiledForward` calls the numba kernels of ``qvalues.py``; numba
  is imported when one is built. About 3x faster per single observation.

They agree on actions (the same argmax rule, :func:`greedy_index`) and on
Q-values up to float32 rounding (the sums run in a different order), and on
observations holding NaN or inf: ``greedy_one`` returns -1, ``q_one`` None,
and the batch methods the first such row beside their result (-1 if none),
so that :class:`~ember_np.DqnPolicy` raises one error for all four methods.

Both also hold ``limit`` (:func:`obs_limit`): the largest max|x| for which no
float32 value inside the network can overflow. Beyond it the passes (and the
ONNX graph) could overflow differently, so every acting method refuses such
an observation with one ValueError (:func:`refused_observation`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np

from ember_np.dqn.heads.head import DistributionalHead, kernel_sizes
from ember_np.encoding import nonfinite_observation, nonfinite_row

__all__ = [
    "BEYOND_LIMIT",
    "NONFINITE_OBS",
    "NONFINITE_Q",
    "CompiledForward",
    "NumpyForward",
    "check_observation",
    "expected_values",
    "first_nonfinite_row",
    "greedy_index",
    "greedy_indices",
    "greedy_legal",
    "layer_views",
    "ln_scales",
    "norm_views",
    "obs_limit",
    "refused_observation",
    "refused_row",
]

LN_EPS = 1e-5  # nn/mlp.py LN_EPS, torch.nn.LayerNorm's default (not imported: no numba here)
_F32_TINY = np.float32(np.finfo(np.float32).tiny)
_F32_MAX = float(np.finfo(np.float32).max)
NONFINITE_OBS = -1
"""Code of the acting kernels (``qvalues.greedy_action``) and :meth:`NumpyForward.greedy_one`:
the observation holds NaN or inf."""
BEYOND_LIMIT = -2
"""Code of the acting kernels and :meth:`NumpyForward.greedy_one`: the observation's
max |value| is beyond the network's :func:`obs_limit`."""
NONFINITE_Q = -3
"""Code of the acting kernels and :meth:`NumpyForward.greedy_one`: the Q-values are not
finite (the network overflowed float32)."""


def ln_scales(z: np.ndarray) -> np.ndarray:
    """LayerNorm's row scale of each row of ``z`` (..., n), float32 (..., 1): 2^e for
    max|z| = f * 2^e, e clipped to [0, 127] (1 for rows below 1, or of NaN or inf).

    LayerNorm divides the row by it before squaring (exact: a power of two), so
    rows of pre-activations up to 3.4e38 stay finite; the variance's floor at
    float32's smallest normal only acts on rows of equal values scaled by
    s > 2^54 (whose eps / s^2 underflows), where xhat is 0 either way.
    """
    with np.errstate(invalid="ignore"):
        e = np.frexp(np.abs(z).max(axis=-1, keepdims=True))[1]
    return np.ldexp(np.float32(1.0), np.clip(e, 0, 127)).astype(np.float32, copy=False)


def greedy_index(q: np.ndarray) -> int:
    """Index of the first maximum of ``q`` (n_actions,), as ``nn/mlp.py``'s ``argmax``.

    Ties go to the lowest index (``np.argmax``'s rule too). NaN never wins,
    except that a NaN in slot 0 keeps slot 0 (the kernel starts from slot 0
    and ``x > NaN`` is always false); ``np.argmax`` would return the first
    NaN, so that rare case is redone by the kernel's rule.
    """
    i = int(np.argmax(q))
    if q[i] == q[i]:  # not NaN: then q holds no NaN at all
        return i
    if q[0] != q[0]:
        return 0
    return int(np.argmax(np.where(np.isnan(q), -np.inf, q)))


def greedy_indices(q: np.ndarray) -> np.ndarray:
    """:func:`greedy_index` of every row of ``q`` (batch, n_actions): int64 (batch,)."""
    best = q.argmax(axis=1)
    if np.isnan(q).any():  # rare: redo the rows holding a NaN by the kernel's rule
        for r in np.flatnonzero(np.isnan(q).any(axis=1)):
            best[r] = greedy_index(q[r])
    return best


def greedy_legal(q: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """Index of the first maximum of each row of ``q`` over its legal actions.

    q : float (..., n_actions); legal : bool, same shape, each row with a
    legal action. Returns int64 of shape ``q.shape[:-1]``: ``nn/mlp.py``'s ``argmax_legal``
    rule for finite Q-values (ties to the lowest legal index).
    """
    return np.where(legal, q, -np.inf).argmax(axis=-1)


def first_nonfinite_row(x: np.ndarray) -> int:
    """Index of the first row of ``x`` (batch, n) holding NaN or inf, else -1."""
    ok = np.isfinite(x).all(axis=1)
    return -1 if ok.all() else int(np.argmin(ok))


def layer_views(
    layer_sizes: Sequence[int], params: np.ndarray, dueling: bool = False, atoms: int = 1
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(W_l, b_l) views into the flat ``params``, W_l of shape (in, out), b_l (out,).

    With ``dueling`` the last layer of ``layer_sizes`` is the advantage head
    and one more pair follows: the value head, W (hidden, 1) and b (1,).
    ``atoms``: a distributional head's outputs per action, which widen the
    last layer to n_actions * atoms and the value head to atoms.
    """
    out = []
    offset = 0
    widths = [*layer_sizes[:-1], layer_sizes[-1] * atoms]
    for n_in, n_out in zip(widths[:-1], widths[1:]):
        w = params[offset : offset + n_in * n_out].reshape(n_in, n_out)
        offset += n_in * n_out
        out.append((w, params[offset : offset + n_out]))
        offset += n_out
    if dueling:
        n_hid = layer_sizes[-2]
        out.append((params[offset : offset + n_hid * atoms].reshape(n_hid, atoms),
                    params[offset + n_hid * atoms : offset + (n_hid + 1) * atoms]))  # fmt: skip
    return out


def norm_views(
    layer_sizes: Sequence[int], params: np.ndarray, dueling: bool = False, atoms: int = 1
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(gain_l, bias_l) views of each hidden layer's LayerNorm, shape (hidden_l,) each.

    They are the last ``2 * sum(hidden)`` values of ``params``, after the
    layers of :func:`layer_views` (``nn/mlp.py``'s ``layout``).
    """
    views = layer_views(layer_sizes, params, dueling, atoms)
    offset = sum(w.size + b.size for w, b in views)
    out = []
    for width in layer_sizes[1:-1]:
        out.append((params[offset : offset + width], params[offset + width : offset + 2 * width]))
        offset += 2 * width
    return out


def obs_limit(
    layer_sizes: Sequence[int], params: np.ndarray, dueling: bool = False,
    layer_norm: bool = False, head: DistributionalHead | None = None,
) -> float:  # fmt: skip
    """The largest max|x| for which no float32 value inside the network can overflow.

    Returns a float32 value (as a Python float; ``inf`` when nothing grows
    with x). For every observation with ``max|x| <= limit`` every partial sum
    of every layer, in any order, stays below float32's max / 8, so the three
    forward passes (NumPy, compiled, ONNX) compute finite values that differ
    only by float32 rounding; beyond it they may overflow, each differently,
    and every backend refuses the observation (:func:`refused_observation`).

    The bound is affine in X = max|x| per unit: |h_j| <= a_j X + c_j with
    a = |W|^T a_prev and c = |W|^T c_prev + |b| (a sum of absolute values
    bounds every partial sum); ReLU keeps it; LayerNorm resets it to
    |gain| sqrt(n) + |bias| (|xhat| <= sqrt(n - 1)) and needs 2 (a X + c)
    (the compiled pass's z - mean); a dueling head adds the mean over actions
    (n_actions max|A|) and V + A - mean(A); C51's softmax subtracts the row's
    maximum (2 max|out|). QR-DQN's mean is taken in float64 (no bound).
    """
    atoms = 1 if head is None else head.n_atoms
    layers = layer_views(layer_sizes, params, dueling, atoms)
    norms = norm_views(layer_sizes, params, dueling, atoms) if layer_norm else []
    budget = _F32_MAX / 8.0
    limit = np.inf

    def cap(a: np.ndarray, c: np.ndarray) -> None:  # every a_j X + c_j <= budget
        nonlocal limit
        if (c > budget).any():
            limit = -1.0  # even x = 0 could overflow: weights this large diverged
            return
        grows = a > 0
        if grows.any():
            limit = min(limit, float(((budget - c[grows]) / a[grows]).min()))

    a = np.ones(layer_sizes[0])
    c = np.zeros(layer_sizes[0])
    n_dense = len(layer_sizes) - 1
    last_hidden = (a, c)
    for l in range(n_dense):
        w, b = layers[l]
        aw = np.abs(w.astype(np.float64))
        a, c = a @ aw, c @ aw + np.abs(b.astype(np.float64))
        if l < n_dense - 1 and norms:
            cap(2.0 * a, 2.0 * c)
            gain, beta = (np.abs(v.astype(np.float64)) for v in norms[l])
            a, c = np.zeros_like(a), gain * np.sqrt(gain.shape[0]) + beta
        else:
            cap(a, c)
        if l == n_dense - 2:
            last_hidden = (a, c)
    if dueling:  # A (n_actions, atoms) from (a, c); V (atoms,) from the last hidden layer
        w, b = layers[-1]
        aw = np.abs(w.astype(np.float64))
        a_v = last_hidden[0] @ aw
        c_v = last_hidden[1] @ aw + np.abs(b.astype(np.float64))
        cap(a_v, c_v)
        a_a, c_a = a.reshape(-1, atoms), c.reshape(-1, atoms)
        cap(a_a.sum(axis=0), c_a.sum(axis=0))  # the sum behind mean_a A
        a = a_v + 2.0 * a_a.max(axis=0)
        c = c_v + 2.0 * c_a.max(axis=0)
        cap(a, c)
    if head is not None and head.kind == "c51":
        cap(2.0 * a, 2.0 * c)  # out - max(out)
    if limit >= _F32_MAX:
        return float("inf") if np.isinf(limit) else _F32_MAX
    low = np.float32(limit)
    if float(low) > limit:  # round down: the limit is a float32 value, compared exactly
        low = np.nextafter(low, np.float32(-np.inf))
    return float(low)


def refused_observation(x: np.ndarray, code: int, limit: float, name: str = "obs") -> ValueError:
    """The error for an observation an acting method refused (``code``: the
    kernels' :data:`NONFINITE_OBS`, :data:`BEYOND_LIMIT` or :data:`NONFINITE_Q`)."""
    if code == NONFINITE_OBS:
        return nonfinite_observation(x, name)
    if code == BEYOND_LIMIT:
        return ValueError(
            f"observation {name}={x.tolist()} has max |value| {float(np.abs(x).max()):.6g}, "
            f"beyond {limit:.6g}, the largest this network computes without float32 "
            "overflow (DqnPolicy.max_abs_obs, from its weights); scale the observations "
            "down (e.g. normalise them in the encoder)"
        )
    return ValueError(
        f"the Q-values of observation {name}={x.tolist()} are not finite: the network "
        "overflowed float32 (its weights or the observation are too large); scale the "
        "observations down, or use an earlier checkpoint if the run diverged"
    )


def refused_row(x: np.ndarray, limit: float, name: str = "obs_batch") -> ValueError | None:
    """The error for the first row of ``x`` (batch, n) holding NaN or inf or with
    max |value| beyond ``limit`` (the same rule, and checks, as one observation's), or None."""
    m = np.abs(x).max(axis=1) if x.size else np.zeros(x.shape[0])
    bad = ~(m <= limit)  # NaN and inf fail too
    if not bad.any():
        return None
    row = int(np.argmax(bad))
    if not np.isfinite(x[row]).all():
        return nonfinite_row(x, row, name)
    err = refused_observation(x[row], BEYOND_LIMIT, limit, f"{name}[{row}]")
    return ValueError(f"{err} (row {row} of {x.shape[0]}); nothing was computed")


def check_observation(x: np.ndarray, limit: float, name: str = "obs") -> None:
    """Raise the error of :func:`refused_observation` unless ``x`` (n,) is finite
    with max |value| <= ``limit`` (exact: a float32 maximum against a float32 limit)."""
    if not np.max(abs(x)) <= limit:
        code = NONFINITE_OBS if not np.isfinite(x).all() else BEYOND_LIMIT
        raise refused_observation(x, code, limit, name)


def expected_values(head: DistributionalHead, out: np.ndarray) -> np.ndarray:
    """Q-values from a distributional head's outputs ``out`` (..., n_actions, n_atoms):
    C51's sum_k softmax(out)_k z_k, QR-DQN's mean_k out_k; float32 (..., n_actions).
    (The kernels' ``expected_q``, in NumPy: the same values up to float32 rounding.)
    QR's mean is summed in float64 as the kernel's: quantiles near float32's max
    (each finite) have a finite mean, which a float32 sum would overflow."""
    if head.kind == "qr":
        total = out.sum(axis=-1, dtype=np.float64)
        return (total * (1.0 / out.shape[-1])).astype(np.float32)
    e = np.exp(out - out.max(axis=-1, keepdims=True))
    return (np.dot(e, head.support()) / e.sum(axis=-1)).astype(np.float32, copy=False)


class NumpyForward:
    """Q-values and greedy actions with NumPy alone (float32 matrix products and ReLU).

    Parameters
    ----------
    layer_sizes : sequence of int
        ``(obs_size, hidden..., n_actions)``.
    params : ndarray of float32, shape (n_params,)
        The flat parameter array (read once: the pass keeps its own copy).

    Notes
    -----
    At batch 1 each NumPy call costs about a microsecond whatever its size,
    so the pass is written to make few calls: every hidden activation carries
    a constant 1 as an extra last unit, and each following layer's bias is one
    more row of its weight matrix, which makes ``h @ W + b`` one product::

        [h, 1] @ [[W, 0],    = [h @ W + b, 1]      (ReLU keeps the 1)
                  [b, 1]]

    (:meth:`greedy_one` checks max|x| against :attr:`limit` first, which also
    refuses NaN and inf; the batch methods rely on the carried unit.)
    That extra unit also checks the observation for free: it is
    ``x @ 0 + 1``, which is NaN when ``x`` holds NaN or inf (``inf * 0`` is
    NaN) and then makes every Q-value NaN. So a finite Q means a finite
    observation, and only a NaN Q leads to a real check. (NumPy then warns
    "invalid value encountered in dot" before ``act`` raises its ValueError;
    silencing that with ``np.errstate`` would cost more than the check saves.)

    The pass is split where later network variants plug in: :meth:`_trunk`
    (the hidden layers), :meth:`_head` (Q-values from the last hidden layer;
    with ``dueling`` one product gives ``[A | V]``, then Q = V + A - mean(A)) and
    :func:`greedy_index` (where an action mask would exclude actions).

    With ``layer_norm`` the hidden layers are computed one NumPy step at a
    time (:meth:`_norm_trunk`: Linear, LayerNorm, ReLU), and the head gets the
    carried 1 appended; NaN and inf still reach every Q-value (through the
    row mean), so the checks above hold.

    With a distributional ``head``, :meth:`_head` computes the n_atoms outputs
    per action (dueling: per atom) and then their expected values
    (:func:`expected_values`); NaN reaches every Q-value there too.
    """

    name = "numpy"

    def __init__(
        self, layer_sizes: Sequence[int], params: np.ndarray, dueling: bool = False,
        layer_norm: bool = False, head: DistributionalHead | None = None,
    ) -> None:  # fmt: skip
        self._dist = head
        self._atoms = atoms = 1 if head is None else head.n_atoms
        #: max |x| this network computes without float32 overflow (:func:`obs_limit`)
        self.limit = obs_limit(layer_sizes, params, dueling, layer_norm, head)
        self._few_inputs = layer_sizes[0] <= 64
        layers = layer_views(layer_sizes, params, dueling, atoms)
        self._dueling = dueling
        self._norm_layers: list[tuple[np.ndarray, ...]] = []
        if layer_norm:
            trunk = layers[: len(layer_sizes) - 2]
            norms = norm_views(layer_sizes, params, dueling, atoms)
            self._norm_layers = [(w.copy(), b.copy(), g.copy(), beta.copy())
                                 for (w, b), (g, beta) in zip(trunk, norms)]  # fmt: skip
        if dueling:  # advantage and value heads as one product: h @ [W_A | W_V]
            (w_a, b_a), (w_v, b_v) = layers[-2], layers[-1]
            layers = [*layers[:-2], (np.concatenate([w_a, w_v], axis=1), np.append(b_a, b_v))]
        f32 = np.float32
        w, b = layers[0]
        if len(layers) == 1:  # no hidden layer: Q = x @ W + b, the plain way
            self._w0, self._b0 = w.copy(), b.copy()
            self._hidden: list[np.ndarray] = []
            self._head_w = None
            return
        # first layer: x @ [W | 0] + [b, 1] = [x @ W + b, x @ 0 + 1]
        self._w0 = np.concatenate([w, np.zeros((w.shape[0], 1), f32)], axis=1)
        self._b0 = np.append(b, f32(1.0)).astype(f32)
        self._hidden = []
        for w, b in layers[1:-1]:
            aug = np.zeros((w.shape[0] + 1, w.shape[1] + 1), f32)
            aug[:-1, :-1] = w
            aug[-1, :-1] = b
            aug[-1, -1] = 1.0
            self._hidden.append(aug)
        w, b = layers[-1]
        self._head_w = np.concatenate([w, b[None, :]], axis=0)

    def _norm_trunk(self, x: np.ndarray) -> np.ndarray:
        """The hidden layers with LayerNorm, then the carried 1 the head expects."""
        h = x
        for w, b, gain, beta in self._norm_layers:
            z = np.dot(h, w)
            z += b
            s = ln_scales(z)
            z /= s  # exact (a power of two): squares below can no longer overflow
            z -= z.mean(axis=-1, keepdims=True)
            eps = np.float32(LN_EPS) / s / s  # eps / s^2, 0 when s is huge: hence the floor
            var = np.maximum(np.mean(z * z, axis=-1, keepdims=True) + eps, _F32_TINY)
            z *= 1.0 / np.sqrt(var)
            z *= gain
            z += beta
            h = np.maximum(z, 0.0, out=z)
        return np.concatenate([h, np.ones((*h.shape[:-1], 1), np.float32)], axis=-1)

    def _trunk(self, x: np.ndarray) -> np.ndarray:
        if self._norm_layers:
            return self._norm_trunk(x)
        h = np.dot(x, self._w0)
        h += self._b0
        if self._head_w is None:
            return h  # already the Q-values (no hidden layer)
        np.maximum(h, 0.0, out=h)  # ReLU, in place
        for w in self._hidden:
            h = np.dot(h, w)
            np.maximum(h, 0.0, out=h)
        return h

    def _head(self, h: np.ndarray) -> np.ndarray:
        if self._dist is not None:
            return self._dist_head(h)
        if self._head_w is None:
            return h
        if self._dueling:  # [A | V] -> Q = V + A - mean_a(A)
            av = np.dot(h, self._head_w)
            a = av[..., :-1]
            return av[..., -1:] + a - a.mean(axis=-1, keepdims=True)
        return np.dot(h, self._head_w)

    def _dist_head(self, h: np.ndarray) -> np.ndarray:
        """Expected values of a distributional head: outputs (..., n_actions, n_atoms)
        (dueling: V[k] + A[a, k] - mean_a A[a, k]), then :func:`expected_values`."""
        dist = self._dist
        assert dist is not None  # _head calls this only for a distributional head
        n = self._atoms
        out = h if self._head_w is None else np.dot(h, self._head_w)
        if self._dueling:  # [A | V], V the last n_atoms columns
            a = out[..., :-n].reshape(*out.shape[:-1], -1, n)
            out = out[..., None, -n:] + a - a.mean(axis=-2, keepdims=True)
        else:
            out = out.reshape(*out.shape[:-1], -1, n)
        return expected_values(dist, out)

    # A non-finite x makes every Q-value of its row NaN or inf (the carried
    # unit, or x @ W itself without hidden layers), so finite Q-values prove
    # a finite x and only non-finite ones lead to a look at x.

    def q_one(self, x: np.ndarray) -> np.ndarray | None:
        """Q-values of one observation: x float32 (obs_size,) -> float32 (n_actions,).

        None when ``x`` holds NaN or inf (callers raise).
        """
        q = self._head(self._trunk(x))
        if not np.isfinite(q).all() and not np.isfinite(x).all():
            return None
        return q

    def q_batch(self, x: np.ndarray) -> tuple[np.ndarray, int]:
        """Q-values of a batch: x float32 (batch, obs_size) -> float32 (batch, n_actions).

        Also returns the first row of ``x`` holding NaN or inf, or -1.
        """
        q = self._head(self._trunk(x))
        return q, (-1 if np.isfinite(q).all() else first_nonfinite_row(x))

    def greedy_one(self, x: np.ndarray) -> int:
        """argmax_a Q(x, a), or (callers raise) :data:`NONFINITE_OBS` when ``x`` holds
        NaN or inf, :data:`BEYOND_LIMIT` when max|x| > :attr:`limit`, :data:`NONFINITE_Q`
        (which the limit rules out) rather than an action from NaN Q-values."""
        if self._few_inputs:  # Python's max and min of a short list: 0.5 us, abs().max() 2
            v = x.tolist()
            within = max(v) <= self.limit and -self.limit <= min(v)
        else:
            within = np.max(abs(x)) <= self.limit
        if not within:  # exact (float32 values against a float32 limit)
            return NONFINITE_OBS if not np.isfinite(x).all() else BEYOND_LIMIT
        q = self._head(self._trunk(x))
        i = int(np.argmax(q))
        if q[i] == q[i]:
            return i
        # a NaN that max() let through (it compares false) reached q (the carried unit)
        return NONFINITE_OBS if not np.isfinite(x).all() else NONFINITE_Q

    def greedy_batch(self, x: np.ndarray) -> tuple[np.ndarray, int]:
        """argmax_a Q(x_i, a) of every row: int64 (batch,); and the first non-finite row or -1."""
        q = self._head(self._trunk(x))
        if np.isfinite(q).all():  # no NaN: np.argmax's rule is the kernel's (one pass, not two)
            return q.argmax(axis=1), -1
        return greedy_indices(q), first_nonfinite_row(x)

    def greedy_one_legal(self, x: np.ndarray, legal: np.ndarray) -> int:
        """argmax over the legal actions (bool (n_actions,)) of Q(x, a); -1 for a non-finite x."""
        q = self.q_one(x)
        return -1 if q is None else int(greedy_legal(q, legal))

    def greedy_batch_legal(self, x: np.ndarray, legal: np.ndarray) -> tuple[np.ndarray, int]:
        """:meth:`greedy_batch` over the legal actions (bool (batch, n_actions)) of each row."""
        q, row = self.q_batch(x)
        return greedy_legal(q, legal), row


_kernels: ModuleType | None = None


def _network_kernels() -> ModuleType:
    """``ember_np.dqn.heads.qvalues`` (imports numba; loads or compiles kernels on first use)."""
    global _kernels
    if _kernels is None:
        try:
            from ember_np.dqn.heads import qvalues
        except ImportError as exc:
            raise ImportError(
                f"backend='numba' needs numba, which cannot be imported ({exc}); "
                "install it (pip install numba) or use backend='numpy'"
            ) from exc

        _kernels = qvalues
    return _kernels


class CompiledForward:
    """The same pass through the numba kernels of ``qvalues.py`` (same parameters).

    Building one imports numba (about 0.3 s and 100 MB resident); the first
    call of each kernel loads it from numba's cache (or compiles it, a few
    seconds, when no cache is writable).
    """

    name = "numba"

    def __init__(
        self, layer_sizes: Sequence[int], params: np.ndarray, dueling: bool = False,
        layer_norm: bool = False, head: DistributionalHead | None = None,
    ) -> None:  # fmt: skip
        # ``dueling`` and ``layer_norm`` are not stored: the kernels read them
        # from the length of ``params`` (``nn/mlp.py``'s ``layout``), and the head
        # from ``sizes`` (head.kernel_sizes).
        _network_kernels()
        self._params = params
        self.limit = obs_limit(layer_sizes, params, dueling, layer_norm, head)
        self._sizes = kernel_sizes(layer_sizes, head, dueling)
        self._n_actions = int(layer_sizes[-1])

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("greedy_one", None)  # a bound machine-code entry point: resolved again
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:  # unpickled in a new process
        _network_kernels()
        self.__dict__.update(state)

    # The checked kernels test x itself: here ReLU would hide a +inf whose
    # products are all -inf, and a single observation's NaN (ReLU maps it to 0).

    def q_one(self, x: np.ndarray) -> np.ndarray | None:
        q = np.empty(self._n_actions, dtype=np.float32)
        if not _kernels.q_values_checked(self._params, self._sizes, x, q):  # type: ignore[union-attr]
            return None
        return q

    def q_batch(self, x: np.ndarray) -> tuple[np.ndarray, int]:
        q = np.empty((x.shape[0], self._n_actions), dtype=np.float32)
        row = -1
        if x.shape[0]:
            row = _kernels.q_values_batch_checked(self._params, self._sizes, x, q)  # type: ignore[union-attr]
        return q, int(row)

    def greedy_one(self, x: np.ndarray) -> int:
        """argmax_a Q(x, a), or a negative code as :meth:`NumpyForward.greedy_one`'s.

        ``x`` must be float32, C-contiguous, aligned and writeable, of shape
        (obs_size,): what ``DqnPolicy`` passes (``as_f32``'s layout). The first
        call resolves the kernel's compiled entry point for exactly those types
        (:func:`ember_np._jit.entry_point`) and binds it with the parameters as
        this instance's ``greedy_one``: later calls skip numba's per-call typing
        and this Python frame (a C-level ``partial`` call, ~0.3 µs less per act).
        """
        from ember_np._jit import entry_point  # numba is imported already (see __init__)

        call = _kernels.greedy_action  # type: ignore[union-attr]
        entry = entry_point(call, self._params, self._sizes, self.limit, x)
        self.greedy_one = partial(entry, self._params, self._sizes, self.limit)  # type: ignore[method-assign]
        return int(self.greedy_one(x))

    def greedy_batch(self, x: np.ndarray) -> tuple[np.ndarray, int]:
        out = np.empty(x.shape[0], dtype=np.int64)
        row = -1
        if x.shape[0]:
            row = _kernels.greedy_actions_checked(self._params, self._sizes, x, out)  # type: ignore[union-attr]
        return out, int(row)

    def greedy_one_legal(self, x: np.ndarray, legal: np.ndarray) -> int:
        return int(_kernels.greedy_action_legal(self._params, self._sizes, x, legal))  # type: ignore[union-attr]

    def greedy_batch_legal(self, x: np.ndarray, legal: np.ndarray) -> tuple[np.ndarray, int]:
        out = np.empty(x.shape[0], dtype=np.int64)
        row = -1
        if x.shape[0]:
            row = _kernels.greedy_actions_legal_checked(self._params, self._sizes, x, legal, out)  # type: ignore[union-attr]
        return out, int(row)
