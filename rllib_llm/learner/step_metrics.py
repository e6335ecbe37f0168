"""Learner metrics of one optimizer step, exact over its micro-batches.

Each micro-batch's loss terms are already normalised by the whole mini-batch's counts, so the
mini-batch's value of a term is the sum over micro-batches. A masked mean over tokens (ratio
mean, clip fraction, approx KL) is the sum of the micro-batches' means weighted by their share of
the mini-batch's tokens; a max or a min (`*_max`, `*_min`) is the max or min over them. Logging
the last micro-batch's value instead (window 1) would report a fraction of the mini-batch.
"""

from __future__ import annotations

from collections.abc import Sequence


def extreme(name: str) -> str | None:
    """"max" for a `*_max` metric, "min" for a `*_min` one (they combine by max / min), else
    None (they add up, or average over steps)."""
    if name.endswith("_max"):
        return "max"
    if name.endswith("_min"):
        return "min"
    return None


class StepMetrics:
    """Accumulates named metrics over the micro-batches of one optimizer step."""

    def __init__(self) -> None:
        self._values: dict[str, float] = {}

    def add_sum(self, name: str, value: float) -> None:
        """A term normalised by the mini-batch's counts: micro-batches add up."""
        self._values[name] = self._values.get(name, 0.0) + value

    def add_token_stat(self, name: str, value: float, share: float) -> None:
        """A statistic over this micro-batch's tokens, `share` of the mini-batch's tokens."""
        kind = extreme(name)
        if kind == "max":
            self._values[name] = max(self._values.get(name, value), value)
        elif kind == "min":
            self._values[name] = min(self._values.get(name, value), value)
        else:
            self.add_sum(name, value * share)

    def values(self) -> dict[str, float]:
        return dict(self._values)

    @staticmethod
    def over_steps(steps: Sequence[dict[str, float]]) -> dict[str, float]:
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
