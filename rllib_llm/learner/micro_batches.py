"""Micro-batches under a token budget: how a mini-batch (or a scoring pass) is cut for memory.

A forward's activations grow with rows x padded length, so memory is bounded by tokens, not by
rows (verl's dynamic batch size, ROLL's dynamic batching): rows are sorted by length, longest
first, and taken greedily while a micro-batch's padded size, rows x (its longest prompt + its
longest response), stays within `max_tokens` (and its rows within `max_rows`): the budget the
rollout engine's decode batches share (exchange/token_budget.py). Each micro-batch is cut to
its own longest prompt and response, so short rows do not carry the batch's padding.

The cut only drops columns that are padding in every row of the micro-batch: the left-padded
prompts lose leading pad columns (positions count real tokens, so they do not change) and the
responses trailing ones (causal attention never looks forward). Losses are normalised by the
whole mini-batch's counts (learner.py), so neither the order of the rows nor the cut changes the
update.

With `use_remove_padding` (remove_padding.py) a micro-batch's forward holds its real tokens only,
so `max_tokens` bounds their sum instead (`unpadded=True`): the same budget takes more rows when
their lengths differ, in fewer, fuller passes.

Several data-parallel ranks each plan their own share; under DDP (buffers broadcast in every
forward) and ZeRO-3 (weights gathered in every forward) they must run the same number of
forwards, so a rank with fewer micro-batches splits its largest until the counts agree
(`min_count`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rllib_llm.exchange import token_budget
from rllib_llm.exchange.columns import ATTENTION_MASK, LAYOUTS, RESPONSE_IDS, Layout
from rllib_llm.learner import data_parallel


def row_lengths(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(prompt lengths (B,), response lengths (B,), P): real tokens of each row's left-padded
    prompt and right-padded response in `input_ids` (B, P + T), and the prompt width P."""
    t = batch[RESPONSE_IDS].shape[1]
    attention = batch[ATTENTION_MASK]
    p = attention.shape[1] - t
    return attention[:, :p].sum(1).cpu(), attention[:, p:].sum(1).cpu(), p


def plan(prompt_lens: torch.Tensor, response_lens: torch.Tensor, *, max_tokens: int | None,
         max_rows: int | None = None, min_count: int = 1,
         unpadded: bool = False) -> list[torch.Tensor]:
    """Row indices of each micro-batch (the longest rows in the first).

    Args:
        prompt_lens, response_lens: (B,) real tokens per row.
        max_tokens: most rows x (longest prompt + longest response) per micro-batch; None =
            no token bound. A row longer than the budget is a micro-batch of its own.
        max_rows: most rows per micro-batch; None = no row bound.
        min_count: at least this many micro-batches (at most B): the largest are halved.
        unpadded: `max_tokens` bounds the sum of the rows' real tokens (use_remove_padding).

    Returns:
        int64 tensors of row indices, together each row exactly once.
    """
    total = prompt_lens + response_lens
    order = torch.argsort(total, descending=True, stable=True).tolist()
    if unpadded:
        runs = token_budget.pack_unpadded([int(total[row]) for row in order],
                                          max_rows=max_rows, max_tokens=max_tokens)
    else:
        runs = token_budget.pack([(int(prompt_lens[row]), int(response_lens[row]))
                                  for row in order], max_rows=max_rows, max_tokens=max_tokens)
    batches = [[order[i] for i in run] for run in runs]
    while len(batches) < min(min_count, len(order)):
        # Halve the micro-batch with the most padded tokens (rows x its first row's length:
        # rows are still longest first here).
        i = max(range(len(batches)), key=lambda j: len(batches[j]) * int(total[batches[j][0]])
                if len(batches[j]) > 1 else -1)
        half = (len(batches[i]) + 1) // 2
        batches[i:i + 1] = [batches[i][:half], batches[i][half:]]
    # Each micro-batch in the batch's own row order: a batch that fits whole is then exactly
    # the batch (the same sums in the same order as without a budget).
    return [torch.tensor(sorted(rows), dtype=torch.long) for rows in batches]


def plan_on_every_rank(prompt_lens: torch.Tensor, response_lens: torch.Tensor, *,
                       max_tokens: int | None, max_rows: int | None,
                       unpadded: bool = False) -> list[torch.Tensor]:
    """`plan` with as many micro-batches on this rank as on the data-parallel rank with the
    most (collective: every rank calls it at once); `plan` itself without ranks."""
    budget = dict(max_tokens=max_tokens, max_rows=max_rows, unpadded=unpadded)
    batches = plan(prompt_lens, response_lens, **budget)
    most = data_parallel.max_over_ranks(len(batches))
    if most == len(batches):
        return batches
    return plan(prompt_lens, response_lens, min_count=most, **budget)


def take(batch: dict[str, torch.Tensor], rows: torch.Tensor, prompt_lens: torch.Tensor,
         response_lens: torch.Tensor, p: int) -> dict[str, torch.Tensor]:
    """The micro-batch of `rows`, cut to its longest prompt P' and response T'.

    Each column is cut by its declared layout (exchange/columns.py, `LAYOUTS`): a SEQUENCE
    column (B, P + T) keeps columns P - P' .. P + T', a RESPONSE column (B, T) the first T', a
    PER_ROW column its rows. A column with no declared layout, or a shape its layout does not
    allow, is a ValueError.
    """
    t = batch[RESPONSE_IDS].shape[1]
    keep_p = int(prompt_lens[rows].max())
    keep_t = max(1, int(response_lens[rows].max()))
    out = {}
    for key, value in batch.items():
        layout = _layout(key, value, p, t)
        picked = value[rows.to(value.device)]
        if layout is Layout.RESPONSE:
            picked = picked[:, :keep_t]
        elif layout is Layout.SEQUENCE:
            picked = picked[:, p - keep_p : p + keep_t]
        out[key] = picked
    return out


def _layout(key: str, value: torch.Tensor, p: int, t: int) -> Layout:
    """The declared layout of column `key`, checked against its shape (B, P + T) or (B, T)."""
    layout = LAYOUTS.get(key)
    if layout is None:
        raise ValueError(
            f"micro_batches.take: column {key!r} has no declared layout, so a micro-batch "
            "cannot tell how to cut it; declare it in rllib_llm/exchange/columns.py LAYOUTS "
            "(Layout.PER_ROW, RESPONSE or SEQUENCE)")
    width = {Layout.RESPONSE: t, Layout.SEQUENCE: p + t}.get(layout)
    if width is not None and (value.dim() < 2 or value.shape[1] != width):
        raise ValueError(
            f"micro_batches.take: column {key!r} is declared {layout.name}, so (B, {width}, ...) "
            f"with P={p} and T={t}, but has shape {tuple(value.shape)}")
    return layout


def split(batch: dict[str, torch.Tensor], *, max_tokens: int | None,
          max_rows: int | None = None, unpadded: bool = False) -> list[dict[str, torch.Tensor]]:
    """`batch` as micro-batches under the budget (`plan_on_every_rank`: collective under data
    parallelism), each cut to its own lengths."""
    prompt_lens, response_lens, p = row_lengths(batch)
    return [take(batch, rows, prompt_lens, response_lens, p)
            for rows in plan_on_every_rank(prompt_lens, response_lens, max_tokens=max_tokens,
                                           max_rows=max_rows, unpadded=unpadded)]


def map_rows(fn: Callable[[dict[str, torch.Tensor]], torch.Tensor],
             batch: dict[str, torch.Tensor], *, max_tokens: int | None,
             max_rows: int | None = None, unpadded: bool = False) -> torch.Tensor:
    """fn over the micro-batches of `batch` (as `split`), put back together: (B, T) in the
    batch's row order, zeros past each micro-batch's cut. `fn` maps a micro-batch to (rows, T')
    values."""
    prompt_lens, response_lens, p = row_lengths(batch)
    b, t = batch[RESPONSE_IDS].shape
    out = None
    for rows in plan_on_every_rank(prompt_lens, response_lens, max_tokens=max_tokens,
                                   max_rows=max_rows, unpadded=unpadded):
        part = fn(take(batch, rows, prompt_lens, response_lens, p))  # (rows, T')
        if out is None:
            out = torch.zeros((b, t), dtype=part.dtype, device=part.device)
        out[rows.to(part.device), : part.shape[1]] = part
    return out
