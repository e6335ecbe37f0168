"""The critic's loss and its explained variance (PPO with ``adv_estimator: gae``)."""

from __future__ import annotations

from torch import Tensor

from rllib_llm.core.aggregation import AggMode, agg_loss
from rllib_llm.core.masked import check_same_shape, compute_dtype, masked_var, zero_masked


def value_loss_per_token(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, *, value_clip: float | None
) -> Tensor:
    """½·max((V − R)², (V_clip − R)²), V_clip = V_old + clip(V − V_old, ±value_clip).

    Clipping the value update around the old prediction (PPO's value clipping) keeps a critic
    step from undoing the advantage estimates the actor is trained on; taking the max makes the
    clip pessimistic. Plain ½(V − R)² when ``value_clip`` is None.

    Returns:
        [B, T], 0 outside the mask, compute dtype.
    """
    check_same_shape(
        {"values": values, "old_values": old_values, "returns": returns, "mask": mask},
        "value_loss",
    )
    if value_clip is not None and not value_clip >= 0:
        raise ValueError(f"value_clip={value_clip!r} must be >= 0, or None for no clipping.")
    dtype = compute_dtype(values, old_values, returns)
    values = zero_masked(values, mask, dtype)
    returns = zero_masked(returns.detach(), mask, dtype)
    vf_losses1 = (values - returns).square()
    if value_clip is None:
        return zero_masked(0.5 * vf_losses1, mask, dtype)
    old_values = zero_masked(old_values.detach(), mask, dtype)
    values_clipped = old_values + (values - old_values).clamp(-value_clip, value_clip)
    vf_losses2 = (values_clipped - returns).square()
    return zero_masked(0.5 * vf_losses1.maximum(vf_losses2), mask, dtype)


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    value_clip: float | None,
    agg_mode: AggMode,
    norm_length: float | None = None,
    num_tokens: Tensor | float | None = None,
    num_seqs: Tensor | float | None = None,
) -> Tensor:
    """Aggregated critic loss: ``agg_loss(value_loss_per_token(...), mask, agg_mode)``.

    Args:
        values: [B, T] current critic values (gradient flows).
        old_values: [B, T] values at rollout time (detached).
        returns: [B, T] targets R (detached).
        mask: [B, T] binary mask.
        value_clip: clip range, or None.
        agg_mode: ``loss_agg_mode``.
        norm_length, num_tokens, num_seqs: passed to ``agg_loss`` (micro-batching).

    Returns:
        () scalar.
    """
    per_token = value_loss_per_token(values, old_values, returns, mask, value_clip=value_clip)
    return agg_loss(
        per_token, mask, agg_mode, norm_length=norm_length, num_tokens=num_tokens,
        num_seqs=num_seqs,
    )


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> Tensor:
    """1 − Var(R − V)/Var(R) over mask tokens: 1 for a perfect critic, ≤ 0 for a useless one.

    VC-PPO's value pretraining (arXiv:2503.01491) reports it. Returns 0 when Var(R) = 0.
    """
    dtype = compute_dtype(values, returns)
    values = zero_masked(values.detach(), mask, dtype)
    returns = zero_masked(returns.detach(), mask, dtype)
    var_returns = masked_var(returns, mask)
    ev = 1.0 - masked_var(returns - values, mask) / var_returns.clamp(min=1e-30)
    return ev.where(var_returns > 0, ev.new_zeros(()))


def value_clipfrac(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, *, value_clip: float
) -> Tensor:
    """Share of mask tokens whose value loss took the clipped branch: (V_clip − R)² > (V − R)²
    (verl's vf_clipfrac). How much ``value_clip`` holds the critic back."""
    dtype = compute_dtype(values, old_values, returns)
    m = mask.to(dtype)
    values, old_values, returns = (x.detach().to(dtype) for x in (values, old_values, returns))
    clipped = old_values + (values - old_values).clamp(-value_clip, value_clip)
    took_clip = ((clipped - returns).square() > (values - returns).square()).to(dtype)
    return (took_clip * m).sum() / m.sum().clamp(min=1)
