"""What a step hands its micro-batches' losses travels in the micro-batch (never on the learner),
and the total loss is one sum over a table of named terms."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rllib_llm import core
from rllib_llm.learner.learner import total_loss
from rllib_llm.learner.step_context import STEP_CONTEXT, StepContext, step_context, with_context
from rllib_llm.learner.step_metrics import MicroBatchMetrics, over_micro_batches


def test_the_context_holds_the_whole_mini_batchs_counts():
    mini = {"action_mask": torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]),
            "correct": torch.tensor([1.0, 0.0, 1.0]), "scores": torch.tensor([1.0, 0.0, 1.0])}
    context = StepContext.of(mini, value_pretraining=True)
    assert (float(context.counts.num_tokens), float(context.counts.num_seqs)) == (3.0, 2.0)
    assert (float(context.positive_tokens), float(context.negative_tokens)) == (2.0, 1.0)
    assert context.value_pretraining
    # Only normalisers go in: the metrics come back from each loss (MicroBatchLoss).
    assert {f.name for f in dataclasses.fields(context)} == {
        "counts", "positive_tokens", "negative_tokens", "value_pretraining"}
    micro = with_context({"action_mask": mini["action_mask"][:1]}, context)
    assert step_context(micro) is context and STEP_CONTEXT not in mini  # the input is left as is


def test_a_loss_without_its_steps_context_is_an_error_not_a_fallback():
    """Before, a missing context fell back to the micro-batch's own counts: the loss then
    depended on the micro-batch budget, silently."""
    with pytest.raises(KeyError, match="whole mini-batch's counts"):
        step_context({"action_mask": torch.ones(1, 2)})


def test_the_total_is_the_sum_of_coefficient_times_term_without_the_zero_ones():
    logp = torch.zeros(2, requires_grad=True)
    a, b = (logp + 1.0).sum(), (logp * 3.0).sum()
    nan = torch.tensor(float("nan"))
    total = total_loss({"a": (1.0, a), "b": (-0.5, b), "off": (0.0, nan)}, like=logp)
    assert float(total.detach()) == pytest.approx(2.0) and torch.isfinite(total)
    total.backward()
    torch.testing.assert_close(logp.grad, torch.full((2,), 1.0 - 1.5))
    zero = total_loss({"off": (0.0, nan)}, like=logp)  # nothing asked for: 0, on the graph
    assert float(zero) == 0.0 and zero.requires_grad


def test_a_steps_metrics_are_its_micro_batches_combined():
    """Terms add up, token means weigh by each micro-batch's share, `*_max` / `*_min` take the
    extreme: the values the whole mini-batch would report."""
    parts = [MicroBatchMetrics({"pg_loss": 0.25}, {"clipfrac": 0.5, "ratio_max": 1.5}, 0.75),
             MicroBatchMetrics({"pg_loss": 0.5}, {"clipfrac": 1.0, "ratio_max": 1.25}, 0.25)]
    assert over_micro_batches(parts) == {"pg_loss": 0.75, "clipfrac": 0.625, "ratio_max": 1.5}


def test_counts_are_the_same_aggregation_counts_core_uses():
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    context = StepContext.of({"action_mask": mask, "scores": torch.tensor([0.0, 2.0])})
    assert context.counts == core.agg_counts(mask)
