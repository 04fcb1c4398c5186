"""Compiled optimisation steps on a flat parameter vector: gradient clipping by
global norm, Adam, Polyak averaging and copying (numba kernels, public to the
package). Each follows torch's rule, so a run matches its torch twin.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from ember_np._jit import inlined_kernel, kernel

__all__ = ["ADAM_EPS", "AdamState", "adam_step", "clip_grad_norm", "copy_into", "polyak"]


class AdamState(Protocol):
    """What :func:`adam_step` reads and writes: a NamedTuple with these fields
    (DQN's ``NetState``, PPO's ``PPONet``), passed to the kernel as one value.

    params, grads, adam_m, adam_v : float (num_params,), the same dtype;
    adam_t : int64 (1,), the step count.
    """

    @property
    def params(self) -> np.ndarray: ...
    @property
    def grads(self) -> np.ndarray: ...
    @property
    def adam_m(self) -> np.ndarray: ...
    @property
    def adam_v(self) -> np.ndarray: ...
    @property
    def adam_t(self) -> np.ndarray: ...


ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.999
#: torch.optim.Adam's default epsilon, DQN's (:func:`adam_step` takes it as an argument).
ADAM_EPS = 1e-8
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6)
ADAM_FLUSH = 1e-30  # Adam moments below this are set to 0 (see adam_step)


@kernel
def clip_grad_norm(grads: np.ndarray, max_norm: float) -> float:
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
def adam_step(net: AdamState, lr: float, eps: float) -> None:
    """One bias-corrected Adam step of ``net.params`` along ``net.grads``, as
    ``torch.optim.Adam(eps=eps)`` (betas 0.9, 0.999, no weight decay).

    net : AdamState (DQN's NetState, PPO's PPONet); params, adam_m, adam_v, adam_t
    are updated in place. lr : float > 0. eps : float > 0, applied in the params'
    dtype: DQN passes torch's default :data:`ADAM_EPS` (1e-8), PPO its
    ``adam_eps`` (SB3's 1e-5). An argument, not a per-caller constant, so one
    kernel serves both; float32(eps) is the same value either way.

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
    e = dt(eps)
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


@inlined_kernel
def copy_into(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[:] = src, element by element.

    A slice assignment would do, but it compiles numba's shape-mismatch error
    (its message formatting costs seconds of a first run's compiling).

    Parameters
    ----------
    dst : ndarray, shape (n,)
        Written in place.
    src : ndarray of dst's dtype, shape (n,)
    """
    for i in range(src.shape[0]):
        dst[i] = src[i]


@kernel
def polyak(dst: np.ndarray, src: np.ndarray, tau: float) -> None:
    """dst <- tau * src + (1 - tau) * dst (Polyak averaging).

    Parameters
    ----------
    dst : ndarray of float32 (or float64), shape (n,)
        Updated in place.
    src : ndarray of dst's dtype, shape (n,)
    tau : float
        Precondition: ``0 < tau <= 1``.
    """
    t = dst.dtype.type(tau)
    keep = dst.dtype.type(1.0 - tau)
    for i in range(dst.shape[0]):
        dst[i] = t * src[i] + keep * dst[i]
