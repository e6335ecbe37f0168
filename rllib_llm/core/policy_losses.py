"""Per-token policy-gradient losses (``pg_variant``), one small registered function each.

``policy_loss`` is the entry point: it casts, detaches and zeroes the padding once, checks the
variant's parameters against the variant function's own keyword arguments (so the defaults live
in exactly one place, the signature), calls the variant and reduces its token-level metrics.
It returns the per-token loss [B, T], 0 outside the mask; reducing it is ``agg_loss``'s job.

Notation: ``r = exp(logp - old_logp)`` per token, ``A`` the advantage, ``sg`` = detach.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from rllib_llm.core.masked import (
    bool_mask,
    check_same_shape,
    compute_dtype,
    masked_max,
    masked_mean,
    masked_min,
    zero_masked,
)
from rllib_llm.core.registry import Registry

PgVariant = Literal["vanilla", "ppo", "tis", "topr", "cispo", "kimi15", "gspo"]
PG_VARIANTS: tuple[str, ...] = get_args(PgVariant)
ToprRatioLevel = Literal["token", "sequence"]
TOPR_RATIO_LEVELS: tuple[str, ...] = get_args(ToprRatioLevel)

# Metric names (returned by every variant unless noted).
RATIO_MEAN = "ratio_mean"
RATIO_MAX = "ratio_max"
RATIO_MIN = "ratio_min"
CLIPFRAC = "clipfrac"  # share of mask tokens whose weight clipping/truncation/masking changed
APPROX_KL = "approx_kl"  # masked mean of ½(logp − old_logp)²
DUAL_CLIPFRAC = "dual_clipfrac"  # ppo only: share where the dual clip −c·A bound the loss
CISPO_MASKFRAC = "cispo_maskfrac"  # cispo only: share zeroed by the unified mask
SEQ_RATIO_MEAN = "seq_ratio_mean"  # gspo and topr: token-weighted mean of the sequence ratio

# ``clipfrac`` counts a token whose weight a clip or truncation moved by more than this share of
# the clipped weight: |w − ρ| > CLIPFRAC_RTOL·w, i.e. ρ outside [lo·(1 − tol), hi·(1 + tol)] for
# bounds lo, hi. Comparing w with ρ exactly would count rounding noise wherever a bound is 1 (TOPR,
# TIS): a sampler and a learner that agree to float32 rounding give ratios of 1 ± 1e-6, and
# truncating those to 1 changes no gradient that matters. 1e-3 (a 0.1% change of the token's
# weight) sits three orders above float32 rounding and far below any clip range in use.
CLIPFRAC_RTOL = 1e-3

# A variant: (logp, old_logp, advantages, mask, *, scores, **params) -> (loss [B,T], token
# metrics {name: [B,T]}). Inputs arrive cast to the compute dtype, padding zeroed, old_logp and
# advantages detached; token metrics are reduced to masked means by ``policy_loss``.
PgVariantFn = Callable[..., tuple[Tensor, dict[str, Tensor]]]
PG_VARIANT_REGISTRY: Registry[PgVariantFn] = Registry("pg_variant", "register_pg_variant")


@dataclass(frozen=True)
class PgVariantInfo:
    """What a policy-gradient variant declares when it is registered; the learner reads it.

    Attributes:
        splits_by_correct: it splits responses into positive and negative ones by its
            ``scores``, which the learner then fills with the verifier's correct flag (1.0 or
            0.0) rather than the scores themselves, so that a format bonus on a wrong answer
            cannot make it "positive".
    """

    splits_by_correct: bool = False


def register_pg_variant(
    name: str, *, splits_by_correct: bool = False, override: bool = False
) -> Callable[[PgVariantFn], PgVariantFn]:
    """Decorator adding a policy-gradient variant under ``name``.

    The function's keyword-only arguments other than ``scores`` are the variant's parameters,
    and their defaults are the defaults; ``policy_loss`` rejects any other parameter.
    ``splits_by_correct`` declares how it reads ``scores`` (see ``PgVariantInfo``).
    """
    if not isinstance(splits_by_correct, bool):
        raise ValueError(f"register_pg_variant({name!r}) got splits_by_correct="
                         f"{splits_by_correct!r}; pass True or False.")
    return PG_VARIANT_REGISTRY.register(name, override=override,
                                        info=PgVariantInfo(splits_by_correct))


def pg_variant_info(name: str) -> PgVariantInfo:
    """What the variant registered as ``name`` declared (``ValueError`` if unknown)."""
    return PG_VARIANT_REGISTRY.info(name)


def pg_variant_params(pg_variant: str) -> dict[str, Any]:
    """The parameters ``pg_variant`` accepts, with their defaults (read from its signature)."""
    fn = PG_VARIANT_REGISTRY.get(pg_variant)
    return {
        p.name: p.default
        for p in inspect.signature(fn).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "scores"
    }


def _check_params(pg_variant: str, params: Mapping[str, Any]) -> None:
    valid = pg_variant_params(pg_variant)
    for name in params:
        if name not in valid:
            owners = [v for v in PG_VARIANT_REGISTRY.names() if name in pg_variant_params(v)]
            hint = f" It belongs to pg_variant {', '.join(map(repr, owners))}." if owners else ""
            raise ValueError(
                f"pg_variant={pg_variant!r} got unknown parameter {name!r}; its valid parameters "
                f"are {sorted(valid) or 'none'}.{hint} Remove it or change pg_variant."
            )


def policy_loss(
    pg_variant: PgVariant,
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    scores: Tensor | None = None,
    **params: Any,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token policy-gradient loss of ``pg_variant`` and its metrics.

    Args:
        pg_variant: a name in ``PG_VARIANT_REGISTRY`` (built-ins: ``PG_VARIANTS``).
        logp: [B, T] log π_θ of the sampled tokens (gradient flows).
        old_logp: [B, T] behaviour policy's log-probs (detached here).
        advantages: [B, T] processed advantages A (detached here).
        mask: [B, T] binary mask of the agent's tokens.
        scores: [B] verifier scores; TOPR needs them (it splits by score > 0).
        **params: the variant's parameters (``pg_variant_params(pg_variant)``).

    Returns:
        per_token_loss: [B, T], 0 outside the mask, compute dtype (see ``core.masked``).
        metrics: detached () tensors: ``ratio_mean``, ``ratio_max``, ``ratio_min`` of
            r = exp(logp − old_logp), ``clipfrac``, ``approx_kl``, plus variant extras; all
            masked over this batch's tokens, 0 when it has none.
    """
    fn = PG_VARIANT_REGISTRY.get(pg_variant)
    _check_params(pg_variant, params)
    check_same_shape(
        {"logp": logp, "old_logp": old_logp, "advantages": advantages, "mask": mask},
        "policy_loss",
    )
    dtype = compute_dtype(logp, old_logp, advantages)
    m = bool_mask(mask)  # (B, T)
    logp = zero_masked(logp, m, dtype)
    old_logp = zero_masked(old_logp.detach(), m, dtype)
    advantages = zero_masked(advantages.detach(), m, dtype)
    if scores is not None:
        scores = scores.detach().to(dtype)
    loss, token_metrics = fn(logp, old_logp, advantages, m.to(dtype), scores=scores, **params)
    loss = zero_masked(loss, m, dtype)
    metrics = _ratio_metrics(logp.detach(), old_logp, m)
    metrics[CLIPFRAC] = torch.zeros((), dtype=dtype, device=logp.device)
    metrics.update({name: masked_mean(v.detach(), m) for name, v in token_metrics.items()})
    return loss, metrics


def _ratio_metrics(logp: Tensor, old_logp: Tensor, mask: Tensor) -> dict[str, Tensor]:
    log_ratio = logp - old_logp  # (B, T), 0 on padding
    ratio = torch.exp(log_ratio)
    return {
        RATIO_MEAN: masked_mean(ratio, mask),
        RATIO_MAX: masked_max(ratio, mask),
        RATIO_MIN: masked_min(ratio, mask),
        APPROX_KL: masked_mean(0.5 * log_ratio.square(), mask),
    }


def _clip_bounds(pg_clip: float, low: float | None, high: float | None) -> tuple[float, float]:
    """(1 − ε_lo, 1 + ε_hi); DAPO's clip-higher sets ε_hi > ε_lo (e.g. 0.2 / 0.28)."""
    eps_low = pg_clip if low is None else low
    eps_high = pg_clip if high is None else high
    if eps_low < 0 or eps_high < 0:
        raise ValueError(
            f"pg_clip_low={eps_low!r} and pg_clip_high={eps_high!r} must be >= 0 (they are "
            f"distances from ratio 1); set non-negative pg_clip/pg_clip_low/pg_clip_high."
        )
    return 1.0 - eps_low, 1.0 + eps_high


def _weight_changed(weight: Tensor, raw: Tensor) -> Tensor:
    """Where clipping ``raw`` to ``weight`` changed it by more than ``CLIPFRAC_RTOL`` of the
    clipped weight (the definition of ``clipfrac``; see ``CLIPFRAC_RTOL``)."""
    return (weight - raw).abs() > CLIPFRAC_RTOL * weight.abs()


def _require_scores(scores: Tensor | None, pg_variant: str, mask: Tensor) -> Tensor:
    if scores is None or scores.shape != mask.shape[:1]:
        got = None if scores is None else tuple(scores.shape)
        raise ValueError(
            f"pg_variant={pg_variant!r} needs scores of shape [B]={tuple(mask.shape[:1])} (the "
            f"verifier score of each response), got {got}; pass scores=... to policy_loss."
        )
    return scores[:, None]  # (B, 1)


@register_pg_variant("vanilla")
def vanilla_loss(logp, old_logp, advantages, mask, *, scores=None):
    """REINFORCE: L = −A·logp (on-policy; the ratio is ignored)."""
    return -advantages * logp, {}


@register_pg_variant("ppo")
def ppo_loss(
    logp,
    old_logp,
    advantages,
    mask,
    *,
    scores=None,
    pg_clip: float = 0.2,
    pg_clip_low: float | None = None,
    pg_clip_high: float | None = None,
    dual_clip_loss: bool = False,
    dual_clip_c: float = 3.0,
):
    """PPO clipped surrogate (arXiv:1707.06347), clip-higher (DAPO, arXiv:2503.14476) and
    dual clip (arXiv:1912.09729).

    L = −min(r·A, clip(r, 1−ε_lo, 1+ε_hi)·A); with ``dual_clip_loss``, for A < 0 the loss is
    also capped at −c·A, so a huge ratio on a bad token cannot blow the update up. ROLL uses
    c = 1 + 2·pg_clip; we default to the dual-clip paper's c = 3.
    """
    if dual_clip_loss and not dual_clip_c > 1:
        raise ValueError(
            f"dual_clip_c={dual_clip_c!r} must be > 1 (the dual-clip bound −c·A must lie above "
            f"the clipped loss); use e.g. the paper's 3.0."
        )
    low, high = _clip_bounds(pg_clip, pg_clip_low, pg_clip_high)
    ratio = torch.exp(logp - old_logp)  # (B, T)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * ratio.clamp(low, high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    clipped = (pg_losses2 > pg_losses1) & _weight_changed(ratio.clamp(low, high), ratio)
    if not dual_clip_loss:
        return clip_pg_losses1, {CLIPFRAC: clipped.to(logp.dtype)}
    pg_losses3 = -advantages * dual_clip_c
    dual = (advantages < 0) & (pg_losses3 < clip_pg_losses1)
    loss = torch.where(advantages < 0, torch.minimum(clip_pg_losses1, pg_losses3), clip_pg_losses1)
    return loss, {CLIPFRAC: (clipped | dual).to(logp.dtype), DUAL_CLIPFRAC: dual.to(logp.dtype)}


@register_pg_variant("tis")
def tis_loss(
    logp,
    old_logp,
    advantages,
    mask,
    *,
    scores=None,
    tis_lower_bound: float = 0.0,
    tis_upper_bound: float = 1.0,
):
    """Truncated importance sampling: L = −sg(clip(r, lb, ub))·A·logp.

    The weight is a constant (sg): the gradient is the REINFORCE gradient reweighted, not the
    gradient of r·A, so a truncated token still gets signal.
    """
    if tis_lower_bound > tis_upper_bound:
        raise ValueError(
            f"tis_lower_bound={tis_lower_bound!r} must be <= tis_upper_bound={tis_upper_bound!r}; "
            f"swap or fix the bounds."
        )
    ratio = torch.exp(logp - old_logp).detach()
    weight = ratio.clamp(tis_lower_bound, tis_upper_bound)
    return -weight * advantages * logp, {CLIPFRAC: _weight_changed(weight, ratio).to(logp.dtype)}


@register_pg_variant("topr", splits_by_correct=True)
def topr_loss(
    logp,
    old_logp,
    advantages,
    mask,
    *,
    scores=None,
    topr_positive_weight: float = 1.0,
    topr_negative_weight: float = 1.0,
    topr_ratio_level: ToprRatioLevel = "token",
):
    """Tapered off-policy REINFORCE, TOPR (arXiv:2503.14286).

    Positive responses (score > 0) get plain SFT-like REINFORCE w₊·(−A·logp); the others are
    reweighted by the truncated ratio w₋·(−sg(clip(ρ, 0, 1))·A·logp), which keeps the gradient
    bounded without ever zeroing it. ρ = r per token, or with ``topr_ratio_level="sequence"`` the
    paper's trajectory ratio exp Σ_t mask·(logp − old_logp). The split is by the verifier score,
    not by the sign of A.

    ``clipfrac`` is the share of tokens whose weight the truncation changed: tokens of
    non-positive responses with ρ > 1 + ``CLIPFRAC_RTOL`` (positive responses are never
    truncated; ρ = 1 up to rounding counts 0).
    """
    if topr_ratio_level not in TOPR_RATIO_LEVELS:
        raise ValueError(
            f"topr_ratio_level={topr_ratio_level!r} is not valid; valid values: "
            f"{', '.join(map(repr, TOPR_RATIO_LEVELS))}."
        )
    positive = _require_scores(scores, "topr", mask) > 0  # (B, 1)
    log_ratio = (logp - old_logp).detach()  # (B, T)
    if topr_ratio_level == "sequence":
        log_ratio = (log_ratio * mask).sum(dim=-1, keepdim=True).expand_as(logp)  # (B, T)
    # clip(ρ, 0, 1) = exp(min(log ρ, 0)): never overflows for long sequences.
    weight = torch.exp(log_ratio.clamp(max=0.0))
    pos_loss = topr_positive_weight * (-advantages * logp)
    neg_loss = topr_negative_weight * (-weight * advantages * logp)
    # clipfrac: negative tokens whose ρ exceeded the bound 1 by more than CLIPFRAC_RTOL (so that
    # ρ = 1 up to rounding counts 0), compared in log space because ρ may overflow.
    truncated = ~positive & (log_ratio > math.log1p(CLIPFRAC_RTOL))
    metrics = {CLIPFRAC: truncated.to(logp.dtype)}
    if topr_ratio_level == "sequence":
        metrics[SEQ_RATIO_MEAN] = torch.exp(log_ratio)
    return torch.where(positive, pos_loss, neg_loss), metrics


@register_pg_variant("cispo")
def cispo_loss(
    logp,
    old_logp,
    advantages,
    mask,
    *,
    scores=None,
    cispo_epsilon_low: float = 0.1,
    cispo_epsilon_high: float = 0.1,
    cispo_use_unified_mask: bool = False,
):
    """CISPO, MiniMax-M1 (arXiv:2506.13585): L = −sg(clip(r, 1−ε_l, 1+ε_h))·A·logp.

    Clipping the importance weight instead of the update keeps the gradient of every token
    (PPO zeroes it for clipped tokens, which drops rare "reflection" tokens). The unified mask
    (off by default) zeroes the tokens PPO's trust region would drop: A > 0 with r > 1+ε_h and
    A < 0 with r < 1−ε_l.
    """
    ratio = torch.exp(logp - old_logp).detach()  # (B, T)
    low, high = 1.0 - cispo_epsilon_low, 1.0 + cispo_epsilon_high
    weight = ratio.clamp(low, high)
    loss = -weight * advantages * logp
    changed = _weight_changed(weight, ratio)
    metrics: dict[str, Tensor] = {}
    if cispo_use_unified_mask:
        dropped = ((advantages > 0) & (ratio > high)) | ((advantages < 0) & (ratio < low))
        loss = torch.where(dropped, torch.zeros_like(loss), loss)
        changed = changed | dropped
        metrics[CISPO_MASKFRAC] = dropped.to(logp.dtype)
    metrics[CLIPFRAC] = changed.to(logp.dtype)
    return loss, metrics


@register_pg_variant("kimi15")
def kimi15_loss(logp, old_logp, advantages, mask, *, scores=None, kimi15_tau: float = 0.1):
    """Kimi k1.5 (arXiv:2501.12599): L = −A·logp + (τ/2)·(logp − old_logp)².

    The squared log-ratio is a mirror-descent proximal term in place of clipping. Applied per
    token as in Kimi's and ROLL's code (the paper writes it per sequence).
    """
    return -advantages * logp + 0.5 * kimi15_tau * (logp - old_logp).square(), {}


@register_pg_variant("gspo")
def gspo_loss(
    logp,
    old_logp,
    advantages,
    mask,
    *,
    scores=None,
    pg_clip: float = 0.2,
    pg_clip_low: float | None = None,
    pg_clip_high: float | None = None,
):
    """GSPO (arXiv:2507.18071): PPO's clipped surrogate on the sequence ratio
    s = exp(mean over the response's mask of (logp − old_logp)).

    Every token of a response shares s, and the gradient flows through s (so each token gets
    s·A/|y| times its score function). Length-normalising the log-ratio keeps s near 1; the paper
    clips it tightly (ε_lo 3e-4, ε_hi 4e-4).
    """
    low, high = _clip_bounds(pg_clip, pg_clip_low, pg_clip_high)
    length = mask.sum(dim=-1, keepdim=True).clamp(min=1)  # (B, 1)
    log_seq_ratio = ((logp - old_logp) * mask).sum(dim=-1, keepdim=True) / length  # (B, 1)
    seq_ratio = torch.exp(log_seq_ratio).expand_as(logp)  # (B, T)
    pg_losses1 = -advantages * seq_ratio
    pg_losses2 = -advantages * seq_ratio.clamp(low, high)
    clipped = (pg_losses2 > pg_losses1) & _weight_changed(seq_ratio.clamp(low, high), seq_ratio)
    metrics = {CLIPFRAC: clipped.to(logp.dtype), SEQ_RATIO_MEAN: seq_ratio}
    return torch.maximum(pg_losses1, pg_losses2), metrics
