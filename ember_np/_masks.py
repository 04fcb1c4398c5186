"""Action masks: the checks every entry point shares (NumPy only: the policy imports it).

An action mask says which actions are legal in a state: gymnasium's
convention (Taxi-v3) is ``info["action_mask"]``, an array of shape
``(n_actions,)`` holding 1 for a legal action and 0 for an illegal one
(Taxi's dtype is int8). Masks are taken as bool or integer arrays of 0s and
1s, checked here once, and handed to the kernels as C-contiguous bool arrays.
The replay buffer keeps them as packed bits (``np.packbits``: action j is bit
``7 - j % 8`` of byte ``j // 8``).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

__all__ = [
    "IGNORED_MASKS",
    "check_action_mask",
    "check_action_masks",
    "packed_mask_bytes",
    "warn_if_masks_ignored",
]

#: The warning (once per trainer) for an env's masks that an agent without masks ignores.
IGNORED_MASKS = (
    "the env puts an action_mask in info, but the agent's config has action_masks=False: "
    "the masks are ignored and any action may be chosen; DqnConfig(action_masks=True) uses them"
)


def warn_if_masks_ignored(info: Any) -> bool:
    """Warn (UserWarning, :data:`IGNORED_MASKS`) when ``info`` (a reset's or step's,
    single or vector env) holds an ``action_mask``; return whether it did. Trainers
    whose agent has masks off call it until it returns True: one warning each."""
    if isinstance(info, dict) and info.get("action_mask") is not None:
        warnings.warn(IGNORED_MASKS, UserWarning, stacklevel=4)
        return True
    return False


_BOOL = np.dtype(np.bool_)

#: The mask of "no mask" (kernels read a mask of length 0 as "every action is legal").
ALL_LEGAL = np.zeros(0, dtype=np.bool_)


def packed_mask_bytes(n_actions: int) -> int:
    """Bytes of one packed mask: ceil(n_actions / 8)."""
    return (n_actions + 7) // 8


def _as_bool(mask: Any, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """``mask`` as a C-contiguous bool array of ``shape``; ValueError if it is not boolean-like."""
    if type(mask) is np.ndarray and mask.dtype is _BOOL and mask.flags.carray:
        arr = mask  # the trainer's hot path: nothing to convert
    else:
        arr = np.asarray(mask)
        if arr.dtype.kind not in "biu":
            raise ValueError(
                f"{name} must be boolean-like (bool, or integers 0 and 1, as gymnasium's "
                f"info['action_mask']), got dtype {arr.dtype}: pass e.g. "
                f"np.array(mask, dtype=bool)"
            )
        if arr.dtype.kind != "b" and arr.size and (arr.min() < 0 or arr.max() > 1):
            raise ValueError(
                f"{name} must hold only 0 and 1 (or False and True), got values "
                f"{np.unique(arr)[:8].tolist()}"
            )
        arr = np.ascontiguousarray(arr, dtype=np.bool_)
        if not arr.flags.writeable:  # kernels take writeable arrays (one compiled version)
            arr = arr.copy()
    if arr.shape != shape:
        raise ValueError(
            f"expected {name} of shape {shape} (one entry per action), got shape {arr.shape}"
        )
    return arr


def check_action_mask(mask: Any, n_actions: int, name: str = "action_mask") -> np.ndarray:
    """One state's mask as a C-contiguous bool array of shape (n_actions,).

    Raises ValueError for a mask that is not boolean-like, has the wrong
    shape, or allows no action at all.
    """
    if (
        type(mask) is np.ndarray
        and mask.shape == (n_actions,)
        and mask.dtype.itemsize == 1
        and mask.dtype.kind in "biu"
        and mask.flags.carray
        and np.max(mask.view(np.uint8)) == 1  # one pass: 0/1 only (int8 -1 is 255), one legal
    ):
        return mask.view(np.bool_)  # gymnasium's int8 mask, as bools without a copy
    arr = _as_bool(mask, name, (n_actions,))
    if not arr.any():
        raise ValueError(
            f"{name} allows no action (all {n_actions} entries are 0): at least one action "
            "must be legal; an episode with no legal action should have ended"
        )
    return arr


def check_action_masks(masks: Any, batch: int, n_actions: int,
                       name: str = "action_masks") -> np.ndarray:  # fmt: skip
    """A batch of masks as a C-contiguous bool array of shape (batch, n_actions).

    Raises ValueError as :func:`check_action_mask`, naming the first row
    without a legal action.
    """
    arr = _as_bool(masks, name, (batch, n_actions))
    none_legal = ~arr.any(axis=1)
    if none_legal.any():
        row = int(np.argmax(none_legal))
        raise ValueError(
            f"{name}[{row}] allows no action (all {n_actions} entries are 0): every row "
            "must have at least one legal action"
        )
    return arr
