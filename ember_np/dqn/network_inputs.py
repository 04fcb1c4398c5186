"""The checks and coercions of ``QNetwork``'s inputs (layer sizes, per-sample
arrays, discounts, hyperparameters), so that its kernels only ever see valid,
typed arrays. Each raises ValueError naming the parameter and the fix.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember_np._arrays import as_f32
from ember_np._validate import F32_RULE, positive_in_f32
from ember_np.dqn.learn import PerSample

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)


def check_positive_float(name: str, value: Any) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number, got {value!r}") from None
    if not (v > 0.0 and math.isfinite(v)):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    if not positive_in_f32(v):  # applied to float32 weights
        raise ValueError(f"{name} must be {F32_RULE}, got {value!r}")
    return v


NONE = np.empty(0, dtype=np.float32)  # an absent per-sample array (never written)
NO_PER_SAMPLE = PerSample(NONE, NONE)
F64 = np.dtype(np.float64)


def batch_discounts(discounts: Any, gamma: Any, masks: np.ndarray) -> np.ndarray:
    """The batch's per-sample discounts (batch,): given ones, else ``gamma * masks``.

    Given discounts are used as float64 when they are float64 (a one-step
    buffer's ``gamma * mask``), else read as float32, as they always were (an
    n-step buffer's ``gamma**m * mask``); ``gamma * masks`` is float64. The
    TD target is computed in the discounts' precision.
    """
    g = float(gamma)
    if not 0.0 <= g <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
    if discounts is None:
        return g * masks.astype(F64)
    if type(discounts) is np.ndarray and discounts.dtype is F64 and discounts.flags.carray:
        d = discounts
    else:
        d = as_f32(discounts, "discounts")
    if d.shape != masks.shape:
        raise ValueError(f"expected discounts of shape {masks.shape}, got {d.shape}")
    return d


def optional_per_sample(name: str, value: Any, batch: int) -> np.ndarray:
    """A per-sample input as float32 (batch,), or an empty array when None."""
    if value is None:
        return NONE
    arr = as_f32(value, name)
    if arr.shape != (batch,):
        raise ValueError(f"expected {name} of shape ({batch},), got {arr.shape}")
    return arr


def split_batch_tail(
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
    discounts = from_batch("discounts", first, discounts)
    weights = from_batch("weights", tail[0], weights)
    packed = tail[2] if holds_data(tail[2]) else None
    return tail[3], discounts, weights, packed


def holds_data(field: Any) -> bool:
    """Whether a Batch field was given (a field of length 0 was not)."""
    # .size of an ndarray (the usual case) costs a fifth of np.size's dispatch
    return (field.size if type(field) is np.ndarray else np.size(field)) > 0


def from_batch(name: str, field: Any, keyword: Any) -> Any:
    """The batch's ``field`` if it holds data (``keyword`` must then be None), else ``keyword``."""
    if not holds_data(field):
        return keyword
    if keyword is not None:
        raise ValueError(f"{name} given twice: in the batch and as a keyword")
    return field


def td_errors_out_array(out: Any, batch: int) -> np.ndarray:
    """The array the update writes |TD errors| into, or an empty one when None."""
    if out is None:
        return NONE
    if (
        not isinstance(out, np.ndarray)
        or out.dtype != F32
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


def check_layer_sizes(layer_sizes: Sequence[int]) -> tuple[int, ...]:
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
