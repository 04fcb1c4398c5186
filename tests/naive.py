"""Plain-NumPy reference implementations, written for clarity, not speed.

The compiled kernels are tested against these (stumpy's ``tests/naive.py``).
References only: what the test files share besides (configs, the agents and
trainers they build, process helpers, ways to compare two agents' states) is in
``tests/helpers.py``.
"""

from __future__ import annotations

import math

import numpy as np


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0)


def forward(weights: list[np.ndarray], biases: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    """MLP forward: ReLU between layers, linear output."""
    h = x
    for i, (w, b) in enumerate(zip(weights, biases)):
        h = h @ w + b
        if i < len(weights) - 1:
            h = relu(h)
    return h


def huber(d: np.ndarray, delta: float) -> np.ndarray:
    a = np.abs(d)
    return np.where(a <= delta, 0.5 * d * d, delta * (a - 0.5 * delta))


def td_targets(
    weights, biases, t_weights, t_biases, rewards, next_obs, masks, gamma, double_dqn,
    discounts=None,
) -> np.ndarray:  # fmt: skip
    """y = r + discount * Q_target(s', a*); discount = gamma * mask unless given."""
    q_next_target = forward(t_weights, t_biases, next_obs)
    if double_dqn:
        best = np.argmax(forward(weights, biases, next_obs), axis=1)
    else:
        best = np.argmax(q_next_target, axis=1)
    if discounts is None:
        discounts = gamma * masks
    return rewards + discounts * q_next_target[np.arange(len(best)), best]


def dqn_loss(
    weights, biases, t_weights, t_biases, obs, actions, rewards, next_obs, masks,
    gamma, huber_delta=1.0, double_dqn=False, discounts=None, sample_weights=None,
) -> float:  # fmt: skip
    """Mean (weighted) Huber TD loss, the function the manual backprop differentiates."""
    y = td_targets(
        weights, biases, t_weights, t_biases, rewards, next_obs, masks, gamma, double_dqn,
        discounts,
    )  # fmt: skip
    q = forward(weights, biases, obs)
    d = q[np.arange(len(actions)), actions] - y
    w = np.ones(len(d)) if sample_weights is None else sample_weights
    return float(np.mean(w * huber(d, huber_delta)))


def dqn_loss_and_grads(
    weights, biases, t_weights, t_biases, obs, actions, rewards, next_obs, masks,
    gamma, huber_delta=1.0, double_dqn=False, discounts=None, sample_weights=None,
):  # fmt: skip
    """Loss, flat gradient (W0, b0, W1, b1, ...) and |TD errors|, by plain backprop.

    Written independently of the kernels: keep every layer's activation, then
    delta = dLoss/dQ (nonzero only at the taken actions), and for each layer
    from the top: dW = h^T delta, db = sum(delta), delta <- (delta W^T) * relu'(h).
    """
    y = td_targets(
        weights, biases, t_weights, t_biases, rewards, next_obs, masks, gamma, double_dqn,
        discounts,
    )  # fmt: skip
    hs = [obs]
    for i, (w, b) in enumerate(zip(weights, biases)):
        z = hs[-1] @ w + b
        hs.append(relu(z) if i < len(weights) - 1 else z)
    q = hs[-1]
    rows = np.arange(len(actions))
    d = q[rows, actions] - y
    sw = np.ones(len(d)) if sample_weights is None else sample_weights
    loss = float(np.mean(sw * huber(d, huber_delta)))
    dq = np.zeros_like(q)
    dq[rows, actions] = sw * np.clip(d, -huber_delta, huber_delta) / len(d)
    delta = dq
    parts = []
    for i in range(len(weights) - 1, -1, -1):
        parts = [(hs[i].T @ delta).ravel(), delta.sum(axis=0)] + parts
        if i > 0:
            delta = (delta @ weights[i].T) * (hs[i] > 0)
    return loss, np.concatenate(parts), np.abs(d)


def unflatten(flat: np.ndarray, sizes) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Split a flat parameter vector (W0, b0, W1, b1, ...) into layer arrays."""
    ws, bs, off = [], [], 0
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        ws.append(flat[off : off + n_in * n_out].reshape(n_in, n_out))
        off += n_in * n_out
        bs.append(flat[off : off + n_out])
        off += n_out
    return ws, bs


def finite_difference_grad(fn, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of scalar ``fn`` at float64 vector ``x``."""
    g = np.zeros_like(x)
    for i in range(x.size):
        old = x[i]
        x[i] = old + eps
        up = fn(x)
        x[i] = old - eps
        down = fn(x)
        x[i] = old
        g[i] = (up - down) / (2 * eps)
    return g


def clip_grad_norm(g: np.ndarray, max_norm: float) -> np.ndarray:
    """torch.nn.utils.clip_grad_norm_ on one flat gradient."""
    norm = np.sqrt(np.sum(g.astype(np.float64) ** 2))
    coef = max_norm / (norm + 1e-6)
    return g * min(coef, 1.0)


class Adam:
    """torch.optim.Adam (no weight decay, no amsgrad), one flat parameter vector."""

    def __init__(self, n: int, lr: float, betas=(0.9, 0.999), eps: float = 1e-8):
        self.lr, self.b1, self.b2, self.eps = lr, betas[0], betas[1], eps
        self.m = np.zeros(n)
        self.v = np.zeros(n)
        self.t = 0

    def step(self, params: np.ndarray, grad: np.ndarray) -> np.ndarray:
        self.t += 1
        self.m = self.b1 * self.m + (1 - self.b1) * grad
        self.v = self.b2 * self.v + (1 - self.b2) * grad * grad
        m_hat = self.m / (1 - self.b1**self.t)
        v_hat = self.v / (1 - self.b2**self.t)
        return params - self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


class ReplayModel:
    """A list-based model of the circular buffer's contents."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.items: list[tuple] = []
        self.pos = 0

    def push(self, item: tuple) -> None:
        if len(self.items) < self.capacity:
            self.items.append(item)
        else:
            self.items[self.pos] = item
        self.pos = (self.pos + 1) % self.capacity


def _upper_regularized_gamma(a: float, x: float) -> float:
    """Q(a, x) = Gamma(a, x) / Gamma(a) (Numerical Recipes' gammq)."""
    import math

    if x <= 0.0:
        return 1.0
    if x < a + 1.0:  # series for P(a, x), then Q = 1 - P
        term = total = 1.0 / a
        n = a
        while abs(term) > abs(total) * 1e-15:
            n += 1.0
            term *= x / n
            total += term
        return 1.0 - total * math.exp(-x + a * math.log(x) - math.lgamma(a))
    # continued fraction for Q(a, x) (modified Lentz)
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    i = 1
    while True:
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        i += 1
        if abs(delta - 1.0) < 1e-15:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def chi_square_pvalue(counts) -> float:
    """p-value of Pearson's chi-square test that ``counts`` are uniform."""
    counts = np.asarray(counts, dtype=np.float64)
    expected = counts.sum() / counts.size
    statistic = float(((counts - expected) ** 2 / expected).sum())
    return _upper_regularized_gamma((counts.size - 1) / 2.0, statistic / 2.0)


def dueling_forward(weights, biases, x: np.ndarray) -> np.ndarray:
    """Dueling MLP (Wang et al. 2016): the last two layers are the advantage
    head A and the value head V, both fed by the last hidden layer;
    Q = V + A - mean_a(A)."""
    h = x
    for w, b in zip(weights[:-2], biases[:-2]):
        h = relu(h @ w + b)
    a = h @ weights[-2] + biases[-2]
    v = h @ weights[-1] + biases[-1]
    return v + a - a.mean(axis=-1, keepdims=True)


def dueling_unflatten(flat: np.ndarray, sizes) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """:func:`unflatten` of a dueling network: the plain layout, then V's (W, b)."""
    ws, bs = unflatten(flat, sizes)
    off = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    n_hid = sizes[-2]
    ws.append(flat[off : off + n_hid].reshape(n_hid, 1))
    bs.append(flat[off + n_hid : off + n_hid + 1])
    return ws, bs


def norm_unflatten(flat, off, sizes, layer_norm):
    """(gains, betas) of a flat network whose layers' weights and biases end at ``off``:
    each hidden layer's LayerNorm gain and bias with ``layer_norm`` (else none), which
    must end the vector."""
    gains, betas = [], []
    for width in sizes[1:-1] if layer_norm else ():
        gains.append(flat[off : off + width])
        betas.append(flat[off + width : off + 2 * width])
        off += 2 * width
    assert off == flat.size
    return gains, betas


def network_unflatten(flat, sizes, dueling, layer_norm):
    """(weights, biases, gains, betas) of a flat network: the plain or dueling
    layout, then with ``layer_norm`` each hidden layer's gain and bias (else none)."""
    ws, bs = dueling_unflatten(flat, sizes) if dueling else unflatten(flat, sizes)
    off = sum(w.size + b.size for w, b in zip(ws, bs))
    return (ws, bs, *norm_unflatten(flat, off, sizes, layer_norm))


def trunk_forward(ws, bs, gains, betas, sizes, layer_norm, x):
    """The hidden layers' output, float64: Linear (-> LayerNorm, eps 1e-5) -> ReLU for
    each of the len(sizes) - 2 hidden layers of unflattened ``ws``, ``bs``, ``gains``,
    ``betas``; the plain and the distributional references share it."""
    h = np.asarray(x, np.float64)
    for i in range(len(sizes) - 2):
        z = h @ ws[i] + bs[i]
        if layer_norm:
            mu = z.mean(axis=-1, keepdims=True)
            var = ((z - mu) ** 2).mean(axis=-1, keepdims=True)
            z = gains[i] * (z - mu) / np.sqrt(var + 1e-5) + betas[i]
        h = relu(z)
    return h


def network_forward(flat, sizes, dueling, layer_norm, x):
    """Q(x) in float64: h <- ReLU(LayerNorm(h W + b)) per hidden layer (without
    ``layer_norm``, ReLU(h W + b)), then the plain or dueling head."""
    ws, bs, gains, betas = network_unflatten(np.asarray(flat, np.float64), sizes, dueling,
                                             layer_norm)  # fmt: skip
    h = trunk_forward(ws, bs, gains, betas, sizes, layer_norm, x)
    if dueling:
        a = h @ ws[-2] + bs[-2]
        return h @ ws[-1] + bs[-1] + a - a.mean(axis=-1, keepdims=True)
    return h @ ws[-1] + bs[-1]


def network_dqn_loss(flat, t_flat, sizes, dueling, layer_norm, batch, gamma, delta, double):
    """Mean Huber TD loss of :func:`network_forward`'s network (flat params), for
    finite differences."""
    obs, actions, rewards, next_obs, masks = batch
    q_next_t = network_forward(t_flat, sizes, dueling, layer_norm, next_obs)
    src = network_forward(flat, sizes, dueling, layer_norm, next_obs) if double else q_next_t
    rows = np.arange(len(actions))
    y = rewards + gamma * masks * q_next_t[rows, np.argmax(src, axis=1)]
    d = network_forward(flat, sizes, dueling, layer_norm, obs)[rows, actions] - y
    return float(np.mean(huber(d, delta)))


# ---------------------------------------------------------------- distributional heads
# C51 (Bellemare et al. 2017) and QR-DQN (Dabney et al. 2018), written from the
# papers: ``head`` is (kind, n_atoms, v_min, v_max), kind "c51" or "qr".


def dist_unflatten(flat, sizes, dueling, layer_norm, atoms):
    """(weights, biases, gains, betas) of a distributional network: the output
    layer has n_actions * atoms units (action-major), a dueling value head
    (hidden, atoms), then LayerNorm's gains and biases."""
    widths = (*sizes[:-1], sizes[-1] * atoms)
    ws, bs = unflatten(flat, widths)
    off = sum(w.size + b.size for w, b in zip(ws, bs))
    if dueling:
        n_hid = sizes[-2]
        ws.append(flat[off : off + n_hid * atoms].reshape(n_hid, atoms))
        bs.append(flat[off + n_hid * atoms : off + (n_hid + 1) * atoms])
        off += (n_hid + 1) * atoms
    return (ws, bs, *norm_unflatten(flat, off, sizes, layer_norm))


def dist_outputs(flat, sizes, dueling, layer_norm, atoms, x):
    """The network's outputs, float64 (batch, n_actions, atoms): logits (C51) or
    quantiles (QR); dueling per atom, x[a, k] = V[k] + A[a, k] - mean_a A[a, k]."""
    ws, bs, gains, betas = dist_unflatten(np.asarray(flat, np.float64), sizes, dueling,
                                          layer_norm, atoms)  # fmt: skip
    h = trunk_forward(ws, bs, gains, betas, sizes, layer_norm, x)
    n_out = 2 if dueling else 1
    a = (h @ ws[-n_out] + bs[-n_out]).reshape(len(h), sizes[-1], atoms)
    if not dueling:
        return a
    v = h @ ws[-1] + bs[-1]
    return v[:, None, :] + a - a.mean(axis=1, keepdims=True)


def log_softmax(x):
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def dist_expected(head, out):
    """Q-values (..., n_actions) of outputs (..., n_actions, atoms): C51's
    sum_k p_k z_k, QR's mean of the quantiles."""
    kind, atoms, v_min, v_max = head
    if kind == "qr":
        return out.mean(axis=-1)
    return np.exp(log_softmax(out)) @ np.linspace(v_min, v_max, atoms)


def c51_project(p, reward, discount, v_min, v_max):
    """C51's projection, atom by atom: each atom's return r + discount * z_j, clipped to
    [v_min, v_max], shares its probability among the atoms by the triangular kernel
    max(0, 1 - |Tz - z_k| / dz) (the two nearest atoms, by nearness). ``p`` (..., atoms)
    with ``reward`` and ``discount`` of shape (...) (scalars for one distribution):
    every pair (j, k) as one array (..., j, k), not a kernel's two-atom scatter."""
    p = np.asarray(p, np.float64)
    z = np.linspace(v_min, v_max, p.shape[-1])
    dz = z[1] - z[0]
    reward, discount = np.asarray(reward)[..., None], np.asarray(discount)[..., None]
    tz = np.clip(reward + discount * z, v_min, v_max)  # (..., j)
    share = np.maximum(0.0, 1.0 - np.abs(tz[..., :, None] - z) / dz)  # (..., j, k)
    return (p[..., :, None] * share).sum(axis=-2)


def dist_loss(flat, t_flat, sizes, dueling, layer_norm, head, batch, discounts, double,
              weights=None, legal=None, kappa=1.0):  # fmt: skip
    """(loss, priorities) of a distributional head: the bootstrap action by the
    expected value (online net's for double DQN) over ``legal`` (bool (B, A)) next
    actions; C51: cross-entropy to the projected target distribution (priority:
    the cross-entropy); QR: quantile Huber loss, sum over quantiles of the mean
    over target quantiles (priority: mean |u| over the pairs)."""
    kind, atoms = head[0], head[1]
    obs, actions, rewards, next_obs, _ = batch
    rows = np.arange(len(actions))
    out_t = dist_outputs(t_flat, sizes, dueling, layer_norm, atoms, next_obs)
    out_sel = dist_outputs(flat, sizes, dueling, layer_norm, atoms, next_obs) if double else out_t
    q_sel = dist_expected(head, out_sel)
    if legal is not None:
        q_sel = np.where(legal, q_sel, -np.inf)
    best = np.argmax(q_sel, axis=1)
    out = dist_outputs(flat, sizes, dueling, layer_norm, atoms, obs)[rows, actions]
    if kind == "c51":
        p_next = np.exp(log_softmax(out_t[rows, best]))
        m = c51_project(p_next, rewards, discounts, head[2], head[3])  # (B, atoms)
        per_sample = -(m * log_softmax(out)).sum(axis=1)
        priority = per_sample
    else:
        target = rewards[:, None] + discounts[:, None] * out_t[rows, best]
        u = target[:, None, :] - out[:, :, None]  # (B, j: online, j': target)
        tau = (2 * np.arange(atoms) + 1) / (2 * atoms)
        rho = np.abs(tau[None, :, None] - (u < 0)) * huber(u, kappa) / kappa
        per_sample = rho.mean(axis=2).sum(axis=1)
        priority = np.abs(u).mean(axis=(1, 2))
    w = np.ones(len(rows)) if weights is None else weights
    return float(np.mean(w * per_sample)), priority


# ---------------------------------------------------------------- n-step returns
CONTINUING, TERMINATED = 0, 1  # EpisodeStatus's values: the references take plain ints


def naive_n_step(pushes, capacity, n_step, gamma):
    """Expected (reward, next_obs, mask, discount, m) of each stored push, by push index.

    ``pushes``: (obs, action, reward, next_obs, status) in push order. Plain Python on
    the push history: the stored pushes are the last ``capacity``; push p continues
    into push p + 1 when p is CONTINUING, p + 1 is stored and its obs has the bits of
    p's next_obs (the buffer's stream rule). m = 1 + continuing links, at most n_step.
    """
    last = len(pushes) - 1
    first = max(0, len(pushes) - capacity)
    expected = {}
    for p in range(first, last + 1):
        reward, q, m = 0.0, p, 1
        while True:
            reward += gamma ** (m - 1) * pushes[q][2]
            if m == n_step or pushes[q][4] != CONTINUING or q == last:
                break
            if pushes[q + 1][0].tobytes() != pushes[q][3].tobytes():
                break
            q, m = q + 1, m + 1
        mask = 0.0 if pushes[q][4] == TERMINATED else 1.0
        expected[p] = (reward, pushes[q][3], mask, gamma**m * mask, m)
    return expected


def naive_n_step_returns(rewards: list[float], statuses: list[int], n: int,
                         gamma: float) -> list[float]:  # fmt: skip
    """Each transition's n-step return within one env's stream, all stored (the newest
    cut short): :func:`naive_n_step` on a stream whose steps follow one another."""
    obs = [np.array([t], np.float32) for t in range(len(rewards) + 1)]
    pushes = [(obs[t], 0, rewards[t], obs[t + 1], statuses[t]) for t in range(len(rewards))]
    expected = naive_n_step(pushes, len(pushes), n, gamma)
    return [expected[t][0] for t in range(len(rewards))]


# ---------------------------------------------------------------- noisy networks
# Fortunato et al. 2018, factorised Gaussian noise, written from the paper: each
# linear layer (in the flat layout's order: the trunk, the output layer, a dueling
# value head) is mu + sigma * eps, eps_W = outer(f(e_in), f(e_out)), eps_b = f(e_out).


def noisy_f(e: np.ndarray) -> np.ndarray:
    """The paper's f(x) = sgn(x) sqrt(|x|)."""
    return np.sign(e) * np.sqrt(np.abs(e))


def noisy_shapes(net) -> list[tuple[int, int]]:
    """(n_in, n_out) of every noisy layer of QNetwork ``net``: its linear layers."""
    return [w.shape for w in net.weights]


def noisy_perturb(full: np.ndarray, shapes, eps: np.ndarray) -> np.ndarray:
    """The perturbed plain parameter vector of a noisy network's ``full`` (means,
    then a sigma per linear-layer parameter): each layer's factors are its n_in
    then n_out consecutive values of ``eps`` (already f-transformed)."""
    n_lin = sum(n_in * n_out + n_out for n_in, n_out in shapes)
    n_base = full.size - n_lin
    out = full[:n_base].copy()
    p = e = 0
    for n_in, n_out in shapes:
        e_in, e_out = eps[e : e + n_in], eps[e + n_in : e + n_in + n_out]
        k = n_in * n_out
        out[p : p + k] += full[n_base + p : n_base + p + k] * np.outer(e_in, e_out).ravel()
        out[p + k : p + k + n_out] += full[n_base + p + k : n_base + p + k + n_out] * e_out
        p += k + n_out
        e += n_in + n_out
    return out


def noisy_sample(rng, n: int) -> np.ndarray:
    """f of ``n`` standard normals by Marsaglia's polar method on the raw 64-bit draws of
    ember_np's ``Rng`` (NumPy's PCG64 from the same state; each draw's high and low 32
    bits give u, v = bits / 2^31 - 1, kept when 0 < u^2 + v^2 < 1; an odd ``n`` drops
    the last v), float64. Advances ``rng`` by the draws taken."""
    st = [int(w) for w in rng.state]
    bitgen = np.random.PCG64()
    bitgen.state = {"bit_generator": "PCG64", "has_uint32": 0, "uinteger": 0,
                    "state": {"state": (st[0] << 64) | st[1], "inc": (st[2] << 64) | st[3]}}  # fmt: skip
    z = []
    while len(z) < n:
        x = int(bitgen.random_raw())
        u, v = (x >> 32) / 2**31 - 1.0, (x & 0xFFFFFFFF) / 2**31 - 1.0
        s = u * u + v * v
        if 0.0 < s < 1.0:
            m = math.sqrt(-2.0 * math.log(s) / s)  # libm's log, as the kernel's
            z += [u * m, v * m]
    new = bitgen.state["state"]
    mask = (1 << 64) - 1
    rng.state = np.array([new["state"] >> 64, new["state"] & mask, new["inc"] >> 64,
                          new["inc"] & mask], dtype=np.uint64)  # fmt: skip
    return noisy_f(np.array(z[:n]))
