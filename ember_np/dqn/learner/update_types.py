"""The values one DQN update passes between kernels: the network's arrays
(:class:`NetState`), the scalar settings (:class:`UpdateSettings`) and the
per-sample arrays (:class:`PerSample`), each a NamedTuple so kernels take it
as one argument (re-exported by ``learn.py``, their first user).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class NetState(NamedTuple):
    """The arrays one DQN update reads and writes, passed to kernels as one value.

    params : ndarray of float32, shape (num_params,)
        The online network's parameters (``mlp.py``'s layout); updated in place.
    target : ndarray of float32, shape (num_params,)
        The target network's parameters (read only during an update).
    sizes : ndarray of int64, shape (n_layers + 1,)
        ``(obs_size, hidden..., n_actions)``, or a distributional network's
        widths and head (``head.kernel_sizes``).
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


class DistNetState(NetState):
    """A :class:`NetState` of a network with a distributional head (``head.py``).

    The same fields; the class alone differs, so that kernels taking one
    compile their own version, with the distributional loss, and a plain
    network's kernels never compile it (``learn.head_loss_and_grads``).
    Build it with :func:`net_state`.
    """

    __slots__ = ()


class NoisyNetState(NamedTuple):
    """A :class:`NetState` of a network with noisy linear layers (``noisy.py``).

    The first seven fields are a NetState's, over the whole flat vector: the
    mean weights (mu, ``mlp.py``'s layout, ``n_base`` values) then the noise
    scales (sigma, one per linear-layer parameter, the same layout), so that
    gradient clipping, Adam and the target sync treat both alike. Then:

    inner : NetState or DistNetState
        The noisy network as its kernels see it: ``params`` and ``target`` are
        scratch (n_base,) for the perturbed weights mu + sigma * eps of the
        online and target networks, ``grads`` scratch (n_base,) for the loss's
        gradient w.r.t. them, ``adam_*`` unused (length 0); sizes as above.
    noise : ndarray of params' dtype, shape (2, n_noise)
        Scratch for the factorised noise f(eps) of the online (row 0) and
        target (row 1) networks: per noisy layer, its n_in then n_out factors.
    layers : ndarray of int64, shape (n_noisy_layers, 4)
        Per noisy layer: offset of its W in mu, n_in, n_out, offset of its
        factors in a noise row (``noisy.noisy_layer_table``).
    rng : ndarray of uint64, shape (4,)
        The PCG64 state the update draws its noise from (an agent's replay stream).
    """

    params: np.ndarray
    target: np.ndarray
    sizes: np.ndarray
    grads: np.ndarray
    adam_m: np.ndarray
    adam_v: np.ndarray
    adam_t: np.ndarray
    inner: NetState
    noise: np.ndarray
    layers: np.ndarray
    rng: np.ndarray


def net_state(
    params: np.ndarray, target: np.ndarray, sizes: np.ndarray, grads: np.ndarray,
    adam_m: np.ndarray, adam_v: np.ndarray, adam_t: np.ndarray, distributional: bool,
) -> NetState:  # fmt: skip
    """A :class:`NetState`, or a :class:`DistNetState` for a distributional network."""
    cls = DistNetState if distributional else NetState
    return cls(params, target, sizes, grads, adam_m, adam_v, adam_t)


class UpdateSettings(NamedTuple):
    """The scalar settings of one DQN update (build with :func:`update_settings`).

    There is no discount here: the batch carries one per sample
    (``Batch.discounts``, gamma * mask or gamma^m * mask, written by the replay
    buffer, the one owner of gamma and n_step).
    """

    learning_rate: float
    huber_delta: float
    double_dqn: bool
    max_grad_norm: float  # <= 0: no clipping


def update_settings(
    learning_rate: float, huber_delta: float, double_dqn: bool, max_grad_norm: float | None
) -> UpdateSettings:
    """The one place an :class:`UpdateSettings` is built: fixed Python types, so
    kernels taking it compile once (an int where a float was would compile again)."""
    clip = -1.0 if max_grad_norm is None else float(max_grad_norm)
    return UpdateSettings(float(learning_rate), float(huber_delta), bool(double_dqn), clip)


class PerSample(NamedTuple):
    """Per-sample arrays of an update beyond the batch's transitions and discounts;
    each may have length 0.

    weights : ndarray of float32, shape (batch,) or (0,)
        Non-negative importance weights: loss = mean_i w_i * Huber_i; length 0: all 1.
    td_errors : ndarray of float32, shape (batch,) or (0,)
        Filled with |y_i - Q(s_i, a_i)| (before the step) when of length batch:
        prioritized replay's new priorities (a distributional head writes its
        own, see ``distributional.py``).
    """

    weights: np.ndarray
    td_errors: np.ndarray
