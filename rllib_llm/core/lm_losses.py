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
