"""Reward shaping by response length: DAPO's soft overlong punishment.

DAPO (Yu et al., 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale", eq. 13)
adds to each response's reward

    R_length(L) = 0                                  if L <= L_max - L_cache
                = ((L_max - L_cache) - L) / L_cache  if L_max - L_cache < L <= L_max
                = -1                                 if L > L_max

with L the response's length, L_max the response limit and L_cache the buffer before it over
which the penalty ramps from 0 to -1. verl's DAPO reward manager scales it by
`overlong_buffer.penalty_factor` (`min(-(L - (L_max - L_cache)) / L_cache * factor, 0)`), which
is the same ramp for L <= L_max. Here the factor scales all three cases, so the penalty is
bounded by -factor as in the paper.
"""

from __future__ import annotations

import torch
from torch import Tensor


def overlong_penalty(response_lengths: Tensor, max_length: int, buffer_length: int,
                     penalty_factor: float = 1.0) -> Tensor:
    """DAPO's soft overlong punishment of each response (B,), 0 or negative.

    Args:
        response_lengths: (B,) the responses' lengths in tokens (any real dtype).
        max_length: L_max, the response limit.
        buffer_length: L_cache, 0 < L_cache <= L_max: the last tokens before L_max over which the
            penalty ramps linearly from 0 (at L_max - L_cache) to -penalty_factor (at L_max).
        penalty_factor: the penalty at and beyond L_max (DAPO: 1.0), >= 0.
    """
    if not 0 < buffer_length <= max_length:
        raise ValueError(f"buffer_length={buffer_length} must be in (0, max_length={max_length}]")
    if penalty_factor < 0:
        raise ValueError(f"penalty_factor={penalty_factor} must be >= 0")
    lengths = response_lengths.to(torch.float64)
    ramp = ((max_length - buffer_length) - lengths) / buffer_length
    return (ramp.clamp(min=-1.0, max=0.0) * penalty_factor).to(torch.float32)
