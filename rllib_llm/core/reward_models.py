"""Rewards from models: a classifier's or an LLM judge's score, and its weighting against the
verifier's reward (docs/ALGORITHMS.md, "Reward models and LLM judges").

- A sequence classifier with one label (a Bradley-Terry reward model, as TRL, OpenRLHF and verl
  read it) scores a response with its raw logit; with two labels (incorrect, correct) with the
  probability of label 1, softmax(logits)[1], a score in [0, 1] on the verifier's scale.
- A causal LM prompted as a judge scores with p(yes) / (p(yes) + p(no)) of its next token, the
  two answer tokens' probabilities renormalised over the pair. The softmax's normaliser cancels,
  so this is sigmoid(logit_yes - logit_no): any temperature-free function of the two logits.
- The reward trained on is `verifier_weight * verifier + model_weight * model` (TRL's
  GRPOTrainer: the weighted sum of its reward functions, `reward_weights`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def classifier_score(logits: Tensor) -> Tensor:
    """A sequence classifier's score of each row (B,) from its logits (B, num_labels).

    One label: the raw logit (a scalar reward model). Two labels: the probability of label 1
    (the "correct" class). Other label counts have no agreed meaning as a reward: refused.
    """
    if logits.dim() != 2 or logits.shape[-1] not in (1, 2):
        raise ValueError(
            f"classifier logits of shape {tuple(logits.shape)}: a reward classifier has 1 label "
            "(a scalar reward) or 2 (incorrect, correct), logits (B, 1) or (B, 2)")
    logits = logits.float()
    if logits.shape[-1] == 1:
        return logits[:, 0]
    return torch.softmax(logits, dim=-1)[:, 1]


def judge_score(yes_logits: Tensor, no_logits: Tensor) -> Tensor:
    """p(yes) / (p(yes) + p(no)) of a judge's next token (B,), from the two tokens' logits (B,):
    sigmoid(yes - no), since the softmax's normaliser cancels in the ratio."""
    return torch.sigmoid(yes_logits.float() - no_logits.float())


def combine_rewards(verifier: Tensor, model: Tensor, verifier_weight: float,
                    model_weight: float) -> Tensor:
    """The reward trained on (B,): verifier_weight * verifier + model_weight * model.

    Args:
        verifier: (B,) the verifier's reward of each response.
        model: (B,) the reward model's (or judge's) score of each response.
        verifier_weight, model_weight: finite, >= 0, not both 0.
    """
    for name, w in (("verifier_weight", verifier_weight), ("model_weight", model_weight)):
        if not (math.isfinite(w) and w >= 0):
            raise ValueError(f"{name}={w} must be a finite number >= 0")
    if verifier_weight == 0 and model_weight == 0:
        raise ValueError("verifier_weight and model_weight are both 0: no reward is left")
    if verifier.shape != model.shape:
        raise ValueError(f"verifier rewards {tuple(verifier.shape)} and model scores "
                         f"{tuple(model.shape)} differ in shape")
    return verifier.float() * verifier_weight + model.float() * model_weight
