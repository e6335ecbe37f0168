"""Reward normalisation (``norm_mean_type`` / ``norm_std_type``) and advantage whitening.

ROLL's ``reward_norm`` / ``reward_shift`` / ``reward_scale`` map onto the two types:
shift only = (``mean_type``, None); scale only = (None, ``std_type``); both = the same type twice.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import Tensor

from rllib_llm.core.advantages import group_view
from rllib_llm.core.masked import compute_dtype, masked_mean, masked_var, zero_masked

NormType = Literal["batch", "group", "running"]
# None (no shift / no scale) is valid too; ``NORM_TYPES`` lists it for config validation.
NORM_TYPES: tuple[str | None, ...] = (*get_args(NormType), None)

REWARD_STD_EPS = 1e-6
WHITEN_EPS = 1e-8


class RunningMeanStd:
    """Mean and unbiased variance of every score seen so far (Chan et al.'s parallel update).

    Kept in float64 Python numbers so it never loses precision over a long run; save it with
    ``state_dict()`` and restore with ``load_state_dict()``.
    """

    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self._m2 = 0.0  # Σ (x − mean)² over everything seen

    def update(self, x: Tensor) -> None:
        """Fold a batch of values (any shape) into the statistics."""
        x = x.detach().to(torch.float64).reshape(-1)
        n = x.numel()
        if n == 0:
            return
        batch_mean = float(x.mean())
        batch_m2 = float((x - batch_mean).square().sum())
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean += delta * n / total
        self._m2 += batch_m2 + delta**2 * self.count * n / total
        self.count = total

    @property
    def var(self) -> float:
        """Unbiased variance (0 with fewer than two values)."""
        return self._m2 / (self.count - 1) if self.count > 1 else 0.0

    @property
    def std(self) -> float:
        return math.sqrt(self.var)

    def state_dict(self) -> dict[str, float]:
        return {"count": self.count, "mean": self.mean, "m2": self._m2}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.count, self.mean, self._m2 = int(state["count"]), state["mean"], state["m2"]


def check_norm_type(value: str | None, field: str) -> None:
    """Raise ``ValueError`` naming ``field`` when ``value`` is not in ``NORM_TYPES``."""
    if value not in NORM_TYPES:
        raise ValueError(
            f"{field}={value!r} is not valid; valid values: "
            f"{', '.join(repr(v) for v in NORM_TYPES)}."
        )


def reward_norm(
    scores: Tensor,
    group_size: int,
    *,
    mean_type: NormType | None,
    std_type: NormType | None,
    running_stats: RunningMeanStd | None = None,
) -> Tensor:
    """(score − mean)/(std + 1e-6), mean and unbiased std taken per ``mean_type``/``std_type``.

    ``batch``: over all B scores; ``group``: over each group of ``group_size`` consecutive
    responses; ``running``: over every score seen so far, ``running_stats`` being updated with
    this batch *before* it is used (so the first batch normalises by its own statistics);
    None: no shift (mean) or no scale (std).

    Args:
        scores: [B] scores.
        group_size: responses per prompt (used by ``group`` only).
        mean_type, std_type: one of ``NORM_TYPES``.
        running_stats: the state for ``running``; required when either type is ``running``.

    Returns:
        [B] normalised scores in the compute dtype.
    """
    check_norm_type(mean_type, "norm_mean_type")
    check_norm_type(std_type, "norm_std_type")
    if "running" in (mean_type, std_type):
        if running_stats is None:
            raise ValueError(
                "norm_mean_type/norm_std_type='running' needs running_stats: pass a "
                "RunningMeanStd() that lives as long as the training run."
            )
        running_stats.update(scores)
    x = scores.to(compute_dtype(scores))  # (B,)
    if mean_type is not None:
        x = x - _statistic(scores, group_size, mean_type, "mean", running_stats)
    if std_type is not None:
        x = x / (_statistic(scores, group_size, std_type, "std", running_stats) + REWARD_STD_EPS)
    return x


def _statistic(scores, group_size, norm_type, which, running_stats) -> Tensor:
    """The mean or unbiased std of ``scores`` [B] under ``norm_type``, broadcastable to [B]."""
    x = scores.to(compute_dtype(scores))  # (B,)
    if norm_type == "running":
        value = running_stats.mean if which == "mean" else running_stats.std
        return torch.as_tensor(value, dtype=x.dtype, device=x.device)
    if norm_type == "group":
        grouped = group_view(x, group_size, "reward_norm")  # (G, K)
        stat = grouped.mean(-1, keepdim=True) if which == "mean" else grouped.std(-1, keepdim=True)
        return stat.expand_as(grouped).reshape(-1)  # (B,)
    if which == "mean":
        return x.mean()
    return x.std(correction=1) if x.numel() > 1 else x.new_zeros(())


def whiten(values: Tensor, mask: Tensor, *, shift_mean: bool = True) -> Tensor:
    """Masked whitening: (x − μ)/√(var + 1e-8) with the masked mean μ and Bessel-corrected
    masked variance over all mask tokens of the batch (REINFORCE++'s batch normalisation,
    arXiv:2501.03262).

    Args:
        values: [B, T].
        mask: [B, T] binary mask.
        shift_mean: False adds μ back, i.e. only rescales.

    Returns:
        [B, T], 0 outside the mask, compute dtype.
    """
    dtype = compute_dtype(values)
    x = zero_masked(values, mask, dtype)  # (B, T)
    mean = masked_mean(x, mask)
    whitened = (x - mean) * torch.rsqrt(masked_var(x, mask) + WHITEN_EPS)
    if not shift_mean:
        whitened = whitened + mean
    return zero_masked(whitened, mask, dtype)
