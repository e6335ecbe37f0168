"""A setting's declaration (`Field`) and the rules its values obey.

Each section's settings are declared in a `fields_<section>.py` module with these; `fields.py`
joins them into `FIELDS`, the one table of every `RLVRConfig` setting.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rllib_llm.exchange.memory_budgets import (
    AUTO,
    CPU_GENERATE_TOKENS,
    CPU_MICRO_BATCH_TOKENS,
)

# A rule returns None when the value is fine, else the rule in words ("must be > 0").
Rule = Callable[[Any], "str | None"]

# The memory budgets on a CPU, in tokens ("auto" there; exchange/memory_budgets.py sizes them on
# a GPU).
DEFAULT_MICRO_BATCH_TOKENS = CPU_MICRO_BATCH_TOKENS
DEFAULT_GENERATE_TOKENS = CPU_GENERATE_TOKENS


@dataclass(frozen=True)
class Field:
    name: str
    default: Any
    doc: str
    rule: Rule | None = None
    section: str = "training"
    # The rule in an evaluation config (RLlib's `evaluation_config` overrides), where it differs:
    # evaluation only samples, so e.g. temperature 0 (greedy) is fine there.
    eval_rule: Rule | None = None
    # The setting's type, where its default's type does not say it (a None default, a number
    # that may be a float, or None allowed as well); `annotation_of` gives every field's.
    annotation: str | None = None


def annotation_of(field: Field) -> str:
    """The type of `field`'s values, as Python source: its annotation, else its default's
    type (what `RLVRConfig`'s annotations, its stub and `help()` show)."""
    if field.annotation is not None:
        return field.annotation
    default = field.default
    if isinstance(default, list):
        items = sorted({type(item).__name__ for item in default})
        return f"list[{' | '.join(items)}]" if items else "list[Any]"
    if isinstance(default, dict):
        return "dict[str, Any]"
    if default is None:
        raise ValueError(f"field {field.name!r} has a None default and no annotation")
    return type(default).__name__


def is_number(v: Any) -> bool:
    """A finite int or float (not a bool): inf and nan are never a valid setting."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def number_rule(v: Any, holds: Callable[[Any], bool], bound: str) -> str | None:
    """None if `v` is a finite number for which `holds`, else the rule: "must be a number
    {bound}", or "must be a finite number {bound}" for inf and nan (which compare as numbers:
    told only "must be a number > 0", temperature=inf read as a contradiction)."""
    if is_number(v) and holds(v):
        return None
    finite = isinstance(v, float) and not math.isfinite(v)
    return f"must be a {'finite ' if finite else ''}number {bound}"


def positive(v: Any) -> str | None:
    return number_rule(v, lambda x: x > 0, "> 0")


def non_negative(v: Any) -> str | None:
    return number_rule(v, lambda x: x >= 0, ">= 0")


def positive_int(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else (
        "must be an integer >= 1"
    )


def non_negative_int(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else (
        "must be an integer >= 0"
    )


def overlong_buffer(v: Any) -> str | None:
    if v is None or v == "auto":
        return None
    why = positive_int(v)
    return None if why is None else f"{why} (or 'auto', or None)"


def token_budget(v: Any) -> str | None:
    if v is None or v == AUTO:
        return None
    why = positive_int(v)
    return None if why is None else f"{why} (or 'auto', or None)"


def boolean_or_auto(v: Any) -> str | None:
    return None if isinstance(v, bool) or v == AUTO else "must be True, False or 'auto'"


def training_temperature(v: Any) -> str | None:
    why = positive(v)
    return None if why is None else (
        f"{why} (the learner divides logits by it; for greedy evaluation set "
        ".evaluation(evaluation_config={'temperature': 0}))"
    )


def unit_interval(v: Any) -> str | None:
    return number_rule(v, lambda x: 0 <= x <= 1, "in [0, 1]")


def open_unit_interval(v: Any) -> str | None:
    return number_rule(v, lambda x: 0 < x <= 1, "in (0, 1]")


def boolean(v: Any) -> str | None:
    return None if isinstance(v, bool) else "must be True or False"


def text(v: Any) -> str | None:
    return None if isinstance(v, str) and v else "must be a non-empty string"


# The rules below are small frozen objects rather than closures so that tools can read what they
# allow: the stub's `Literal`s come from `OneOf.names` (config_types.py), never from a second list.
@dataclass(frozen=True)
class OrNone:
    """Rule: None, or what `rule` allows."""

    rule: Rule

    def __call__(self, v: Any) -> str | None:
        if v is None:
            return None
        why = self.rule(v)
        return None if why is None else f"{why} (or None)"


def optional(rule: Rule) -> Rule:
    return OrNone(rule)


@dataclass(frozen=True)
class CoreNames:
    """Valid names of one core option (`kind`), read when checked so user registrations count:
    an open set."""

    kind: str

    def __call__(self) -> tuple[str, ...]:
        from rllib_llm.core import registered_names

        return registered_names(self.kind)


@dataclass(frozen=True)
class OneOf:
    """Rule: a name from a fixed tuple, from one read from rllib_llm.core when checked, or from
    a core registry (`CoreNames`: user additions count)."""

    names: Callable[[], tuple[Any, ...]] | tuple[Any, ...]

    def valid(self) -> tuple[Any, ...]:
        return self.names() if callable(self.names) else self.names

    def __call__(self, v: Any) -> str | None:
        valid = self.valid()
        return None if v in valid else f"must be one of {sorted(valid)}"


def one_of(names: Callable[[], tuple[Any, ...]] | tuple[Any, ...]) -> Rule:
    return OneOf(names)


def core_names(kind: str) -> Callable[[], tuple[str, ...]]:
    return CoreNames(kind)


def kl_kind(v: Any) -> str | None:
    """A per-token KL estimator's name; ROLL's 'full' is refused as what it is, not implemented."""
    why = one_of(core_names("kl_kind"))(v)
    if why is not None and v == "full":
        return ("is not implemented in rllib_llm: 'full' (ROLL's exact KL over the whole "
                "vocabulary) needs every token's logits, and the KL here is estimated from the "
                "sampled tokens' log-probs; use 'kl' (k1), 'mse' (k2), 'k3' or 'abs'")
    return why


def core_tuple(name: str) -> Callable[[], tuple[str, ...]]:
    """A tuple of built-in names exported by rllib_llm.core, read when checked."""

    def names() -> tuple[str, ...]:
        from rllib_llm import core

        return tuple(getattr(core, name))

    return names
