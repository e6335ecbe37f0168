"""One token budget for batches of padded rows, shared by the rollout engine's decode batches
(`rollout/torch_engine.py`) and the learner's micro-batches (`learner/micro_batches.py`).

A batch of padded rows holds rows x its widest row tokens, and its memory (a KV cache,
activations) grows with that product, not with the rows' real tokens. A row may have several
parts that are padded separately (the learner's left-padded prompt and right-padded response):
a batch pads each part to its own longest, so its width is the sum of the parts' longest, which
may be more than its longest row. The packer takes rows in the order given and fills each batch
greedily; the caller picks the order (the engine keeps prompt order, the learner sorts longest
first, as verl's and ROLL's dynamic batching do).
"""

from __future__ import annotations

from collections.abc import Sequence


def fits(rows: int, width: int, *, max_rows: int | None, max_tokens: int | None) -> bool:
    """Whether `rows` rows padded to `width` tokens stay within `max_rows` rows and
    `max_tokens` tokens (rows x width); None = no bound on that count."""
    return (max_rows is None or rows <= max_rows) and \
        (max_tokens is None or rows * width <= max_tokens)


def pack(rows: Sequence[Sequence[int]], *, max_rows: int | None,
         max_tokens: int | None) -> list[list[int]]:
    """Cut `rows` into batches within the budget, greedily in the order given.

    Args:
        rows: per row, the tokens of each of its separately padded parts, e.g. (prompt,
            response); every row has the same number of parts.
        max_rows: most rows per batch; None = no row bound.
        max_tokens: most rows x width per batch, the width being the sum over parts of the
            batch's longest; None = no token bound.

    Returns:
        The positions in `rows` of each batch's rows: consecutive runs, together each position
        once. A row that alone breaks the budget (wider than `max_tokens`, or `max_rows` < 1)
        is a batch of its own: every row must go somewhere.
    """
    batches: list[list[int]] = []
    longest: tuple[int, ...] = ()  # the last batch's longest of each part
    for i, parts in enumerate(rows):
        if batches:
            wider = tuple(map(max, longest, parts))
            if fits(len(batches[-1]) + 1, sum(wider), max_rows=max_rows, max_tokens=max_tokens):
                batches[-1].append(i)
                longest = wider
                continue
        batches.append([i])
        longest = tuple(parts)
    return batches


def pack_unpadded(lengths: Sequence[int], *, max_rows: int | None,
                  max_tokens: int | None) -> list[list[int]]:
    """`pack` for batches that hold only their rows' real tokens (`use_remove_padding`: one
    row of them all): a batch's tokens are the sum of its rows' `lengths`, not rows x width.
    Greedy in the order given; a row longer than `max_tokens` is a batch of its own."""
    batches: list[list[int]] = []
    tokens = 0  # the last batch's
    for i, length in enumerate(lengths):
        if batches and (max_tokens is None or tokens + length <= max_tokens) and \
                (max_rows is None or len(batches[-1]) < max_rows):
            batches[-1].append(i)
            tokens += length
            continue
        batches.append([i])
        tokens = length
    return batches
