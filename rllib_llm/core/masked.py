"""Masked reductions and the dtype rule shared by every function in ``rllib_llm.core``.

Dtype rule: inputs may be float32, float64 or bfloat16/float16. Everything is computed in
float64 when any input is float64, else in float32, and returned in that compute dtype (so a
bf16 batch gives float32 losses and advantages). Why: sums over thousands of tokens and
``exp(logp - old_logp)`` lose most of their digits in bf16 (8 bits of mantissa), and the optimiser
wants a float32 loss anyway; gradients still flow back to bf16 ``logp`` through the cast.

Mask rule: ``mask[b, t]`` is binary; any non-zero entry is a token of the agent. Values at
positions where the mask is 0 are replaced by 0 *before* any arithmetic (``torch.where``, not a
multiplication), so padding holding ``inf`` or ``nan`` can neither leak into a result nor into a
gradient, and fully masked rows give 0, never NaN.
"""

from __future__ import annotations

import torch
from torch import Tensor


def compute_dtype(*tensors: Tensor | None) -> torch.dtype:
    """float64 if any floating input is float64, else float32 (see the module docstring)."""
    for x in tensors:
        if x is not None and x.dtype == torch.float64:
            return torch.float64
    return torch.float32


def bool_mask(mask: Tensor) -> Tensor:
    """The mask as booleans (any non-zero entry counts as a token)."""
    return mask if mask.dtype == torch.bool else mask != 0


def zero_masked(x: Tensor, mask: Tensor, dtype: torch.dtype) -> Tensor:
    """``x`` cast to ``dtype`` with every position outside ``mask`` set to exactly 0."""
    return torch.where(bool_mask(mask), x.to(dtype), torch.zeros((), dtype=dtype, device=x.device))


def safe_divide(num: Tensor, den: Tensor) -> Tensor:
    """``num / den`` with 0 wherever ``den`` is 0 (an empty row or batch contributes nothing)."""
    ok = den != 0
    return torch.where(ok, num / torch.where(ok, den, torch.ones_like(den)), torch.zeros_like(num))


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Σ x over mask tokens (over ``dim``, or everything when ``dim`` is None)."""
    x = zero_masked(x, mask, compute_dtype(x))
    return x.sum() if dim is None else x.sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of x over mask tokens; 0 where there is no token."""
    count = bool_mask(mask).to(compute_dtype(x))
    count = count.sum() if dim is None else count.sum(dim)
    return safe_divide(masked_sum(x, mask, dim), count)


def masked_var(x: Tensor, mask: Tensor) -> Tensor:
    """Bessel-corrected variance of x over all mask tokens; 0 with fewer than two tokens."""
    dtype = compute_dtype(x)
    n = bool_mask(mask).to(dtype).sum()
    centred = zero_masked(x, mask, dtype) - masked_mean(x, mask)
    return safe_divide(masked_sum(centred.square(), mask), n - 1).clamp(min=0)


def masked_max(x: Tensor, mask: Tensor) -> Tensor:
    """Largest x over mask tokens; 0 when there is none."""
    m = bool_mask(mask)
    x = x.to(compute_dtype(x))
    top = torch.where(m, x, torch.full_like(x, -torch.inf)).amax()
    return torch.where(m.any(), top, torch.zeros_like(top))


def masked_min(x: Tensor, mask: Tensor) -> Tensor:
    """Smallest x over mask tokens; 0 when there is none."""
    return -masked_max(-x, mask)


def check_same_shape(field_shapes: dict[str, Tensor], fn: str) -> None:
    """Raise ``ValueError`` naming the arguments whose shapes differ."""
    shapes = {name: tuple(t.shape) for name, t in field_shapes.items() if t is not None}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(
            f"{fn}: {listed} must all have the same shape [B, T]; pad every tensor of the batch "
            f"to the same length."
        )
