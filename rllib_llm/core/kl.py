"""KL estimators between the policy and the frozen reference, and the adaptive KL coefficient.

Per-token estimators of KL(π_θ ‖ π_ref) from the log-probs of the sampled tokens
(Schulman, "Approximating KL divergence", http://joschu.net/blog/kl-approx.html), with
d = logp − ref_logp:

- ``kl`` / ``k1``: d (unbiased, high variance, can be negative);
- ``abs``: |d|;
- ``mse`` / ``k2``: ½d² (biased, low variance);
- ``k3`` / ``low_var_kl``: exp(−d) + d − 1 (unbiased, ≥ 0), clamped to [−10, 10];
- ``full``: the exact KL over the vocabulary from the logits (``kl_full``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args

import torch
from torch import Tensor

from rllib_llm.core.masked import check_same_shape, compute_dtype
from rllib_llm.core.registry import Registry

KlKind = Literal["kl", "k1", "abs", "mse", "k2", "k3", "low_var_kl"]
KL_KINDS: tuple[str, ...] = get_args(KlKind)
# ``kl_penalty`` may also be "full", which needs the logits rather than the sampled log-probs.
KlPenalty = Literal["kl", "k1", "abs", "mse", "k2", "k3", "low_var_kl", "full"]
KL_PENALTIES: tuple[str, ...] = get_args(KlPenalty)

KlEstimatorFn = Callable[[Tensor], Tensor]  # d = logp − ref_logp [B, T] -> kl [B, T]
KL_ESTIMATOR_REGISTRY: Registry[KlEstimatorFn] = Registry("kind", "register_kl_estimator")

K3_CLAMP = 10.0


def register_kl_estimator(
    name: str, *aliases: str, override: bool = False
) -> Callable[[KlEstimatorFn], KlEstimatorFn]:
    """Decorator adding a per-token KL estimator ``fn(d) -> kl`` with d = logp − ref_logp."""
    return KL_ESTIMATOR_REGISTRY.register(name, *aliases, override=override)


@register_kl_estimator("k1", "kl")
def kl_k1(d: Tensor) -> Tensor:
    """k1 = d: unbiased, but half the samples are negative."""
    return d


@register_kl_estimator("abs")
def kl_abs(d: Tensor) -> Tensor:
    """|d|."""
    return d.abs()


@register_kl_estimator("k2", "mse")
def kl_k2(d: Tensor) -> Tensor:
    """k2 = ½d²: biased, low variance; its gradient is the gradient of the true KL on-policy."""
    return 0.5 * d.square()


@register_kl_estimator("k3", "low_var_kl")
def kl_k3(d: Tensor) -> Tensor:
    """k3 = exp(−d) + d − 1, clamped to [−10, 10].

    d is first clamped to [−20, 20]: for |d| ≥ 20 the value is ≥ 19 and the final clamp gives
    10 either way, but without it exp(−d) overflows to inf and the clamp's zero gradient times
    inf is NaN.
    """
    d = d.clamp(-20.0, 20.0)
    return (torch.exp(-d) + d - 1).clamp(-K3_CLAMP, K3_CLAMP)


def kl_estimate(logp: Tensor, ref_logp: Tensor, kind: KlKind) -> Tensor:
    """Per-token KL estimate of ``kind`` (see the module docstring).

    Args:
        logp: [B, T] log-probs of the sampled tokens under the policy (gradient may flow).
        ref_logp: [B, T] log-probs under the reference.
        kind: a name in ``KL_ESTIMATOR_REGISTRY`` (built-ins: ``KL_KINDS``).

    Returns:
        [B, T] in the compute dtype; not masked (mask it when you aggregate).
    """
    if kind == "full":
        raise ValueError(
            "kl_loss_kind='full' is the exact KL over the vocabulary and needs logits, not "
            "log-probs of sampled tokens; call kl_full(logits, ref_logits) instead."
        )
    fn = KL_ESTIMATOR_REGISTRY.get(kind)
    check_same_shape({"logp": logp, "ref_logp": ref_logp}, "kl_estimate")
    dtype = compute_dtype(logp, ref_logp)
    return fn(logp.to(dtype) - ref_logp.to(dtype))


def kl_full(logits: Tensor, ref_logits: Tensor) -> Tensor:
    """Exact KL(π ‖ π_ref) = Σ_v π(v)(log π(v) − log π_ref(v)) per position.

    Args:
        logits: [B, T, V] policy logits.
        ref_logits: [B, T, V] reference logits.

    Returns:
        [B, T] in the compute dtype. Vocabulary entries with π(v) = 0 (logit −inf) add 0.
    """
    check_same_shape({"logits": logits, "ref_logits": ref_logits}, "kl_full")
    dtype = compute_dtype(logits, ref_logits)
    logp = torch.log_softmax(logits.to(dtype), dim=-1)  # (B, T, V)
    ref_logp = torch.log_softmax(ref_logits.to(dtype), dim=-1)  # (B, T, V)
    p = logp.exp()
    # 0·log 0 = 0: where π(v) = 0 the difference may be −inf − x, and 0·inf would be NaN.
    terms = torch.where(p > 0, p * (logp - ref_logp), torch.zeros_like(p))
    return terms.sum(dim=-1)


class AdaptiveKLController:
    """The KL-in-reward coefficient β (Ziegler et al., arXiv:1909.08593, §2.2).

    Fixed at ``init_kl_coef`` when ``target_kl`` is None; otherwise after each step
    β ← β·(1 + clip(KL/target_kl − 1, −0.2, 0.2)·n_steps/kl_horizon): β grows when the policy
    drifts past the target and shrinks when it stays closer, at most 20 % per horizon.

    Args:
        init_kl_coef: initial β (0.2).
        target_kl: the KL to hold, or None for a fixed β.
        kl_horizon: steps over which β may change by the full ±20 % (10000).
    """

    def __init__(
        self, init_kl_coef: float = 0.2, target_kl: float | None = None, kl_horizon: int = 10000
    ) -> None:
        if target_kl is not None and not target_kl > 0:
            raise ValueError(
                f"target_kl={target_kl!r} must be > 0, or None for a fixed KL coefficient."
            )
        if not kl_horizon > 0:
            raise ValueError(f"kl_horizon={kl_horizon!r} must be > 0 (e.g. the default 10000).")
        self.value = float(init_kl_coef)
        self.target_kl = target_kl
        self.kl_horizon = kl_horizon

    def update(self, current_kl: float | Tensor, n_steps: int) -> float:
        """Adapt β to the observed ``current_kl`` over ``n_steps`` samples; returns the new β."""
        if self.target_kl is not None:
            error = min(max(float(current_kl) / self.target_kl - 1.0, -0.2), 0.2)
            self.value *= 1.0 + error * n_steps / self.kl_horizon
        return self.value

    def __repr__(self) -> str:
        return (
            f"AdaptiveKLController(value={self.value}, target_kl={self.target_kl}, "
            f"kl_horizon={self.kl_horizon})"
        )
