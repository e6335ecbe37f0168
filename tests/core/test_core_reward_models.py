"""The reward-model math (core/reward_models.py) against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from rllib_llm.core import classifier_score, combine_rewards, judge_score


def test_classifier_score_is_the_logit_of_one_label_and_p_label_1_of_two():
    # One label: the raw logit (a scalar reward model).
    assert classifier_score(torch.tensor([[0.5], [-2.0]])).tolist() == [0.5, -2.0]
    # Two labels: softmax(l)[1] = e^l1 / (e^l0 + e^l1); (0, ln 3) -> 3/4, (ln 4, 0) -> 1/5.
    got = classifier_score(torch.tensor([[0.0, math.log(3.0)], [math.log(4.0), 0.0]]))
    torch.testing.assert_close(got, torch.tensor([0.75, 0.2]))


def test_judge_score_is_p_yes_over_p_yes_plus_no():
    # Logits (yes, no) = (ln 3, 0): p(yes) / (p(yes) + p(no)) = 3 / (3 + 1), whatever the other
    # tokens' logits (the softmax's normaliser cancels); (0, 0) -> 1/2; (0, ln 9) -> 1/10.
    got = judge_score(torch.tensor([math.log(3.0), 0.0, 0.0]),
                      torch.tensor([0.0, 0.0, math.log(9.0)]))
    torch.testing.assert_close(got, torch.tensor([0.75, 0.5, 0.1]))
    # Against the full softmax over a vocabulary: tokens 1 (yes) and 3 (no) of 5.
    logits = torch.tensor([[2.0, 0.3, -1.0, 1.1, 4.0]])
    p = torch.softmax(logits, -1)[0]
    assert judge_score(logits[:, 1], logits[:, 3]).item() == pytest.approx(
        float(p[1] / (p[1] + p[3])), rel=1e-6)


def test_combine_rewards_is_the_weighted_sum():
    verifier = torch.tensor([1.0, 0.0, 1.0])
    model = torch.tensor([0.25, 0.5, 0.9])
    # 0.5 * v + 2 * m: 0.5 + 0.5, 0 + 1, 0.5 + 1.8.
    torch.testing.assert_close(combine_rewards(verifier, model, 0.5, 2.0),
                               torch.tensor([1.0, 1.0, 2.3]))
    torch.testing.assert_close(combine_rewards(verifier, model, 0.0, 1.0), model)
    torch.testing.assert_close(combine_rewards(verifier, model, 1.0, 0.0), verifier)


@pytest.mark.parametrize("weights, match", [((0.0, 0.0), "both 0"), ((-1.0, 1.0), ">= 0"),
                                            ((1.0, math.nan), "finite")])
def test_combine_rewards_refuses_bad_weights(weights, match):
    with pytest.raises(ValueError, match=match):
        combine_rewards(torch.zeros(2), torch.zeros(2), *weights)


def test_combine_rewards_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="shape"):
        combine_rewards(torch.zeros(2), torch.zeros(3), 1.0, 1.0)


def test_classifier_score_refuses_other_label_counts():
    with pytest.raises(ValueError, match="1 label"):
        classifier_score(torch.zeros(2, 3))
