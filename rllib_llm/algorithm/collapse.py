"""Say, once, when a run has collapsed: its training accuracy or its entropy fell to the floor,
or its gradient to zero, so the policy stopped changing.

A step too large (the embedded recipe at lr=10) takes the policy to a deterministic wrong answer
in one iteration: accuracy 0.44 -> 0.0, entropy 0.63 -> 0.0006, and every later group's
responses alike, so their advantages and the gradient are 0. No step is non-finite and the loss
is near 0, so nothing else warns: the run goes on, learning nothing. `collapse_signs` reads the
per-iteration metrics (a pure function, tested on hand-made sequences); `CollapseWatch` feeds it
one result at a time and says it once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.learner import DEFAULT_OPTIMIZER, LR_KEY
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, LEARNER_RESULTS

from rllib_llm.learner.learner import ENTROPY, GRAD_NORM
from rllib_llm.rollout.sample_metrics import ACCURACY

# Where each metric the detector reads sits in `algo.train()`'s result (GRAD_NORM: the actor's
# norm before clipping), and RLlib's learning rate of the step (a schedule's value now).
PATHS = {
    ACCURACY: (ENV_RUNNER_RESULTS, ACCURACY),
    ENTROPY: (LEARNER_RESULTS, DEFAULT_MODULE_ID, ENTROPY),
    GRAD_NORM: (LEARNER_RESULTS, DEFAULT_MODULE_ID, GRAD_NORM),
}
LEARNING_RATE_PATH = (LEARNER_RESULTS, DEFAULT_MODULE_ID, f"{DEFAULT_OPTIMIZER}_{LR_KEY}")

# A sign must hold this many iterations in a row: one batch of a hard task can be all wrong.
PATIENCE = 3
# Accuracy "fell": it averaged at least this before the last PATIENCE iterations, then was 0 in
# each. (A run that never solved anything has not collapsed; at 10% of 128 samples an iteration
# is all wrong with probability 1e-6.)
MIN_ACCURACY_BEFORE = 0.1
# Entropy (nats per token) below this is a policy that samples one answer: a group's responses
# are then alike and teach nothing. It "fell" if it averaged 10x this before.
ENTROPY_FLOOR = 1e-3
# A run whose accuracy is at least this has learned its task: a still policy is then done.
SOLVED = 0.95


def collapse_signs(history: Sequence[Mapping[str, float]], *,
                   patience: int = PATIENCE) -> list[str]:
    """What in a run's metrics says it collapsed, in words; empty when nothing does.

    Args:
        history: per iteration, oldest first, `{ACCURACY, ENTROPY, GRAD_NORM: value}` (the
            names in `PATHS`; a missing or non-finite value says nothing).
        patience: iterations in a row a sign must hold.
    """
    if len(history) <= patience:
        return []
    before, recent = history[:-patience], history[-patience:]
    accuracy_now = _values(recent, ACCURACY)
    if accuracy_now and len(accuracy_now) == patience and min(accuracy_now) >= SOLVED:
        return []
    signs = []
    accuracy_before = _values(before, ACCURACY)
    if len(accuracy_now) == patience and max(accuracy_now) == 0 and accuracy_before and \
            _mean(accuracy_before) >= MIN_ACCURACY_BEFORE:
        signs.append(f"training accuracy fell from {_mean(accuracy_before):.2f} to 0 for "
                     f"{patience} iterations")
    entropy_now, entropy_before = _values(recent, ENTROPY), _values(before, ENTROPY)
    if len(entropy_now) == patience and max(entropy_now) < ENTROPY_FLOOR and entropy_before \
            and _mean(entropy_before) >= 10 * ENTROPY_FLOOR:
        signs.append(f"entropy fell from {_mean(entropy_before):.3g} to {entropy_now[-1]:.2g} "
                     "nats per token")
    grad_now = _values(recent, GRAD_NORM)
    if len(grad_now) == patience and max(grad_now) == 0:
        signs.append(f"the gradient was 0 for {patience} iterations (every group's responses "
                     "scored alike: the policy stopped changing)")
    return signs


def collapse_warning(signs: list[str], *, iteration: int, settings: Mapping[str, Any]) -> str:
    """The one warning line: what collapsed, and the settings most likely responsible."""
    named = ", ".join(f"{name}={value!r}" for name, value in settings.items())
    return (f"rllib_llm: training collapsed by iteration {iteration}: {'; '.join(signs)}. Most "
            f"likely a step too large for this model: {named}; lower lr (or grad_clip, pg_clip), "
            "or raise entropy_coef to keep the policy sampling.")


class CollapseWatch:
    """Feeds `collapse_signs` one iteration's result at a time; says it once per run.

    settings: the settings to name in the warning, `{name: value}`.
    """

    def __init__(self, settings: Mapping[str, Any]):
        self.settings = dict(settings)
        self.history: list[dict[str, float]] = []  # three numbers an iteration
        self.warned = False

    def observe(self, result: Mapping[str, Any], iteration: int) -> str | None:
        """The warning line, the first time `result` (`algo.train()`'s, of training iteration
        `iteration`) completes a collapse; else None."""
        row = {name: _at(result, path) for name, path in PATHS.items()}
        self.history.append({name: value for name, value in row.items() if value is not None})
        if self.warned:
            return None
        signs = collapse_signs(self.history)
        if not signs:
            return None
        self.warned = True
        settings = dict(self.settings)
        lr_now = _at(result, LEARNING_RATE_PATH)
        if lr_now is not None:  # a schedule's rate now, not the schedule
            settings["lr"] = lr_now
        return collapse_warning(signs, iteration=iteration, settings=settings)


def _at(result: Mapping[str, Any], path: tuple[str, ...]) -> float | None:
    """The number at `path` in a nested result, or None."""
    value: Any = result
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def _values(rows: Sequence[Mapping[str, float]], key: str) -> list[float]:
    return [row[key] for row in rows if key in row and math.isfinite(row[key])]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)
