"""Argument checks shared by every public entry point, so each rule is written once.

Each check raises ``ValueError`` naming the parameter, the rule and the value
(umap's ``_validate_parameters`` style), and returns the value converted.
"""

from __future__ import annotations

import operator
from typing import Any

__all__ = ["check_int", "int_rule"]


def int_rule(minimum: int) -> str:
    """How the rule "an integer >= minimum" reads in a message."""
    return "a positive integer" if minimum == 1 else f"an integer >= {minimum}"


def check_int(name: str, value: Any, minimum: int = 1, hint: str = "") -> int:
    """``value`` as an ``int`` >= ``minimum``; any integer type, but not bool or float.

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
    return int(v)
