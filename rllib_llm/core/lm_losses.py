"""Auxiliary language-modelling losses added to the actor loss."""

from __future__ import annotations

import torch
from torch import Tensor

from rllib_llm.core.masked import (
    bool_mask,
    check_same_shape,
    compute_dtype,
    safe_divide,
    zero_masked,
)


def positive_nll_loss(
    logp: Tensor, mask: Tensor, scores: Tensor, *, num_tokens: Tensor | float | None = None
) -> Tensor:
    """VAPO's positive-example LM loss (arXiv:2504.05118):
    −Σ_{score>0} Σ_t mask·logp / Σ_{score>0} Σ_t mask.

    An NLL on the batch's correct responses, token-mean over them; it exploits the positive
    samples more than the policy gradient alone. 0 when no response is positive.

    Args:
        logp: [B, T] log π_θ of the sampled tokens (gradient flows).
        mask: [B, T] binary mask.
        scores: [B] verifier scores.
        num_tokens: the positive responses' mask tokens of the whole mini-batch, when ``logp``
            is one micro-batch of it (as ``agg_loss``'s ``num_tokens``). Default: this batch's.

    Returns:
        () scalar in the compute dtype.
    """
    check_same_shape({"logp": logp, "mask": mask}, "positive_nll_loss")
    if scores.shape != logp.shape[:1]:
        raise ValueError(
            f"positive_nll_loss: scores has shape {tuple(scores.shape)}, expected "
            f"[B]={tuple(logp.shape[:1])} (one score per response)."
        )
    positive_mask = bool_mask(mask) & (scores[:, None] > 0)  # (B, T)
    dtype = compute_dtype(logp)
    total = zero_masked(logp, positive_mask, dtype).sum()
    count = positive_mask.to(dtype).sum() if num_tokens is None else num_tokens
    return -safe_divide(total, torch.as_tensor(count, dtype=dtype, device=logp.device))


def roll_topr_terms(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, positive: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """ROLL's extra TOPR loss terms (`postive_loss_coef`, `use_topr_neg_loss_coef` in ROLL's
    actor_pg_worker), per token, with the masks to aggregate each over.

    - positive term over responses with positive = 1: −logp·A (REINFORCE, no ratio);
    - negative term over the rest: −sg(clip(r, 0, 1))·logp·A, r = exp(logp − old_logp).

    ROLL adds `coef · agg_loss(term, mask_of_term, loss_agg_mode)` of each to the total loss,
    outside `rl_loss_coef`. Reducing is the caller's job (`agg_loss`).

    Args:
        logp: [B, T] log π_θ of the sampled tokens (gradient flows).
        old_logp: [B, T] behaviour log-probs (detached here).
        advantages: [B, T] advantages (detached here).
        mask: [B, T] binary mask of the agent's tokens.
        positive: [B] 1 for a positive response, 0 otherwise (ROLL: score > 0; the learner
            passes the verifier's correct flag, see `RLVRLearner`).

    Returns:
        positive_loss [B, T], positive_mask [B, T], negative_loss [B, T], negative_mask [B, T];
        losses are 0 outside their mask.
    """
    check_same_shape(
        {"logp": logp, "old_logp": old_logp, "advantages": advantages, "mask": mask},
        "roll_topr_terms",
    )
    if positive.shape != logp.shape[:1]:
        raise ValueError(
            f"roll_topr_terms: positive has shape {tuple(positive.shape)}, expected "
            f"[B]={tuple(logp.shape[:1])} (one flag per response)."
        )
    dtype = compute_dtype(logp, old_logp, advantages)
    m = bool_mask(mask)  # (B, T)
    is_positive = (positive > 0)[:, None]  # (B, 1)
    positive_mask, negative_mask = m & is_positive, m & ~is_positive  # (B, T) each
    advantages = advantages.detach().to(dtype)
    log_ratio = (logp.detach() - old_logp.detach()).to(dtype)
    # clip(r, 0, 1) = exp(min(log r, 0)): never overflows.
    clipped_ratio = torch.exp(log_ratio.clamp(max=0.0))
    positive_loss = zero_masked(-logp * advantages, positive_mask, dtype)
    negative_loss = zero_masked(-clipped_ratio * logp * advantages, negative_mask, dtype)
    return positive_loss, positive_mask.to(dtype), negative_loss, negative_mask.to(dtype)
