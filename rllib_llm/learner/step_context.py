"""What one optimizer step hands the loss of each of its micro-batches.

The loss terms of a micro-batch are normalised by the whole mini-batch's counts (so that the
micro-batch budget changes memory and nothing else), and during value pretraining the loss is
the critic's alone. Both belong to the step, not to the learner: the step builds one
`StepContext` and it travels in every micro-batch under `STEP_CONTEXT`, as TRL hands
`num_items_in_batch` to its loss with the inputs.
A loss given a micro-batch without one raises instead of falling back to the micro-batch's own
counts, which would silently make the update depend on the budget.

The context only goes in: each micro-batch's loss returns its metrics
(`learner.MicroBatchLoss`), and the step combines and logs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rllib_llm import core
from rllib_llm.exchange.columns import ACTION_MASK, CORRECT, SCORES

STEP_CONTEXT = "step_context"  # the micro-batch key that holds the step's StepContext


@dataclass(frozen=True)
class StepContext:
    """The whole mini-batch's normalisers and the step's kind.

    Attributes:
        counts: mask tokens and sequences of the whole mini-batch (every data-parallel rank's).
        positive_tokens: () mask tokens of positive responses (`positive`), the normaliser of
            the positive-only terms (positive NLL, ROLL's positive loss).
        negative_tokens: () mask tokens of the other responses (ROLL's TOPR negative loss).
        value_pretraining: the critic trains alone this step (the loss is its loss only).
    """

    counts: core.AggCounts
    positive_tokens: torch.Tensor
    negative_tokens: torch.Tensor
    value_pretraining: bool = False

    @classmethod
    def of(cls, mini_batch: dict[str, torch.Tensor], *,
           value_pretraining: bool = False) -> StepContext:
        """The context of one step on `mini_batch` (before it is split or shared out)."""
        mask = mini_batch[ACTION_MASK]
        positive = positive_rows(mini_batch)[:, None]  # (B, 1)
        return cls(counts=core.agg_counts(mask), positive_tokens=(mask * positive).sum(),
                   negative_tokens=(mask * (1 - positive)).sum(),
                   value_pretraining=value_pretraining)


def with_context(micro_batch: dict[str, Any], context: StepContext) -> dict[str, Any]:
    """`micro_batch` carrying its step's `context` (what `step_context` reads back)."""
    return {**micro_batch, STEP_CONTEXT: context}


def step_context(micro_batch: dict[str, Any]) -> StepContext:
    """The context a micro-batch carries; an error if it carries none."""
    context = micro_batch.get(STEP_CONTEXT)
    if not isinstance(context, StepContext):
        raise KeyError(
            f"the loss got a micro-batch without its step's normalisers ({STEP_CONTEXT!r}): "
            f"compute_loss_for_module needs the whole mini-batch's counts. Pass "
            f"with_context(micro_batch, StepContext.of(mini_batch)) "
            f"(rllib_llm.learner.step_context)")
    return context


def positive_rows(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B,) 1.0 for a positive response: the packed correct flag (the verifier's verdict, or
    score > 0 where an env gives none; exchange/columns.py), else score > 0."""
    if CORRECT in batch:
        return batch[CORRECT].float()
    return (batch[SCORES] > 0).float()
