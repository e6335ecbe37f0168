"""Returns and advantage estimators: discounted returns, GAE, and the critic-free group baselines.

Masks with holes (tool or environment tokens inside a multi-turn response) are handled by
skipping: "next" is the next *mask* token of the same row, the discount counts mask tokens only,
and values/rewards at positions outside the mask are ignored, so padding never leaks in. Outputs
are 0 outside the mask.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args

import torch
from torch import Tensor

from rllib_llm.core.masked import bool_mask, check_same_shape, compute_dtype, zero_masked
from rllib_llm.core.registry import Registry

GroupEstimator = Literal["grpo", "rloo", "reinforce_baseline"]
GROUP_ESTIMATORS: tuple[str, ...] = get_args(GroupEstimator)

GROUP_STD_EPS = 1e-6

# fn(grouped scores [G, K]) -> advantages [G, K]; K = group_size ≥ 2.
GroupEstimatorFn = Callable[[Tensor], Tensor]
GROUP_ESTIMATOR_REGISTRY: Registry[GroupEstimatorFn] = Registry(
    "estimator", "register_group_estimator"
)


def register_group_estimator(
    name: str, *, override: bool = False
) -> Callable[[GroupEstimatorFn], GroupEstimatorFn]:
    """Decorator adding a group baseline ``fn(scores [G, K]) -> advantages [G, K]``."""
    return GROUP_ESTIMATOR_REGISTRY.register(name, override=override)


def discounted_returns(rewards: Tensor, mask: Tensor, *, gamma: float) -> Tensor:
    """G_t = Σ_{k ≥ t} γ^{k−t} r_k over the mask tokens of each row (REINFORCE's return).

    Args:
        rewards: [B, T] per-token rewards (values outside the mask are ignored).
        mask: [B, T] binary mask; the discount steps over mask tokens only (holes skipped).
        gamma: discount factor γ.

    Returns:
        [B, T] returns, 0 outside the mask, compute dtype.
    """
    check_same_shape({"rewards": rewards, "mask": mask}, "discounted_returns")
    dtype = compute_dtype(rewards)
    m = bool_mask(mask)  # (B, T)
    rewards = zero_masked(rewards, m, dtype)
    next_return = torch.zeros(rewards.shape[0], dtype=dtype, device=rewards.device)  # (B,)
    returns = []
    for t in reversed(range(rewards.shape[1])):
        g_t = rewards[:, t] + gamma * next_return
        next_return = torch.where(m[:, t], g_t, next_return)  # holes carry the return through
        returns.append(torch.where(m[:, t], g_t, torch.zeros_like(g_t)))
    return torch.stack(returns[::-1], dim=1)  # (B, T)


def gae(
    rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float, lambd: float | Tensor
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman et al., arXiv:1506.02438).

    δ_t = r_t + γ·V_next − V_t;  Â_t = δ_t + γλ·Â_next;  returns = Â + V, where "next" is the
    next mask token of the same row and V_next = Â_next = 0 after the last one. A per-row λ
    (length-adaptive GAE, VAPO arXiv:2504.05118) is a [B] tensor.

    Args:
        rewards: [B, T] per-token rewards.
        values: [B, T] critic values V (detached here: GAE targets are constants).
        mask: [B, T] binary mask.
        gamma: discount γ.
        lambd: λ, a float or a [B] tensor.

    Returns:
        (advantages [B, T], returns [B, T]), 0 outside the mask, compute dtype.
    """
    check_same_shape({"rewards": rewards, "values": values, "mask": mask}, "gae")
    dtype = compute_dtype(rewards, values)
    m = bool_mask(mask)  # (B, T)
    rewards = zero_masked(rewards, m, dtype)
    values = zero_masked(values.detach(), m, dtype)
    lam = _per_row(lambd, rewards.shape[0], dtype, rewards.device, "lambd")  # (B,)
    next_value = torch.zeros(rewards.shape[0], dtype=dtype, device=rewards.device)  # (B,)
    lastgaelam = torch.zeros_like(next_value)  # (B,), cleanrl's name for Â_next
    advantages = []
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv_t = delta + gamma * lam * lastgaelam
        # A hole leaves next_value and lastgaelam untouched, so the recursion skips it.
        next_value = torch.where(m[:, t], values[:, t], next_value)
        lastgaelam = torch.where(m[:, t], adv_t, lastgaelam)
        advantages.append(torch.where(m[:, t], adv_t, torch.zeros_like(adv_t)))
    advantages = torch.stack(advantages[::-1], dim=1)  # (B, T)
    return advantages, advantages + values


def _per_row(x: float | Tensor, batch: int, dtype, device, name: str) -> Tensor:
    x = torch.as_tensor(x, dtype=dtype, device=device)
    if x.dim() == 0:
        return x.expand(batch)
    if x.shape != (batch,):
        raise ValueError(
            f"{name} has shape {tuple(x.shape)}; it must be a float or a [B]=[{batch}] tensor "
            f"(one value per response)."
        )
    return x


def length_adaptive_lambda(lengths: Tensor, alpha: float) -> Tensor:
    """VAPO's length-adaptive GAE λ (arXiv:2504.05118): λ_b = clamp(1 − 1/(α·l_b), 0, 1).

    Long responses get λ near 1 (low bias over long horizons), short ones a smaller λ (lower
    variance). The VAPO paper uses α = 0.05.

    Args:
        lengths: [B] number of mask tokens of each response (int or float).
        alpha: α > 0.

    Returns:
        [B] λ in float32 (float64 for float64 lengths); 0 for empty responses.
    """
    if not alpha > 0:
        raise ValueError(
            f"length_adaptive_alpha={alpha!r} must be > 0 (VAPO uses 0.05), or None to turn "
            f"length-adaptive GAE off."
        )
    lengths = lengths.to(compute_dtype(lengths))
    scaled = alpha * lengths
    lam = torch.where(scaled > 0, 1.0 - 1.0 / scaled.clamp(min=1e-30), torch.zeros_like(scaled))
    return lam.clamp(0.0, 1.0)


def group_advantages(scores: Tensor, group_size: int, estimator: GroupEstimator) -> Tensor:
    """Critic-free advantage of each response against its group of ``group_size`` siblings.

    Groups are consecutive: rows [g·K, (g+1)·K) answer the same prompt (ROLL's
    ``num_return_sequences_in_group``).

    Args:
        scores: [B] response scores, B a multiple of ``group_size``.
        group_size: K ≥ 2.
        estimator: a name in ``GROUP_ESTIMATOR_REGISTRY`` (built-ins: ``GROUP_ESTIMATORS``).

    Returns:
        [B] advantages in the compute dtype.
    """
    fn = GROUP_ESTIMATOR_REGISTRY.get(estimator)
    grouped = group_view(scores, group_size, "group_advantages")  # (G, K)
    return fn(grouped).reshape(-1)  # (B,)


def episode_last_rows(episode_index: Tensor) -> Tensor:
    """The last row of each episode: [E] indices into ``episode_index`` [B].

    An episode may span several rows (an agent that rewrote its history trains each sequence as
    a row, all with the episode's reward); its rows are consecutive and episodes are numbered
    0, 1, ... in row order, so scores taken at these rows count every episode once.
    """
    if episode_index.dim() != 1 or episode_index.numel() == 0:
        raise ValueError(
            f"episode_index must be [B] (one per row), got {tuple(episode_index.shape)}.")
    episodes = torch.unique_consecutive(episode_index)  # (E,)
    if not torch.equal(episodes, torch.arange(len(episodes), device=episodes.device)):
        raise ValueError(
            "episode_index must number episodes 0, 1, ... in row order with each episode's rows "
            f"consecutive; got {episode_index.tolist()[:12]}."
        )
    is_last = torch.ones_like(episode_index, dtype=torch.bool)  # (B,)
    is_last[:-1] = episode_index[1:] != episode_index[:-1]
    return is_last.nonzero().squeeze(-1)  # (E,)


def group_view(scores: Tensor, group_size: int, fn: str) -> Tensor:
    """``scores`` [B] as float [G, K] groups, checking K ≥ 2 and that K divides B."""
    if scores.dim() != 1:
        raise ValueError(f"{fn}: scores must be [B] (one per response), got {tuple(scores.shape)}.")
    if not (isinstance(group_size, int) and group_size >= 2):
        raise ValueError(
            f"group_size={group_size!r} must be an int >= 2 for group baselines "
            f"(num_return_sequences_in_group responses per prompt); sample at least 2."
        )
    if scores.shape[0] % group_size:
        raise ValueError(
            f"{fn}: batch of {scores.shape[0]} responses is not a multiple of "
            f"group_size={group_size}; keep whole groups together in a batch."
        )
    return scores.to(compute_dtype(scores)).reshape(-1, group_size)  # (G, K)


def group_std(grouped: Tensor) -> Tensor:
    """Unbiased std of each group [G, K] -> [G, 1] (K ≥ 2)."""
    return grouped.std(dim=-1, keepdim=True, correction=1)


@register_group_estimator("grpo")
def grpo_advantages(grouped: Tensor) -> Tensor:
    """GRPO (DeepSeekMath, arXiv:2402.03300): (score − group mean)/(group std + 1e-6)."""
    mean = grouped.mean(dim=-1, keepdim=True)  # (G, 1)
    return (grouped - mean) / (group_std(grouped) + GROUP_STD_EPS)


@register_group_estimator("rloo")
def rloo_advantages(grouped: Tensor) -> Tensor:
    """RLOO (arXiv:2402.14740): score − mean of the other K−1 = K/(K−1)·(score − group mean)."""
    k = grouped.shape[-1]
    return k / (k - 1) * (grouped - grouped.mean(dim=-1, keepdim=True))


@register_group_estimator("reinforce_baseline")
def reinforce_baseline_advantages(grouped: Tensor) -> Tensor:
    """REINFORCE++-baseline (arXiv:2501.03262) / Dr. GRPO (arXiv:2503.20783): score − group
    mean, without GRPO's division by the std (which up-weights near-unanimous groups)."""
    return grouped - grouped.mean(dim=-1, keepdim=True)
