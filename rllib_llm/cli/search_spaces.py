"""Tune search spaces written in YAML: a mapping with one key, Tune's function name, and its
arguments — `pg_variant: {grid_search: [topr, cispo]}`, `lr: {loguniform: [1.0e-5, 1.0e-3]}`.
Any setting of any section of a sweep file can be one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Kind:
    arity: str  # what the arguments are, for the error message
    discrete: bool  # its values are listed (each is checked against the setting's rule)


SEARCH_SPACE_KINDS = {
    "grid_search": Kind("a list of values, every one tried", True),
    "choice": Kind("a list of values, one sampled per trial", True),
    "uniform": Kind("[low, high]", False),
    "loguniform": Kind("[low, high], both > 0", False),
    "randint": Kind("[low, high), integers", False),
}


def is_search_space(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)) in SEARCH_SPACE_KINDS


def malformed(space: dict) -> str | None:
    """Why a search space's arguments are not what its kind takes (an empty grid would start no
    trial), or None."""
    (kind, args), = space.items()
    if (not isinstance(args, list) or not args
            or (not SEARCH_SPACE_KINDS[kind].discrete and len(args) != 2)):
        return f"{{{kind}: ...}} takes {SEARCH_SPACE_KINDS[kind].arity}, got {args!r}"
    return None


def to_tune(value: Any) -> Any:
    """`value` with every YAML search space replaced by Tune's object (recursively)."""
    from ray import tune

    if is_search_space(value):
        (kind, args), = value.items()
        why = malformed(value)
        if why:
            raise ValueError(why)
        if SEARCH_SPACE_KINDS[kind].discrete:
            return getattr(tune, kind)(args)
        return getattr(tune, kind)(*args)
    if isinstance(value, dict):
        return {k: to_tune(v) for k, v in value.items()}
    return value


def has_search_space(value: Any) -> bool:
    if is_search_space(value):
        return True
    return isinstance(value, dict) and any(has_search_space(v) for v in value.values())
