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

# Metric names.
ROLLOUT_IS_WEIGHT_MEAN = "rollout_is_weight_mean"
ROLLOUT_IS_TRUNCATED_FRAC = "rollout_is_truncated_frac"
ROLLOUT_KL_K1 = "rollout_kl_k1"
ROLLOUT_KL_K3 = "rollout_kl_k3"


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
