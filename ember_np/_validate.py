"""Argument checks shared by every public entry point, so each rule is written once.

Each check raises ``ValueError`` naming the parameter, the rule and the value
(umap's ``_validate_parameters`` style), and returns the value converted.

Integers are bounded by :data:`INT64_MAX`: the compiled kernels hold every
count, size and step in an int64, and a larger Python int would reach numba
as a type it cannot compile (an 80-line TypingError) or wrap around.
"""

from __future__ import annotations

import math
import operator
from typing import Any, TypeGuard

import numpy as np

__all__ = [
    "F32_RULE",
    "INT64_MAX",
    "check_int",
    "int_rule",
    "is_int",
    "positive_in_f32",
    "too_big_rule",
]

#: The largest integer a setting may take: the kernels' int64.
INT64_MAX = 2**63 - 1


#: How :func:`positive_in_f32`'s rule reads in a message.
F32_RULE = (
    "finite and > 0 in float32, the precision the kernels apply it in (between 1.4e-45 and 3.4e+38)"
)


def is_int(value: Any) -> TypeGuard[int]:
    """Whether ``value`` is a Python int and not a bool (what a JSON integer reads as)."""
    return isinstance(value, int) and not isinstance(value, bool)


def positive_in_f32(value: float) -> bool:
    """Whether ``value`` stays finite and > 0 once rounded to float32, the precision
    the kernels apply it in (a learning rate of 1e39 is finite in float64, inf in
    float32, and turns every weight into NaN; one of 1e-50 rounds to 0 and never
    moves them)."""
    with np.errstate(over="ignore", under="ignore"):
        f = float(np.float32(value))
    return math.isfinite(f) and f > 0.0


def int_rule(minimum: int) -> str:
    """How the rule "an integer >= minimum" reads in a message."""
    return "a positive integer" if minimum == 1 else f"an integer >= {minimum}"


def check_int(
    name: str, value: Any, minimum: int = 1, hint: str = "", maximum: int | None = INT64_MAX
) -> int:
    """``value`` as an ``int`` in [``minimum``, ``maximum``]; any integer type, but not bool
    or float. ``maximum`` None means no upper bound (seeds, which are saved losslessly).

    ``hint`` follows the rule in the message, e.g. ``" (0: no limit)"``.
    """
    if isinstance(value, bool):
        raise ValueError(f"{name} must be {int_rule(minimum)}{hint}, got {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be {int_rule(minimum)}{hint}, got {value!r}") from None
    if v < minimum:
        raise ValueError(f"{name} must be {int_rule(minimum)}{hint}, got {v}")
    if maximum is not None and v > maximum:
        raise ValueError(f"{name} must be at most {too_big_rule(maximum)}, got {v}")
    return int(v)


def too_big_rule(maximum: int) -> str:
    """How an upper bound reads in a message: ``2**63 - 1 (the kernels' int64)``."""
    return "2**63 - 1 (the kernels' int64)" if maximum == INT64_MAX else str(maximum)
