"""Reduction of per-token losses to one scalar (``loss_agg_mode``), the optax way: losses return
per-token values and never reduce; this module is the one place that reduces.

Micro-batches and data-parallel shards
--------------------------------------
A mini-batch is often split into micro-batches (gradient accumulation) and across data-parallel
ranks. The mini-batch loss must not depend on the split, so each piece is normalised by the
counts of the *whole* mini-batch::

    counts = agg_counts(minibatch_mask)              # all-reduce (sum) both fields across ranks
    total = sum(
        agg_loss(loss_mb, mask_mb, mode, norm_length=T, num_tokens=counts.num_tokens,
                 num_seqs=counts.num_seqs)
        for loss_mb, mask_mb in micro_batches
    )                                                # == agg_loss(loss, mask, mode)

This holds for every mode: the numerators (Σ L·mask, Σ_b row sums, Σ_b row means) are sums over
rows, and the only global quantities are the denominators. ``seq-mean-token-mean`` needs each
row's own token count, which never crosses a row, so it splits naturally. For
``seq-mean-token-sum-norm`` pass ``norm_length`` explicitly whenever micro-batches are padded to
different lengths (its default, ``T``, is the padded length of the tensor it sees).
"""

from __future__ import annotations

from typing import Literal, NamedTuple, get_args

import torch
from torch import Tensor

from rllib_llm.core.masked import bool_mask, compute_dtype, safe_divide, zero_masked

AggMode = Literal[
    "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
]
AGG_MODES: tuple[str, ...] = get_args(AggMode)
DEFAULT_AGG_MODE: AggMode = "seq-mean-token-mean"


class AggCounts(NamedTuple):
    """The denominators of a mini-batch, shared by all of its micro-batches.

    Attributes:
        num_tokens: () number of mask tokens.
        num_seqs: () number of rows with at least one mask token (N_seq).
    """

    num_tokens: Tensor
    num_seqs: Tensor


def agg_counts(mask: Tensor) -> AggCounts:
    """Token and sequence counts of ``mask`` [B, T], as float64 scalars (exact up to 2^53)."""
    m = bool_mask(mask)  # (B, T)
    return AggCounts(
        num_tokens=m.sum().to(torch.float64),
        num_seqs=m.any(dim=-1).sum().to(torch.float64),
    )


def check_agg_mode(mode: str) -> None:
    """Raise ``ValueError`` naming ``loss_agg_mode``, the value and the valid modes."""
    if mode not in AGG_MODES:
        raise ValueError(
            f"loss_agg_mode={mode!r} is not valid; valid names: "
            f"{', '.join(repr(m) for m in AGG_MODES)}. Pick one of them (default "
            f"{DEFAULT_AGG_MODE!r})."
        )


def agg_loss(
    loss: Tensor,
    mask: Tensor,
    mode: AggMode,
    *,
    norm_length: float | None = None,
    num_tokens: Tensor | float | None = None,
    num_seqs: Tensor | float | None = None,
) -> Tensor:
    """Reduce a per-token loss [B, T] to a scalar with ``loss_agg_mode`` ``mode``.

    N_seq = rows with at least one mask token (at least 1); rows without tokens add nothing.

    - ``token-mean``: Σ L·mask / Σ mask (the numerator is masked, unlike ROLL's code).
    - ``seq-mean-token-sum``: Σ_b (Σ_t L·mask) / N_seq.
    - ``seq-mean-token-mean``: Σ_b (Σ_t L·mask / Σ_t mask) / N_seq.
    - ``seq-mean-token-sum-norm``: Σ_b Σ_t L·mask / (N_seq · norm_length), Dr. GRPO
      (arXiv:2503.20783): a constant denominator removes the length bias of per-row means.

    Args:
        loss: [B, T] per-token loss.
        mask: [B, T] binary mask of the agent's tokens.
        mode: one of ``AGG_MODES``.
        norm_length: the constant length of ``seq-mean-token-sum-norm`` (default: T, the padded
            length; set the max response length for a constant across batches). Ignored by the
            other modes.
        num_tokens: Σ mask of the whole mini-batch, when ``loss`` is one micro-batch of it
            (see the module docstring). Default: this tensor's own count.
        num_seqs: N_seq of the whole mini-batch, likewise.

    Returns:
        () scalar in the compute dtype (float32, or float64 for float64 input).
    """
    check_agg_mode(mode)
    dtype = compute_dtype(loss)
    token_loss = zero_masked(loss, mask, dtype)  # (B, T)
    counts = agg_counts(mask)
    n_tok = _as_count(counts.num_tokens if num_tokens is None else num_tokens, dtype, loss)
    n_seq = _as_count(counts.num_seqs if num_seqs is None else num_seqs, dtype, loss)
    if mode == "token-mean":
        return safe_divide(token_loss.sum(), n_tok)
    row_sum = token_loss.sum(dim=-1)  # (B,)
    n_seq = n_seq.clamp(min=1)  # the spec's "N_seq ≥ 1": an empty batch gives 0, not 0/0
    if mode == "seq-mean-token-sum":
        return row_sum.sum() / n_seq
    if mode == "seq-mean-token-mean":
        row_len = bool_mask(mask).to(dtype).sum(dim=-1)  # (B,)
        return safe_divide(row_sum, row_len).sum() / n_seq
    length = loss.shape[-1] if norm_length is None else norm_length
    if not length > 0:
        raise ValueError(
            f"norm_length={norm_length!r} must be > 0 for loss_agg_mode="
            f"'seq-mean-token-sum-norm'; set it to the max response length (or None for T)."
        )
    return row_sum.sum() / (n_seq * length)


def _as_count(count: Tensor | float, dtype: torch.dtype, like: Tensor) -> Tensor:
    return torch.as_tensor(count, dtype=dtype, device=like.device)
