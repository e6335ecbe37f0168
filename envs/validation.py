"""Checks for user-facing settings, with messages naming the field, the value, the rule and a fix.

The environment config and the verifier validate the same kinds of values (a count, a positive
duration, a share, a choice among names); these helpers keep their messages in one shape, so a
user who sees one knows how to read them all.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any


def check_int(field: str, value: Any, *, minimum: int, fix: str) -> int:
    """Return `value` if it is an int >= `minimum` (bools are refused: `True` is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{field}={value!r} must be an integer >= {minimum}; {fix}")
    return value


def check_positive_seconds(field: str, value: Any, *, fix: str) -> float:
    """Return `value` as a float if it is a finite number of seconds > 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"{field}={value!r} must be a finite number of seconds > 0; {fix}")
    return float(value)


def check_finite(field: str, value: Any, *, fix: str) -> float:
    """Return `value` as a float if it is a finite number (scores feed advantages: no NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{field}={value!r} must be a finite number; {fix}")
    return float(value)


def check_fraction(field: str, value: Any, *, fix: str) -> float:
    """Return `value` as a float if it is a number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"{field}={value!r} must be a number in [0, 1]; {fix}")
    return float(value)


def check_choice(field: str, value: Any, choices: Collection[str]) -> str:
    """Return `value` if it is one of `choices`, else list the valid names."""
    if value not in choices:
        raise ValueError(f"{field}={value!r} is not one of {sorted(choices)}; pick one of them")
    return value


def check_str(field: str, value: Any, *, fix: str) -> str:
    """Return `value` if it is a non-empty string."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field}={value!r} must be a non-empty string; {fix}")
    return value
