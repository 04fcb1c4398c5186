"""The checks and coercions of ``QNetwork``'s inputs (layer sizes, per-sample
arrays, discounts, hyperparameters), so that its kernels only ever see valid,
typed arrays. Each raises ValueError naming the parameter and the fix.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ember_np._arrays import as_f32
from ember_np._validate import F32_RULE, positive_in_f32
from ember_np.dqn.learner.learn import PerSample
from ember_np.types import Batch

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

    Always float64, as replay buffers hand them over (given float32 ones are
    checked as float32 values, then widened exactly), so that the update
    compiles once: a second discounts dtype would compile the whole update
    chain a second time.
    """
    g = float(gamma)
    if not 0.0 <= g <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
    if discounts is None:
        return g * masks.astype(F64)
    if type(discounts) is np.ndarray and discounts.dtype is F64 and discounts.flags.carray:
        d = discounts
    else:
        d = as_f32(discounts, "discounts").astype(F64)
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


class UpdateOptions(NamedTuple):
    """The settings of one :meth:`QNetwork.update <ember_np.QNetwork.update>` call.

    gamma : float in [0, 1]
        Discount factor; used only for a batch without ``discounts`` (its
        target discount is then ``gamma * masks``).
    learning_rate : float > 0
    huber_delta : float > 0
        Huber loss threshold (``torch.nn.HuberLoss(delta=...)``). Default 1.0.
    double_dqn : bool
        Pick a* with the online network, evaluate it with the target. Default False.
    max_grad_norm : float > 0 or None
        Clip the global gradient norm as ``torch.nn.utils.clip_grad_norm_``;
        None (the default): no clipping.
    """

    gamma: float
    learning_rate: float
    huber_delta: float = 1.0
    double_dqn: bool = False
    max_grad_norm: float | None = None


def as_batch(batch: Any) -> Batch:
    """``update``'s batch as a :class:`~ember_np.types.Batch` (a tuple of 5 to 9 fields too)."""
    if isinstance(batch, Batch):
        return Batch(*batch)
    if isinstance(batch, (tuple, list)) and 5 <= len(batch) <= 9:
        return Batch(*batch)
    what = f"a {type(batch).__name__} of length {len(batch)}" if isinstance(
        batch, (tuple, list)) else f"a {type(batch).__name__}"  # fmt: skip
    raise ValueError(
        "batch must be a Batch (as a replay buffer samples it, or "
        "Batch(obs, actions, rewards, next_obs, masks) from your own arrays), "
        f"got {what}"
    )


def as_update_options(options: Any) -> UpdateOptions:
    """``update``'s options as :class:`UpdateOptions` (a tuple of 2 to 5 fields too)."""
    if isinstance(options, (tuple, list)) and 2 <= len(options) <= 5:
        return UpdateOptions(*options)
    raise ValueError(
        "options must be UpdateOptions(gamma, learning_rate, huber_delta=1.0, "
        f"double_dqn=False, max_grad_norm=None), got {options!r}"
    )


def holds_data(field: Any) -> bool:
    """Whether a Batch field was given (a field of length 0, or None, was not)."""
    # .size of an ndarray (the usual case) costs a fifth of np.size's dispatch
    if type(field) is np.ndarray:
        return field.size > 0
    return field is not None and np.size(field) > 0


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
