"""Initialisation of an MLP's parameters, as torch initialises its layers
(NumPy and an explicit :class:`~ember_np.rng.Rng`; no numba).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ember_np.rng import Rng

__all__ = ["init_linear", "init_layer_norm"]


def init_linear(weights: Sequence[np.ndarray], biases: Sequence[np.ndarray], rng: Rng) -> None:
    """Fill each Linear layer's W and b from U(-1/sqrt(fan_in), 1/sqrt(fan_in)), in place,
    like ``torch.nn.Linear`` (fan_in: the rows of W).

    weights : float arrays (fan_in, fan_out); biases : float arrays (fan_out,), paired
    with them. Draws W's values then b's, layer by layer, from ``rng`` (that order
    is what makes a seed's network).
    """
    for w, b in zip(weights, biases):
        bound = 1.0 / math.sqrt(w.shape[0])
        w[...] = (rng.random(w.size) * 2.0 - 1.0).reshape(w.shape) * bound
        b[...] = (rng.random(b.size) * 2.0 - 1.0) * bound


def init_layer_norm(gains: Sequence[np.ndarray], biases: Sequence[np.ndarray]) -> None:
    """LayerNorm's parameters as ``torch.nn.LayerNorm`` starts them: gain 1, bias 0."""
    for gain, bias in zip(gains, biases):
        gain[...] = 1.0
        bias[...] = 0.0
