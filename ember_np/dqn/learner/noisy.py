"""Noisy networks (Fortunato et al. 2018, "Noisy Networks for Exploration"):
factorised Gaussian noise on every linear layer (numba kernels, public to the package).

A noisy linear layer with n_in inputs and n_out outputs has mean weights mu
and noise scales sigma (each of the shape of W and of b), and computes

    y = x (mu_W + sigma_W * eps_W) + mu_b + sigma_b * eps_b,
    eps_W[k, j] = f(e_in[k]) f(e_out[j]),  eps_b[j] = f(e_out[j]),  f(e) = sgn(e) sqrt(|e|)

with e_in, e_out standard normal (n_in + n_out draws per layer: the factorised
noise of the paper's section 3). Every linear layer is noisy: the hidden ones,
the output layer (a distributional head's n_actions * n_atoms units too) and a
dueling network's value head; LayerNorm's gains and biases are not.

The flat parameter vector of a noisy network is the plain network's (the
means, ``mlp.py``'s layout, ``n_base`` values) followed by one sigma per
linear-layer parameter in the same order, so Adam, gradient clipping, the
target copy and checkpoints take the sigmas as any other parameter. The
perturbed weights mu + sigma * eps are a plain network's parameter vector
(:func:`perturb`): every forward and backward kernel runs on them unchanged,
and since they are linear in mu and sigma, d loss / d mu = g and
d loss / d sigma = g * eps for g the gradient w.r.t. the perturbed weights
(:func:`noise_grads`).

Noise is resampled as in the paper (and Rainbow): a new sample for the online
network at every update, shared by Q(s, .) and double DQN's argmax at s', an
independent one for the target network (:func:`resample_noise`, from the
state's ``rng``: an agent's replay stream), and a new one for every action the
agent explores with (:func:`acting_params`, from the exploration stream).
Greedy evaluation, ``DqnPolicy`` and ONNX export use the means alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numba.extending import overload

from ember_np._jit import kernel
from ember_np.dqn.learner.update_types import NetState, NoisyNetState, net_state
from ember_np.rng import fill_normals

__all__ = [
    "acting_params",
    "linear_size",
    "noise_grads",
    "noise_size",
    "noisy_layer_table",
    "noisy_net_state",
    "perturb",
    "resample_noise",
    "sample_noise",
]


def noisy_layer_table(layer_sizes: Sequence[int], atoms: int, dueling: bool) -> np.ndarray:
    """Every noisy layer of a network: int64 (n_noisy_layers, 4), rows of
    (offset of W in the means, n_in, n_out, offset of its factors in a noise row).

    layer_sizes : ``(obs_size, hidden..., n_actions)``; atoms : outputs per
    action (1, or a distributional head's n_atoms); dueling : whether the value
    head (n_hid -> atoms, after the plain layout) follows.
    """
    widths = [int(s) for s in layer_sizes]
    widths[-1] *= atoms
    shapes = list(zip(widths[:-1], widths[1:]))
    if dueling:
        shapes.append((widths[-2], atoms))
    rows = []
    p_off = e_off = 0
    for n_in, n_out in shapes:
        rows.append((p_off, n_in, n_out, e_off))
        p_off += n_in * n_out + n_out
        e_off += n_in + n_out
    return np.array(rows, dtype=np.int64).reshape(len(rows), 4)


def linear_size(layers: np.ndarray) -> int:
    """Parameters of the linear layers of ``layers`` (a :func:`noisy_layer_table`): the sigmas."""
    return int(sum(n_in * n_out + n_out for _, n_in, n_out, _ in layers))


def noise_size(layers: np.ndarray) -> int:
    """Noise factors one sample of the network ``layers`` takes: sum of n_in + n_out."""
    return int(layers[:, 1].sum() + layers[:, 2].sum())


def noisy_net_state(
    net: NetState, n_base: int, layers: np.ndarray, rng_state: np.ndarray
) -> NoisyNetState:
    """A :class:`NoisyNetState` over ``net``'s arrays (the whole vectors: means then
    sigmas, the first ``n_base`` values the means), with new scratch; ``net`` is a
    NetState or a DistNetState (its class is kept for the inner network)."""
    dt = net.params.dtype
    inner = net_state(
        np.zeros(n_base, dt), np.zeros(n_base, dt), net.sizes, np.zeros(n_base, dt),
        np.zeros(0, dt), np.zeros(0, dt), net.adam_t, type(net) is not NetState,
    )  # fmt: skip
    return NoisyNetState(*net, inner, np.zeros((2, noise_size(layers)), dt), layers, rng_state)


@kernel
def sample_noise(rng_state: np.ndarray, eps: np.ndarray) -> None:
    """One factorised noise sample: eps[i] = f(e_i), e_i standard normal, f(e) = sgn(e) sqrt(|e|).

    rng_state : uint64 (4,), advanced (:func:`ember_np.rng.fill_normals`);
    eps : float (n_noise,), written (the normals are rounded to its dtype before f).
    """
    fill_normals(rng_state, eps)
    for i in range(eps.shape[0]):
        e = eps[i]
        r = math.sqrt(abs(e))
        eps[i] = r if e >= 0.0 else -r


@kernel
def perturb(full: np.ndarray, eps: np.ndarray, layers: np.ndarray, out: np.ndarray) -> None:
    """The perturbed weights of a noisy network: out = mu + sigma * eps on the noisy layers.

    full : float (n_base + n_lin,), means then sigmas; eps : float (n_noise,), one
    :func:`sample_noise`; layers : int64 (L, 4), :func:`noisy_layer_table`;
    out : float (n_base,), written: a plain network's parameters (the values
    past the linear layers, LayerNorm's, copied from the means).

    W[k, j] = mu_W[k, j] + sigma_W[k, j] * (e_in[k] * e_out[j]);
    b[j] = mu_b[j] + sigma_b[j] * e_out[j].
    """
    n_base = out.shape[0]
    n_lin = full.shape[0] - n_base
    for i in range(n_lin, n_base):  # (a loop: numba's slice assignment copies via a temporary)
        out[i] = full[i]
    mu = full[:n_base]
    sigma = full[n_base:]
    one = eps.dtype.type(1.0)  # (a float64 1.0 would make every row's product float64)
    for r in range(layers.shape[0]):
        w_off, n_in, n_out, e_off = layers[r, 0], layers[r, 1], layers[r, 2], layers[r, 3]
        e_out = eps[e_off + n_in : e_off + n_in + n_out]
        # rows as slices indexed by range variables: no negative-index checks, so the
        # inner loops vectorise (indexing full[n_base + row + j] ran 10x slower)
        for k in range(n_in + 1):  # the n_in rows of W, then b (factor 1: e_b = e_out)
            ek = eps[e_off + k] if k < n_in else one
            row = w_off + k * n_out
            m, s, o = mu[row : row + n_out], sigma[row : row + n_out], out[row : row + n_out]
            for j in range(n_out):
                o[j] = m[j] + s[j] * (ek * e_out[j])


@kernel
def noise_grads(
    eff_grads: np.ndarray, eps: np.ndarray, layers: np.ndarray, grads: np.ndarray
) -> None:
    """The gradient w.r.t. means and sigmas from the one w.r.t. the perturbed weights.

    eff_grads : float (n_base,), d loss / d(mu + sigma * eps); eps, layers as
    :func:`perturb` took them; grads : float (n_base + n_lin,), written:
    d loss / d mu = eff_grads, d loss / d sigma = eff_grads * eps (its factor products).
    """
    n_base = eff_grads.shape[0]
    for i in range(n_base):
        grads[i] = eff_grads[i]
    g_sigma = grads[n_base:]
    one = eps.dtype.type(1.0)
    for r in range(layers.shape[0]):
        w_off, n_in, n_out, e_off = layers[r, 0], layers[r, 1], layers[r, 2], layers[r, 3]
        e_out = eps[e_off + n_in : e_off + n_in + n_out]
        for k in range(n_in + 1):  # W's rows, then b (as perturb)
            ek = eps[e_off + k] if k < n_in else one
            row = w_off + k * n_out
            g, o = eff_grads[row : row + n_out], g_sigma[row : row + n_out]
            for j in range(n_out):
                o[j] = g[j] * (ek * e_out[j])


# Two steps that only a noisy network takes, chosen when a kernel compiles by the
# class of its network state (as learn.head_loss_and_grads): a plain network's
# kernels compile them as nothing at all, so its numbers are untouched.


def resample_noise(net: NetState) -> None:
    """New noise for an update (a no-op for a network without noisy layers): the
    online sample (row 0 of ``net.noise``) then the target's (row 1), from ``net.rng``.
    Called by kernels only."""
    raise TypeError("resample_noise is dispatched inside compiled kernels only")


@overload(resample_noise)
def _resample_noise_for(net):  # noqa: ANN001, ANN202
    if getattr(net, "instance_class", None) is NoisyNetState:

        def resample(net):  # noqa: ANN001, ANN202
            sample_noise(net.rng, net.noise[0])
            sample_noise(net.rng, net.noise[1])

        return resample
    return lambda net: None


def acting_params(net: NetState, rng_state: np.ndarray) -> np.ndarray:
    """The parameters an exploring agent acts with: ``net.params`` for a plain
    network; for a noisy one, the means perturbed by a new sample drawn from
    ``rng_state`` (uint64 (4,), advanced), in ``net.inner.params``.
    Called by kernels only."""
    raise TypeError("acting_params is dispatched inside compiled kernels only")


@overload(acting_params)
def _acting_params_for(net, rng_state):  # noqa: ANN001, ANN202
    if getattr(net, "instance_class", None) is NoisyNetState:

        def noisy(net, rng_state):  # noqa: ANN001, ANN202
            eps = net.noise[0]
            sample_noise(rng_state, eps)
            perturb(net.params, eps, net.layers, net.inner.params)
            return net.inner.params

        return noisy
    return lambda net, rng_state: net.params
