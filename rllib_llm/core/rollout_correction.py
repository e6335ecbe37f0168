"""Train/inference mismatch: truncated importance weights on the sampler's log-probs.

A fast sampler (vLLM) and the learner compute log-probs with different kernels, so even with
identical weights the sampler's policy pi_rollout differs slightly from the learner's pi_old.
The learner recomputes `old_logp` itself and can reweight each token's policy-gradient loss by
the truncated ratio pi_old / pi_rollout (Yao et al. 2025, "Your Efficient RL Framework Secretly
Brings You Off-Policy RL Training", https://fengyao.notion.site/off-policy-rl; verl's
`rollout_is`):

    token:     w_t = min(exp(old_logp_t - rollout_logp_t), C)
    sequence:  w_t = min(exp(sum_s mask_s * (old_logp_s - rollout_logp_s)), C)   for every t

with C = `threshold`. The weights are constants of the loss (no gradient).

Rejection (masked importance sampling: verl's `rollout_rs`, the idea of OpenRLHF's `icepop`
and `seq-mask-tis` and of TRL's masked IS) drops instead of reweighting: a token, or a whole
response, whose ratio leaves [lower, upper] leaves the loss mask. The ratio is the token's, the
response's product (`sequence`), or the response's geometric mean (`geometric`:
exp(mean_s log ratio_s), comparable across lengths). It combines with the truncated weights
above (geometric rejection with token weights is the seq-mask-tis scheme).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from rllib_llm.core.masked import (
    bool_mask,
    check_same_shape,
    compute_dtype,
    masked_mean,
    zero_masked,
)

RolloutIsLevel = Literal["token", "sequence"]
ROLLOUT_IS_LEVELS: tuple[RolloutIsLevel, ...] = ("token", "sequence")
RolloutRsLevel = Literal["token", "sequence", "geometric"]
ROLLOUT_RS_LEVELS: tuple[RolloutRsLevel, ...] = ("token", "sequence", "geometric")

# Metric names.
ROLLOUT_IS_WEIGHT_MEAN = "rollout_is_weight_mean"
ROLLOUT_IS_TRUNCATED_FRAC = "rollout_is_truncated_frac"
ROLLOUT_KL_K1 = "rollout_kl_k1"
ROLLOUT_KL_K3 = "rollout_kl_k3"
ROLLOUT_RS_MASKED_FRAC = "rollout_rs_masked_frac"  # share of mask tokens rejected
ROLLOUT_RS_SEQ_MASKED_FRAC = "rollout_rs_seq_masked_frac"  # share of responses with a rejection


def rollout_is_weights(
    old_logp: Tensor,
    rollout_logp: Tensor,
    mask: Tensor,
    *,
    level: RolloutIsLevel,
    threshold: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Truncated importance weights pi_old / pi_rollout (see the module docstring).

    Args:
        old_logp: [B, T] log-probs of the sampled tokens under the learner's model.
        rollout_logp: [B, T] log-probs the sampler reported for them.
        mask: [B, T] binary mask of the agent's tokens.
        level: "token" (one ratio per token) or "sequence" (the product over the response).
        threshold: C > 0, the cap of every weight (verl's `rollout_is_threshold`, e.g. 2.0).

    Returns:
        weights [B, T] in the compute dtype, detached, 0 outside the mask; and metrics
        {ROLLOUT_IS_WEIGHT_MEAN, ROLLOUT_IS_TRUNCATED_FRAC} over mask tokens.
    """
    check_same_shape({"old_logp": old_logp, "rollout_logp": rollout_logp, "mask": mask},
                     "rollout_is_weights")
    if level not in ROLLOUT_IS_LEVELS:
        raise ValueError(
            f"rollout_is_weights: level={level!r} is not one of {list(ROLLOUT_IS_LEVELS)}"
        )
    if not threshold > 0:
        raise ValueError(f"rollout_is_weights: threshold={threshold} must be > 0")
    dtype = compute_dtype(old_logp, rollout_logp)
    log_ratio = zero_masked(old_logp.detach() - rollout_logp.detach(), mask, dtype)  # (B, T)
    if level == "sequence":
        log_ratio = log_ratio.sum(-1, keepdim=True).expand_as(log_ratio)  # (B, T)
    # Cap in log space: exp of a long response's summed log-ratio could overflow.
    log_cap = math.log(threshold)
    weights = zero_masked(log_ratio.clamp(max=log_cap).exp(), mask, dtype)
    metrics = {
        ROLLOUT_IS_WEIGHT_MEAN: masked_mean(weights, mask),
        ROLLOUT_IS_TRUNCATED_FRAC: masked_mean((log_ratio > log_cap).to(dtype), mask),
    }
    return weights, metrics


def rollout_mismatch_kl(old_logp: Tensor, rollout_logp: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """KL(pi_rollout || pi_old) over the sampled tokens, two estimators, as metrics.

    The tokens were drawn from pi_rollout, so with r = old_logp - rollout_logp:
    k1 = masked mean of -r (unbiased, may be negative), k3 = masked mean of exp(r) - 1 - r
    (unbiased, >= 0; Schulman, http://joschu.net/blog/kl-approx.html).

    Returns:
        {ROLLOUT_KL_K1: () tensor, ROLLOUT_KL_K3: () tensor}, both 0 without mask tokens.
    """
    check_same_shape({"old_logp": old_logp, "rollout_logp": rollout_logp, "mask": mask},
                     "rollout_mismatch_kl")
    dtype = compute_dtype(old_logp, rollout_logp)
    r = zero_masked(old_logp.detach() - rollout_logp.detach(), mask, dtype)  # (B, T)
    m = bool_mask(mask)
    return {
        ROLLOUT_KL_K1: masked_mean(-r, m),
        ROLLOUT_KL_K3: masked_mean(torch.expm1(r) - r, m),
    }


def rollout_rejection_mask(
    old_logp: Tensor,
    rollout_logp: Tensor,
    mask: Tensor,
    *,
    level: RolloutRsLevel,
    upper: float,
    lower: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Which tokens stay in the loss: those whose ratio pi_old / pi_rollout lies in [lower, upper].

    Args:
        old_logp: [B, T] log-probs of the sampled tokens under the learner's model.
        rollout_logp: [B, T] log-probs the sampler reported for them.
        mask: [B, T] binary mask of the agent's tokens.
        level: "token" (each token's ratio), "sequence" (the product over the response) or
            "geometric" (the geometric mean over the response); the last two keep or drop a
            response whole.
        upper: the largest ratio kept, > 1 (verl's `rollout_rs_threshold`).
        lower: the smallest ratio kept, in (0, 1); None = 1 / upper (verl's default).

    Returns:
        keep [B, T] in {0, 1}, the compute dtype, 0 outside the mask (multiply the loss mask by
        it); and metrics {ROLLOUT_RS_MASKED_FRAC (share of mask tokens dropped),
        ROLLOUT_RS_SEQ_MASKED_FRAC (share of responses with at least one token dropped, among
        those with mask tokens)}. Compared in log space: a long response's product neither
        overflows nor underflows.
    """
    check_same_shape({"old_logp": old_logp, "rollout_logp": rollout_logp, "mask": mask},
                     "rollout_rejection_mask")
    if level not in ROLLOUT_RS_LEVELS:
        raise ValueError(
            f"rollout_rejection_mask: level={level!r} is not one of {list(ROLLOUT_RS_LEVELS)}"
        )
    lower = 1.0 / upper if lower is None else lower
    if not upper > 1:
        raise ValueError(f"rollout_rejection_mask: upper={upper} must be > 1")
    if not 0 < lower < 1:
        raise ValueError(f"rollout_rejection_mask: lower={lower} must be in (0, 1)")
    dtype = compute_dtype(old_logp, rollout_logp)
    m = bool_mask(mask)
    log_ratio = zero_masked(old_logp.detach() - rollout_logp.detach(), mask, dtype)  # (B, T)
    if level == "sequence":
        log_ratio = log_ratio.sum(-1, keepdim=True).expand_as(log_ratio)
    elif level == "geometric":
        length = m.sum(-1, keepdim=True).clamp(min=1).to(dtype)
        log_ratio = (log_ratio.sum(-1, keepdim=True) / length).expand_as(log_ratio)
    inside = (log_ratio >= math.log(lower)) & (log_ratio <= math.log(upper))
    keep = (inside & m).to(dtype)
    dropped = m & ~inside
    has_tokens = m.any(-1)
    metrics = {
        ROLLOUT_RS_MASKED_FRAC: masked_mean(dropped.to(dtype), m),
        ROLLOUT_RS_SEQ_MASKED_FRAC: (dropped.any(-1) & has_tokens).to(dtype).sum()
        / has_tokens.sum().clamp(min=1).to(dtype),
    }
    return keep, metrics
