"""PPO's actor-critic: a flat parameter vector, orthogonal initialisation and the
compiled batch forward pass (logits, values, a categorical policy's log-probabilities,
entropy, sampled and greedy actions).

Architecture, as a table of layers (:func:`build_layers`, int64 ``(L, 7)``, one row a
Linear layer; columns :data:`N_IN`, :data:`N_OUT`, :data:`W_OFF`, :data:`SRC`,
:data:`A_OFF`, :data:`ACT`, :data:`ROLE`):

* separate actor and critic (SB3's MlpPolicy, the default): the actor's hidden layers,
  its logits layer, then the critic's hidden layers and its value layer, each MLP
  reading the observation;
* a shared trunk (ember-rl's): the trunk's hidden layers, then the logits layer and
  the value layer, both reading the trunk's last hidden layer.

Each layer's ``W`` (``n_in x n_out``, row-major ``(in, out)``: ``y = x W + b``) starts at
its ``W_OFF`` in ``params``, its ``b`` right after; the layers follow one another in
table order. Layer ``l`` reads the observation (``SRC`` -1) or layer ``SRC``'s output;
its output (after the hidden activation, ``ACT`` 1 tanh, 2 ReLU, 0 none) is the
``(B, n_out)`` block at ``B * A_OFF`` of the activation workspace (length
``B * acts_width(layers)``). The kernels work in ``params``' dtype: float32 in use,
float64 in the gradient tests.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ember_np._jit import kernel
from ember_np.nn.skinny import product
from ember_np.ppo.config import PPOConfig
from ember_np.rng import Rng, next_double

__all__ = [
    "A_OFF",
    "ACT",
    "N_IN",
    "N_OUT",
    "ROLE",
    "SRC",
    "W_OFF",
    "ActorCritic",
    "PPONet",
    "act_batch",
    "acts_width",
    "backward_into",
    "bias_tanh",
    "build_layers",
    "evaluate_batch",
    "forward_heads",
    "forward_into",
    "head_layers",
    "log_softmax_rows",
    "orthogonal",
]

#: Layer table column: the layer's input width.
N_IN = 0
#: Layer table column: the layer's output width.
N_OUT = 1
#: Layer table column: where the layer's W starts in ``params`` (its b follows W).
W_OFF = 2
#: Layer table column: the layer whose output it reads, -1 for the observation.
SRC = 3
#: Layer table column: where its output starts in the activation workspace, per row.
A_OFF = 4
#: Layer table column: the activation applied, 0 none, 1 tanh, 2 ReLU.
ACT = 5
#: Layer table column: 0 a hidden layer, 1 the logits layer, 2 the value layer.
ROLE = 6
ROLE_HIDDEN, ROLE_LOGITS, ROLE_VALUE = 0, 1, 2
ACT_NONE, ACT_TANH, ACT_RELU = 0, 1, 2
#: Orthogonal initialisation's gains (SB3's and CleanRL's): hidden layers, logits, value.
GAIN_HIDDEN, GAIN_POLICY, GAIN_VALUE = math.sqrt(2.0), 0.01, 1.0


class PPONet(NamedTuple):
    """What the update kernels read and write, passed to them as one value.

    params, grads, adam_m, adam_v : float (num_params,), one dtype; adam_t : int64
    (1,), Adam's step count; layers : int64 (L, 7), the layer table.
    """

    params: np.ndarray
    grads: np.ndarray
    adam_m: np.ndarray
    adam_v: np.ndarray
    adam_t: np.ndarray
    layers: np.ndarray


def build_layers(
    obs_dim: int, n_actions: int, hidden: tuple[int, ...], activation: str, shared: bool
) -> tuple[np.ndarray, int]:
    """The layer table (int64 (L, 7), see the module docstring) and the parameter count."""
    act = ACT_TANH if activation == "tanh" else ACT_RELU
    rows: list[list[int]] = []
    offsets = [0, 0]  # next parameter, next activation column

    def add(n_in: int, n_out: int, src: int, act_: int, role: int) -> int:
        rows.append([n_in, n_out, offsets[0], src, offsets[1], act_, role])
        offsets[0] += n_in * n_out + n_out
        offsets[1] += n_out
        return len(rows) - 1

    def mlp(src: int, width: int) -> tuple[int, int]:
        for h in hidden:
            src = add(width, h, src, act, ROLE_HIDDEN)
            width = h
        return src, width

    if shared:
        src, width = mlp(-1, obs_dim)
        add(width, n_actions, src, ACT_NONE, ROLE_LOGITS)
        add(width, 1, src, ACT_NONE, ROLE_VALUE)
    else:
        src, width = mlp(-1, obs_dim)
        add(width, n_actions, src, ACT_NONE, ROLE_LOGITS)
        src, width = mlp(-1, obs_dim)
        add(width, 1, src, ACT_NONE, ROLE_VALUE)
    return np.array(rows, dtype=np.int64), offsets[0]


def orthogonal(n_out: int, n_in: int, gain: float, rng: Rng) -> np.ndarray:
    """A float64 ``(n_in, n_out)`` weight whose transpose is ``torch.nn.init.orthogonal_``'s
    ``(n_out, n_in)`` matrix times ``gain``: orthonormal rows (or columns, whichever
    are fewer).

    As torch: a standard normal ``(n_out, n_in)`` matrix (drawn from ``rng``, row-major;
    ember_np's normals, :meth:`~ember_np.rng.Rng.normal`), transposed when it has
    fewer rows than columns, QR-decomposed (NumPy), Q's columns multiplied by the
    signs of R's diagonal (so the result is unique), transposed back.
    """
    flat = rng.normal(n_out * n_in).reshape(n_out, n_in)
    wide = n_out < n_in
    if wide:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if wide:
        q = q.T
    return np.ascontiguousarray((gain * q).T)


@kernel
def acts_width(layers: np.ndarray) -> int:
    """Activation columns per row: the sum of every layer's width (layers int64 (L, 7))."""
    total = 0
    for l in range(layers.shape[0]):
        total += layers[l, N_OUT]
    return total


@kernel
def head_layers(layers: np.ndarray) -> tuple[int, int]:
    """The rows of the logits layer and of the value layer in the table."""
    logits = value = -1
    for l in range(layers.shape[0]):
        if layers[l, ROLE] == ROLE_LOGITS:
            logits = l
        elif layers[l, ROLE] == ROLE_VALUE:
            value = l
    return logits, value


# Eigen's rational approximation of tanh on [-c, c] (generic_fast_tanh_float): odd
# numerator coefficients alpha_1 .. alpha_13, even denominator beta_0 .. beta_6.
TANH_CLAMP = 7.90531110763549805
TANH_TINY = 0.0004  # below it tanh(x) = x in float32
TA1, TA3, TA5, TA7 = (
    4.89352455891786e-03,
    6.37261928875436e-04,
    1.48572235717979e-05,
    5.12229709037114e-08,
)
TA9, TA11, TA13 = -8.60467152213735e-11, 2.00018790482477e-13, -2.76076847742355e-16
TB0, TB2, TB4, TB6 = (
    4.89352518554385e-03,
    2.26843463243900e-03,
    1.18534705686654e-04,
    1.19825839466702e-06,
)


@kernel
def tanh32(x0: float) -> float:
    """tanh of a float32 by Eigen's rational approximation (within 4e-7 of tanh,
    relative or absolute: 3 float32 ulps)."""
    f = np.float32
    c = f(TANH_CLAMP)
    x = min(max(x0, -c), c)
    x2 = x * x
    p = x2 * f(TA13) + f(TA11)
    p = p * x2 + f(TA9)
    p = p * x2 + f(TA7)
    p = p * x2 + f(TA5)
    p = p * x2 + f(TA3)
    p = p * x2 + f(TA1)
    p = p * x
    q = x2 * f(TB6) + f(TB4)
    q = q * x2 + f(TB2)
    q = q * x2 + f(TB0)
    return x0 if abs(x0) < f(TANH_TINY) else p / q


@kernel
def bias_tanh(z: np.ndarray, b: np.ndarray) -> None:
    """z <- tanh(z + b), b broadcast over the rows.

    z : float (B, n), in place; b : float (n,), z's dtype. float32: :func:`tanh32`,
    in a loop LLVM vectorises (libm's ``tanhf``, called once per value, took 80% of
    a minibatch update of a 64 x 64 network). float64 (the gradient tests):
    ``math.tanh``.

    Four rows at a time: four independent chains of multiply-adds and a division in
    each step of the loop, where one row's chain kept the units waiting on each
    other. 256 rows of 64 took 8.4 us instead of 10.0 (same bits: each value goes
    through the same operations).
    """
    rows, n = z.shape
    if z.itemsize == 8:
        for i in range(rows):
            for k in range(n):
                z[i, k] = math.tanh(z[i, k] + b[k])
        return
    i = 0
    while i + 4 <= rows:
        for k in range(n):
            bk = b[k]
            z[i, k] = tanh32(z[i, k] + bk)
            z[i + 1, k] = tanh32(z[i + 1, k] + bk)
            z[i + 2, k] = tanh32(z[i + 2, k] + bk)
            z[i + 3, k] = tanh32(z[i + 3, k] + bk)
        i += 4
    for r in range(i, rows):
        for k in range(n):
            z[r, k] = tanh32(z[r, k] + b[k])


@kernel
def forward_into(params: np.ndarray, layers: np.ndarray, x: np.ndarray, acts: np.ndarray) -> None:
    """Batch forward pass of every layer into ``acts``.

    Parameters
    ----------
    params : ndarray of float32 (or float64), shape (num_params,)
    layers : ndarray of int64, shape (L, 7)
        The layer table.
    x : ndarray of params' dtype, shape (B, obs_dim)
        Rows contiguous (a BLAS operand).
    acts : ndarray of params' dtype, shape (>= B * acts_width(layers),)
        Written: layer l's output (activated for hidden layers) is the (B, n_out)
        block at ``B * layers[l, A_OFF]``; the logits and the values (B, 1) are the
        head layers' blocks (:func:`head_layers`).
    """
    batch = x.shape[0]
    zero = params.dtype.type(0.0)
    for l in range(layers.shape[0]):
        n_in = layers[l, N_IN]
        n_out = layers[l, N_OUT]
        off = layers[l, W_OFF]
        w = params[off : off + n_in * n_out].reshape((n_in, n_out))
        b = params[off + n_in * n_out : off + n_in * n_out + n_out]
        a0 = batch * layers[l, A_OFF]
        out = acts[a0 : a0 + batch * n_out].reshape((batch, n_out))
        src = layers[l, SRC]
        if src < 0:
            product(x, w, out, False, False, 0.0)
        else:
            s0 = batch * layers[src, A_OFF]
            h = acts[s0 : s0 + batch * n_in].reshape((batch, n_in))
            product(h, w, out, False, False, 0.0)
        act = layers[l, ACT]
        if act == ACT_TANH:
            bias_tanh(out, b)
            continue
        for i in range(batch):
            row = out[i]
            if act == ACT_RELU:
                for k in range(n_out):
                    v = row[k] + b[k]
                    row[k] = v if v > zero else zero
            else:
                for k in range(n_out):
                    row[k] += b[k]


@kernel
def backward_into(
    params: np.ndarray, layers: np.ndarray, x: np.ndarray, acts: np.ndarray, dacts: np.ndarray,
    grads: np.ndarray,
) -> None:  # fmt: skip
    """Backward pass of :func:`forward_into`: every parameter's gradient into ``grads``.

    Parameters
    ----------
    params, layers, x, acts
        As :func:`forward_into` used and wrote them (same B = x.shape[0]).
    dacts : ndarray of params' dtype, shape (>= B * acts_width(layers),)
        On entry, the loss's gradient by each layer's output in the head layers'
        blocks; the hidden blocks are written, not read (their first reader, in the
        backward order, overwrites its block; a shared trunk's last block then adds
        the other head's). Each hidden block ends as the gradient by its
        pre-activation.
    grads : ndarray of params' dtype, shape (num_params,)
        Written (every entry).
    """
    batch = x.shape[0]
    zero = params.dtype.type(0.0)
    one = params.dtype.type(1.0)
    for l in range(layers.shape[0] - 1, -1, -1):  # a layer's readers come after it
        n_in = layers[l, N_IN]
        n_out = layers[l, N_OUT]
        off = layers[l, W_OFF]
        a0 = batch * layers[l, A_OFF]
        out = acts[a0 : a0 + batch * n_out].reshape((batch, n_out))
        d = dacts[a0 : a0 + batch * n_out].reshape((batch, n_out))
        act = layers[l, ACT]
        gb = grads[off + n_in * n_out : off + n_in * n_out + n_out]
        for k in range(n_out):
            gb[k] = zero
        for i in range(batch):
            if act == ACT_TANH:
                for k in range(n_out):
                    y = out[i, k]
                    d[i, k] *= one - y * y
            elif act == ACT_RELU:
                for k in range(n_out):
                    if not out[i, k] > zero:
                        d[i, k] = zero
            for k in range(n_out):
                gb[k] += d[i, k]
        gw = grads[off : off + n_in * n_out].reshape((n_in, n_out))
        src = layers[l, SRC]
        if src < 0:
            product(x, d, gw, True, False, 0.0)
        else:
            s0 = batch * layers[src, A_OFF]
            h = acts[s0 : s0 + batch * n_in].reshape((batch, n_in))
            product(h, d, gw, True, False, 0.0)
            w = params[off : off + n_in * n_out].reshape((n_in, n_out))
            ds = dacts[s0 : s0 + batch * n_in].reshape((batch, n_in))
            # the block's first reader overwrites it, a later one adds (no zeroing pass)
            first = True
            for later in range(l + 1, layers.shape[0]):
                if layers[later, SRC] == src:
                    first = False
            product(d, w, ds, False, True, 0.0 if first else 1.0)


@kernel
def log_softmax_rows(
    logits: np.ndarray, masks: np.ndarray, logp: np.ndarray, probs: np.ndarray,
    entropy: np.ndarray,
) -> None:  # fmt: skip
    """logp = log_softmax(logits) and probs = softmax(logits) of every row over its
    legal actions, and each row's entropy -sum p log p.

    Parameters
    ----------
    logits : float (B, A)
    masks : bool (B, A), each row's legal actions (at least one), or (B, 0): every
        action legal
    logp : logits' dtype (B, A); probs : float64 (B, A); entropy : float64 (B,)
        Written: an illegal action's logp is -inf and its probability 0 (it adds
        nothing to the entropy: sb3-contrib's ``MaskableCategorical``).

    Notes
    -----
    The exponentials and their sum are float64, after subtracting the largest legal
    logit; each is computed once (probs = e / sum, not exp(logp)), and the largest's
    is 1 without a call.

    Three passes over the rows: the exponentials, the logarithms of their sums, the
    rest. A row's libm calls depend on each other (exp, then log of the sum); in one
    pass, the next row's waited for them. On 256 rows of two logits, the loss's rows
    took 10.7 us, against 16.2 us in one pass and 20.2 us with the largest logit's
    exponential called too (the same bits in all three).
    """
    batch, n = logits.shape
    masked = masks.shape[1] > 0
    lse = np.empty(batch)  # each row's largest legal logit, then its log-sum-exp
    total = np.empty(batch)
    for i in range(batch):
        row = logits[i]
        mask = masks[i]
        p = probs[i]
        m = -np.inf  # float64 (typed float32, the differences below lost their bits)
        top = 0
        for k in range(n):
            if row[k] > m and (not masked or mask[k]):
                m = row[k]
                top = k
        # every exponential but top's, exp(0.0) = 1 exactly; summed in the actions'
        # order (a loop over the sum alone is vectorised, in another order)
        s = 0.0
        for k in range(top):
            e = math.exp(row[k] - m) if not masked or mask[k] else 0.0
            p[k] = e
            s += e
        e = 1.0 if math.isfinite(m) else math.nan  # non-finite logits give NaN, as exp
        p[top] = e
        s += e
        for k in range(top + 1, n):
            e = math.exp(row[k] - m) if not masked or mask[k] else 0.0
            p[k] = e
            s += e
        lse[i] = m
        total[i] = s
    for i in range(batch):
        lse[i] += math.log(total[i])
    for i in range(batch):
        row = logits[i]
        mask = masks[i]
        p = probs[i]
        lp_row = logp[i]
        inv_s = 1.0 / total[i]
        ent = 0.0
        for k in range(n):
            if masked and not mask[k]:
                lp_row[k] = -np.inf
                continue
            lp = row[k] - lse[i]
            pk = p[k] * inv_s
            lp_row[k] = lp
            p[k] = pk
            ent -= pk * lp
        entropy[i] = ent


@kernel
def forward_heads(
    params: np.ndarray, layers: np.ndarray, x: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The forward pass of a batch, cut into its two heads.

    params : float (num_params,); layers : int64 (L, 7); x : params' dtype
    (B, obs_dim), rows contiguous. Returns ``(logits, values)``: params' dtype
    (B, n_actions) and (B,), views of one new activations array.
    """
    batch = x.shape[0]
    acts = np.empty(batch * acts_width(layers), dtype=params.dtype)
    forward_into(params, layers, x, acts)
    lg, vl = head_layers(layers)
    n_act = layers[lg, N_OUT]
    l0 = batch * layers[lg, A_OFF]
    v0 = batch * layers[vl, A_OFF]
    return acts[l0 : l0 + batch * n_act].reshape((batch, n_act)), acts[v0 : v0 + batch]


@kernel
def act_batch(
    params: np.ndarray, layers: np.ndarray, x: np.ndarray, masks: np.ndarray, sample: bool,
    state: np.ndarray, actions: np.ndarray, logp: np.ndarray, values: np.ndarray,
) -> None:  # fmt: skip
    """Actions for a batch of observations, their log-probabilities and the values.

    Parameters
    ----------
    params : float (num_params,); layers : int64 (L, 7)
    x : params' dtype, shape (B, obs_dim), rows contiguous
    masks : bool, shape (B, n_actions), each row's legal actions (at least one), or
        (B, 0): every action legal
    sample : bool
        True: draw each action from softmax(logits) over the legal actions by inverse
        CDF with one :func:`~ember_np.rng.next_double` per row from ``state``; False:
        the first argmax of the legal logits (the deterministic policy), no draw.
    state : uint64 (4,), a PCG64 state, advanced when sampling
    actions : int64 (B,); logp, values : params' dtype (B,); written.
    """
    logits, vals = forward_heads(params, layers, x)
    batch, n_act = logits.shape
    all_logp = np.empty((batch, n_act), dtype=params.dtype)
    all_p = np.empty((batch, n_act))
    log_softmax_rows(logits, masks, all_logp, all_p, np.empty(batch))
    for i in range(batch):
        row_logp = all_logp[i]
        row_p = all_p[i]
        a = 0
        if sample:
            u = next_double(state)
            cum = 0.0
            a = -1
            for k in range(n_act):
                cum += row_p[k]
                if u < cum:
                    a = k
                    break
            if a < 0:  # rounding left u above the last cumulative sum: the last possible one
                a = n_act - 1
                while a > 0 and row_logp[a] == -np.inf:
                    a -= 1
        else:
            while row_logp[a] == -np.inf:  # the first legal action
                a += 1
            for k in range(a + 1, n_act):
                if logits[i, k] > logits[i, a] and row_logp[k] != -np.inf:
                    a = k
        actions[i] = a
        logp[i] = row_logp[a]
        values[i] = vals[i]


@kernel
def evaluate_batch(
    params: np.ndarray, layers: np.ndarray, x: np.ndarray, masks: np.ndarray,
    actions: np.ndarray, logp: np.ndarray, entropy: np.ndarray, values: np.ndarray,
) -> None:  # fmt: skip
    """Log-probabilities of given actions, the policy's entropies and the values.

    params : float (num_params,); layers : int64 (L, 7); x : params' dtype (B, obs_dim),
    rows contiguous; masks : bool (B, n_actions) or (B, 0), as :func:`act_batch`;
    actions : int64 (B,), each in [0, n_actions); logp, entropy, values : params'
    dtype (B,), written (an illegal action's logp is -inf).
    """
    logits, vals = forward_heads(params, layers, x)
    batch, n_act = logits.shape
    all_logp = np.empty((batch, n_act), dtype=params.dtype)
    ent = np.empty(batch)
    log_softmax_rows(logits, masks, all_logp, np.empty((batch, n_act)), ent)
    for i in range(batch):
        entropy[i] = ent[i]
        logp[i] = all_logp[i, actions[i]]
        values[i] = vals[i]


class ActorCritic:
    """PPO's actor and critic in one flat parameter vector, with its Adam state.

    Parameters
    ----------
    obs_dim : int >= 1
        Length of an (encoded) observation.
    n_actions : int >= 2
        Discrete actions.
    config : PPOConfig
        Reads ``hidden_sizes``, ``activation`` and ``shared_trunk``.
    rng : Rng
        Draws the orthogonal initialisation, layer by layer in table order
        (weights only: biases start at 0).
    dtype : float32 (default) or float64 (the gradient tests)

    Attributes
    ----------
    params, grads, adam_m, adam_v : ndarray of dtype, shape (num_params,)
    adam_t : ndarray of int64, shape (1,)
    layers : ndarray of int64, shape (L, 7)
        The layer table (module docstring).
    """

    def __init__(
        self,
        obs_dim: int,
        n_actions: int,
        config: PPOConfig,
        rng: Rng,
        dtype: type[np.floating] = np.float32,
    ) -> None:
        if int(obs_dim) < 1 or int(n_actions) < 2:
            raise ValueError(
                "an actor-critic needs obs_dim >= 1 and n_actions >= 2, got obs_dim "
                f"{obs_dim} and n_actions {n_actions}"
            )
        self.obs_dim = int(obs_dim)
        self.n_actions = int(n_actions)
        self.layers, n = build_layers(
            self.obs_dim, self.n_actions, config.hidden_sizes, config.activation,
            config.shared_trunk,
        )  # fmt: skip
        self.params = np.zeros(n, dtype=dtype)
        self.grads = np.zeros(n, dtype=dtype)
        self.adam_m = np.zeros(n, dtype=dtype)
        self.adam_v = np.zeros(n, dtype=dtype)
        self.adam_t = np.zeros(1, dtype=np.int64)
        self.logits_layer, self.value_layer = (int(i) for i in head_layers(self.layers))
        for l in range(len(self.layers)):
            role = self.layers[l, ROLE]
            gain = GAIN_HIDDEN if role == ROLE_HIDDEN else (
                GAIN_POLICY if role == ROLE_LOGITS else GAIN_VALUE
            )  # fmt: skip
            w, _ = self.layer(l)
            w[...] = orthogonal(w.shape[1], w.shape[0], gain, rng)

    @property
    def num_params(self) -> int:
        """Length of the parameter vector."""
        return int(self.params.shape[0])

    @property
    def state(self) -> PPONet:
        """The arrays the update kernels take (views: updated in place)."""
        return PPONet(self.params, self.grads, self.adam_m, self.adam_v, self.adam_t, self.layers)

    def layer(self, l: int) -> tuple[np.ndarray, np.ndarray]:
        """Views ``(W (n_in, n_out), b (n_out,))`` of layer ``l`` into :attr:`params`."""
        n_in, n_out, off = (int(v) for v in self.layers[l, :3])
        w = self.params[off : off + n_in * n_out].reshape(n_in, n_out)
        return w, self.params[off + n_in * n_out : off + n_in * n_out + n_out]

    def _obs(self, obs: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(obs, dtype=self.params.dtype)
        if x.ndim != 2 or x.shape[1] != self.obs_dim or x.shape[0] < 1:
            raise ValueError(
                f"observations must be an array of shape (batch >= 1, {self.obs_dim}), "
                f"got shape {np.shape(obs)}"
            )
        return x

    def forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(logits (B, n_actions), values (B,))`` of a batch ``obs`` (B, obs_dim)."""
        logits, values = forward_heads(self.params, self.layers, self._obs(obs))
        return logits.copy(), values.copy()

    def masks(self, action_masks: np.ndarray | None, batch: int) -> np.ndarray:
        """``action_masks`` as the kernels take them: bool (batch, n_actions), each row
        with a legal action, or (batch, 0) for None (every action legal)."""
        if action_masks is None:
            return np.zeros((batch, 0), dtype=np.bool_)
        m = np.ascontiguousarray(action_masks)
        if m.dtype != np.bool_ or m.shape != (batch, self.n_actions) or not m.any(axis=1).all():
            raise ValueError(
                f"action_masks must be None or a bool array of shape ({batch}, "
                f"{self.n_actions}) with a legal (True) action in every row, got "
                f"{m.dtype} of shape {m.shape}"
            )
        return m

    def evaluate(
        self, obs: np.ndarray, actions: np.ndarray, action_masks: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(log pi(a|s), entropy, values)``, each (B,), for a batch of ``obs`` and
        ``actions`` (int, each in [0, n_actions)); ``action_masks`` as :meth:`masks`."""
        x = self._obs(obs)
        a = np.ascontiguousarray(actions, dtype=np.int64)
        if a.shape != (x.shape[0],) or np.min(a) < 0 or np.max(a) >= self.n_actions:
            raise ValueError(
                f"actions must be {x.shape[0]} integers in [0, {self.n_actions}), got "
                f"{np.asarray(actions)!r}"
            )
        out = [np.empty(x.shape[0], dtype=self.params.dtype) for _ in range(3)]
        m = self.masks(action_masks, x.shape[0])
        evaluate_batch(self.params, self.layers, x, m, a, out[0], out[1], out[2])
        return out[0], out[1], out[2]

    def act(
        self, obs: np.ndarray, rng: Rng, deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        """``(actions int64, log-probabilities, values)``, each (B,), for a batch ``obs``.

        Sampled from the policy with ``rng`` (one draw per row), or with
        ``deterministic`` the argmax of the logits (``rng`` untouched); with
        ``action_masks`` (:meth:`masks`) among each row's legal actions alone.
        """
        x = self._obs(obs)
        actions = np.empty(x.shape[0], dtype=np.int64)
        logp = np.empty(x.shape[0], dtype=self.params.dtype)
        values = np.empty(x.shape[0], dtype=self.params.dtype)
        m = self.masks(action_masks, x.shape[0])
        act_batch(
            self.params, self.layers, x, m, not deterministic, rng.state, actions, logp, values
        )
        return actions, logp, values
