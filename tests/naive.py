"""Plain-NumPy reference implementations, written for clarity, not speed.

The compiled kernels are tested against these (stumpy's ``tests/naive.py``).
The end of the file holds what the test files share: the small configs, the
agent they build and the ways they compare two agents' states.
"""

from __future__ import annotations

import json
import math
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from ember_np import Batch, DqnAgent, DqnConfig, IndexActionMapper, UpdateOptions, VecEncoder


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
    """C51's projection, slowly: each atom's return r + discount * z_j, clipped to
    [v_min, v_max], shares its probability among the atoms by the triangular
    kernel max(0, 1 - |Tz - z_k| / dz) (the two nearest atoms, by nearness)."""
    z = np.linspace(v_min, v_max, len(p))
    dz = z[1] - z[0]
    m = np.zeros(len(p))
    for j in range(len(p)):
        tz = min(max(reward + discount * z[j], v_min), v_max)
        for k in range(len(p)):
            m[k] += p[j] * max(0.0, 1.0 - abs(tz - z[k]) / dz)
    return m


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
        m = np.array([c51_project(p_next[i], rewards[i], discounts[i], head[2], head[3])
                      for i in rows])  # fmt: skip
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


def make_batch(sizes, batch=16, seed=0, dtype=np.float32, terminal_every=5):
    """A random DQN batch (obs, actions, rewards, next_obs, masks) for a network of ``sizes``."""
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((batch, sizes[0])).astype(dtype)
    next_obs = rng.standard_normal((batch, sizes[0])).astype(dtype)
    actions = rng.integers(0, sizes[-1], batch).astype(np.int64)
    rewards = (rng.standard_normal(batch) * 2).astype(dtype)
    masks = np.ones(batch, dtype=dtype)
    masks[::terminal_every] = 0.0
    return obs, actions, rewards, next_obs, masks


def torch_and_ours(torch, t_net, t_target, net, target, steps=5):
    """The same ``steps`` DQN updates (Huber, gamma 0.99, Adam lr 1e-3, clip 0.5) in torch
    and on ``net``, each on a fresh batch; returns the pairs (our loss, torch's loss)."""
    opt = torch.optim.Adam(t_net.parameters(), lr=1e-3)
    losses = []
    for step in range(steps):
        obs, actions, rewards, next_obs, masks = make_batch(net.layer_sizes, batch=64, seed=step)
        with torch.no_grad():
            q_next = t_target(torch.from_numpy(next_obs)).max(dim=1).values
            y = torch.from_numpy(rewards) + 0.99 * torch.from_numpy(masks) * q_next
        q = t_net(torch.from_numpy(obs)).gather(1, torch.from_numpy(actions)[:, None]).squeeze(1)
        t_loss = torch.nn.functional.smooth_l1_loss(q, y)
        opt.zero_grad()
        t_loss.backward()
        torch.nn.utils.clip_grad_norm_(t_net.parameters(), 0.5)
        opt.step()
        loss = net.update(Batch(obs, actions, rewards, next_obs, masks), target, UpdateOptions(gamma=0.99, learning_rate=1e-3, max_grad_norm=0.5))  # fmt: skip
        losses.append((loss, t_loss.item()))
    return losses


# ---------------------------------------------------------------- shared by the tests
# One definition of each small config the tests train or save. The variants are
# named for what differs from SMALL; a test depends on the values it was written
# with (buffer sizes that fill, epsilon at a given step), so they are not merged.

SMALL = DqnConfig(
    hidden_sizes=(16,), learning_rate=1e-3, batch_size=16, buffer_capacity=500,
    min_replay_size=32, target_update_freq=20, epsilon_decay_steps=300,
)  # fmt: skip
SMALL_BUFFER_1K = SMALL.replace(buffer_capacity=1_000)
SMALL_SLOW_TARGET = SMALL.replace(buffer_capacity=1_000, target_update_freq=50,
                                  epsilon_decay_steps=200)  # fmt: skip
# SMALL's sizes with DqnConfig's default rates and schedules.
SMALL_DEFAULT_RATES = DqnConfig(hidden_sizes=(16,), batch_size=16, buffer_capacity=500,
                                min_replay_size=32)  # fmt: skip
TWO_LAYER = DqnConfig(
    hidden_sizes=(16, 16), learning_rate=1e-3, batch_size=8, buffer_capacity=200,
    min_replay_size=20, target_update_freq=10, epsilon_decay_steps=100,
)  # fmt: skip
MASKED = DqnConfig(
    hidden_sizes=(16,), learning_rate=1e-3, batch_size=8, buffer_capacity=64,
    min_replay_size=16, target_update_freq=10, epsilon_decay_steps=50, action_masks=True,
)  # fmt: skip
TINY = DqnConfig(
    hidden_sizes=(8,), learning_rate=1e-2, batch_size=4, buffer_capacity=40, min_replay_size=8,
    target_update_freq=5, epsilon_decay_steps=50,
)  # fmt: skip
TINY_MIN4 = TINY.replace(min_replay_size=4)

# The command line's small network: `ember-np train ENV *SMALL_ARGS`. The schedule lengths
# are fixed at the ember preset's step counts, not fractions of --steps, so a run of N steps
# and one of N/2 resumed for N/2 more train alike (a resumed run keeps its schedule).
FIXED_SCHEDULE = ["epsilon_decay_steps=10000", "learning_rate_decay_steps=100000",
                  "per_beta_steps=100000"]  # fmt: skip
SMALL_ARGS = ["--preset", "ember", "--set", "min_replay_size=200", "hidden_sizes=[32]",
              *FIXED_SCHEDULE, "--quiet"]  # fmt: skip
SMALL_ARGS_16 = ["--preset", "ember", "--set", "min_replay_size=64", "hidden_sizes=[16]",
                 *FIXED_SCHEDULE, "--quiet"]  # fmt: skip


def make_agent(
    config: DqnConfig = SMALL, seed: int = 0, obs_size: int = 3, n_actions: int = 2, **kw: Any
) -> DqnAgent:
    """A DqnAgent on plain vectors: ``VecEncoder(obs_size)``, ``IndexActionMapper(n_actions)``."""
    return DqnAgent(VecEncoder(obs_size), IndexActionMapper(n_actions), config, seed, **kw)


def agent_state(agent) -> list[bytes]:
    """What must match, as bytes, for two agents to continue identically: both
    networks, Adam's moments, the counters, both random streams, the buffer."""
    online = agent.online.state_dict()
    counters = np.array([agent.total_steps, agent.n_updates], dtype=np.int64)
    return [agent.online.params.tobytes(), agent.target.params.tobytes(),
            online["adam_m"].tobytes(), online["adam_v"].tobytes(),
            counters.tobytes(), agent.exploration_rng.state.tobytes(),
            agent.replay_rng.state.tobytes(), agent.buffer.storage.tobytes()]  # fmt: skip


def agent_state_with_cursor(agent) -> list[bytes]:
    """:func:`agent_state` and the buffer's write cursor (with its stack of free rows)."""
    return agent_state(agent) + [agent.buffer.kernel_state.cursor.tobytes()]


def weights_rngs_and_counts(agent, include_buffer: bool = True) -> list:
    """Both networks, both random streams, (the buffer's storage,) the update and step counts."""
    buffer = [agent.buffer.storage.tobytes()] if include_buffer else []
    return [agent.online.params.tobytes(), agent.target.params.tobytes(),
            agent.replay_rng.state.tobytes(), agent.exploration_rng.state.tobytes(),
            *buffer, agent.n_updates, agent.total_steps]  # fmt: skip


def saved_state(agent: DqnAgent) -> dict[str, bytes]:
    """Everything that defines an agent, as bytes (what ``save`` writes, buffer included)."""
    return {k: v.tobytes() for k, v in agent.state_arrays(include_buffer=True).items()}


#: metadata.json fields that are times of day (run_id is the start time, YYYYMMDD_HHMMSS)
WALL_CLOCK = ("run_id", "started_at", "last_updated")


def files_of(run_dir: Path) -> dict[str, bytes]:
    """Every file under ``run_dir`` by relative path (metadata.json without its times)."""
    out = {}
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file() and p.name != ".lock"):
        data = path.read_bytes()
        if path.name == "metadata.json":
            meta = json.loads(data)
            for key in WALL_CLOCK:
                assert key in meta  # the exclusion names fields that exist
                meta.pop(key)
            data = json.dumps(meta, sort_keys=True).encode()
        out[path.relative_to(run_dir).as_posix()] = data
    return out


def torch_layers(torch, q):  # noqa: ANN001, ANN201
    """``q``'s layers as torch modules holding copies of its values: (trunk, norms, heads),
    each a ModuleList; trunk and norms have one entry per hidden layer (LayerNorm, eps
    1e-5, or Identity without), heads the output layer(s) (dueling: advantages, value)."""
    lins = []
    for w, b in zip(q.weights, q.biases):
        lin = torch.nn.Linear(w.shape[0], w.shape[1])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w.T.copy()))
            lin.bias.copy_(torch.from_numpy(b.copy()))
        lins.append(lin)
    n_hidden = len(q.layer_sizes) - 2
    norms = [torch.nn.Identity() for _ in range(n_hidden)]
    for i, (g, b) in enumerate(zip(q.norm_gains, q.norm_biases)):
        norms[i] = torch.nn.LayerNorm(g.size)
        with torch.no_grad():
            norms[i].weight.copy_(torch.from_numpy(g.copy()))
            norms[i].bias.copy_(torch.from_numpy(b.copy()))
    lists = torch.nn.ModuleList
    return lists(lins[:n_hidden]), lists(norms), lists(lins[n_hidden:])


def check_exact_resume(agent: DqnAgent, path: Path, steps: int, state=agent_state) -> DqnAgent:
    """Save ``agent`` with its buffer to ``path`` and load it back; assert that both hold the
    same ``state`` (a function of an agent), train each ``steps`` more env steps on
    ``ember_np/CartPole-v1`` started from one seed, and assert it again. Returns the
    restored agent."""
    import gymnasium as gym

    from ember_np import DqnTrainer

    restored = DqnAgent.from_checkpoint(agent.save(path, include_buffer=True))
    assert state(agent) == state(restored)
    for a in (agent, restored):
        DqnTrainer(gym.make("ember_np/CartPole-v1"), a, seed=3).train(steps)
    assert state(agent) == state(restored)
    return restored


def still_running(proc: subprocess.Popen, deadline: float, waiting_for: str) -> None:
    """Fails the test with ``proc``'s output once it has exited or ``deadline`` (a
    ``time.time()``) has passed while the test was ``waiting_for`` something. A process
    still running then is killed first: reading the output of a live process would wait
    for as long as it runs, and a stuck one for ever."""
    alive = proc.poll() is None
    if alive and time.time() < deadline:
        return
    how = "still running" if alive else f"exited with {proc.returncode}"
    if alive:
        proc.kill()
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # a child of its holds the pipes open
        out = err = "(unread: a child of the process holds its pipes open)"
    raise AssertionError(f"waiting for {waiting_for}, the process was {how}:\n{out}\n{err}")


def read_line(proc: subprocess.Popen, timeout: float = 120.0) -> str:
    """The next line ``proc`` writes to its stdout pipe, waited for at most ``timeout``
    seconds: then ``proc`` is killed and the test fails, instead of waiting for ever
    on a child that is stuck."""
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        proc.kill()
        raise AssertionError(f"no line from {proc.args} within {timeout} s; killed it")
    return line[0]


def interruptible() -> None:
    """A ``preexec_fn`` giving a child process the default SIGINT action, so Python
    turns Ctrl-C into KeyboardInterrupt there: a test suite started in the background
    of a shell without job control (``pytest &``) inherits SIGINT ignored, and a
    child started with SIGINT ignored keeps ignoring it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


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


def train_both_loops(fused, python, rounds: int = 3, steps: int = 500) -> list[float]:
    """Train a fused trainer and its Python-loop twin ``rounds`` times ``steps`` steps
    each (asserting which is which); returns the fused agent's loss after each round."""
    assert fused.fused and not python.fused
    losses = []
    for _ in range(rounds):
        fused.train(steps)
        python.train(steps)
        losses.append(fused.agent.last_loss)
    return losses
