"""Learner metrics of one optimizer step, exact over its micro-batches.

Each micro-batch's loss terms are already normalised by the whole mini-batch's counts, so the
mini-batch's value of a term is the sum over micro-batches. A masked mean over tokens (ratio
mean, clip fraction, approx KL) is the sum of the micro-batches' means weighted by their share of
the mini-batch's tokens; a max or a min (`*_max`, `*_min`) is the max or min over them. Logging
the last micro-batch's value instead (window 1) would report a fraction of the mini-batch.

Each micro-batch's loss returns its `MicroBatchMetrics`; the step combines them once
(`over_micro_batches`), and the iteration its steps (`over_steps`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


def extreme(name: str) -> str | None:
    """"max" for a `*_max` metric, "min" for a `*_min` one (they combine by max / min), else
    None (they add up, or average over steps)."""
    if name.endswith("_max"):
        return "max"
    if name.endswith("_min"):
        return "min"
    return None


@dataclass(frozen=True)
class MicroBatchMetrics:
    """What one micro-batch's loss reports.

    Attributes:
        sums: terms normalised by the whole mini-batch's counts: micro-batches add up.
        token_stats: statistics over this micro-batch's tokens (masked means, `*_max`, `*_min`).
        share: this micro-batch's mask tokens over the mini-batch's (weights its means).
    """

    sums: Mapping[str, float] = field(default_factory=dict)
    token_stats: Mapping[str, float] = field(default_factory=dict)
    share: float = 0.0


def over_micro_batches(parts: Sequence[MicroBatchMetrics]) -> dict[str, float]:
    """One optimizer step's metrics from its micro-batches' (in their order, so the float sums
    round the same way in every run)."""
    values: dict[str, float] = {}
    for part in parts:
        for name, value in part.sums.items():
            values[name] = values.get(name, 0.0) + value
        for name, value in part.token_stats.items():
            kind = extreme(name)
            if kind == "max":
                values[name] = max(values.get(name, value), value)
            elif kind == "min":
                values[name] = min(values.get(name, value), value)
            else:
                values[name] = values.get(name, 0.0) + value * part.share
    return values


def over_steps(steps: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """One iteration's value per metric: mean over its steps (max/min for `*_max/_min`)."""
    merged: dict[str, float] = {}
    for name in {n for step in steps for n in step}:
        values = [step[name] for step in steps if name in step]
        kind = extreme(name)
        if kind == "max":
            merged[name] = max(values)
        elif kind == "min":
            merged[name] = min(values)
        else:
            merged[name] = sum(values) / len(values)
    return merged
