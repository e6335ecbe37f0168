"""Which rows of a rollout batch each optimizer step trains on.

RLlib splits a batch into mini-batches by env steps, and here every token is an env step, so a
"mini-batch of 64" would be 64 tokens, a few responses cut mid-group (docs/DESIGN.md, "Learner
details that bite"). RLVR counts in responses and keeps prompt groups whole: one iteration takes
`ppo_epochs * total / mini_batch_size` optimizer steps, and each epoch sees every response once.
An episode that spans several rows (an agent that rewrote its history: `EPISODE_INDEX`) counts
as one response; its group's rows stay together, however many there are.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from rllib_llm.exchange.columns import EPISODE_INDEX


def row_groups(data: Mapping[str, torch.Tensor], group_size: int) -> torch.Tensor | None:
    """(B,) the prompt group of each row of `data` when some episode spans several rows; None
    when every row is an episode, so groups are consecutive runs of `group_size` rows."""
    episodes = data.get(EPISODE_INDEX)
    return None if episodes is None else episodes // group_size


def minibatch_rows(
    num_rows: int,
    *,
    group_size: int,
    mini_batch_size: int | None,
    num_epochs: int,
    generator: torch.Generator | None = None,
    groups: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """Row indices of each optimizer step of one iteration, in order.

    Args:
        num_rows: responses in the batch, consecutive runs of `group_size` per prompt.
        group_size: responses per prompt group (num_return_sequences_in_group).
        mini_batch_size: responses per step, a multiple of `group_size` dividing `num_rows`;
            None = all rows (one step per epoch).
        num_epochs: passes over the batch (ppo_epochs).
        generator: when given, the order of the groups is shuffled anew each epoch with it
            (RLlib's shuffle_batch_per_epoch); else every epoch keeps the batch's order.
        groups: (num_rows,) the group 0, 1, ... of each row, nondecreasing, when a group has
            more than `group_size` rows (`row_groups`); each group still counts `group_size`
            responses, so a mini-batch holds `mini_batch_size / group_size` whole groups.

    Returns:
        num_epochs * num_rows / mini_batch_size int64 tensors of row indices.
    """
    if groups is not None:
        return _minibatch_rows_of_groups(groups, group_size, mini_batch_size, num_epochs,
                                         generator)
    size = mini_batch_size or num_rows
    if num_rows % group_size or size % group_size or num_rows % size:
        raise ValueError(
            f"minibatch_rows: {num_rows} rows in groups of {group_size} cannot be split into "
            f"mini-batches of {size} whole groups; mini_batch_size must be a multiple of the "
            "group size that divides the batch."
        )
    num_groups = num_rows // group_size
    steps = []
    for _ in range(num_epochs):
        if generator is None:
            groups = torch.arange(num_groups)
        else:
            groups = torch.randperm(num_groups, generator=generator)
        rows = (groups[:, None] * group_size + torch.arange(group_size)).reshape(-1)  # (N,)
        steps.extend(rows.split(size))
    return steps


def _minibatch_rows_of_groups(groups: torch.Tensor, group_size: int,
                              mini_batch_size: int | None, num_epochs: int,
                              generator: torch.Generator | None) -> list[torch.Tensor]:
    """`minibatch_rows` where groups have any number of rows: the same steps over groups."""
    counts = torch.bincount(groups)  # (G,) rows of each group
    starts = counts.cumsum(0) - counts  # (G,)
    responses = len(counts) * group_size
    size = mini_batch_size or responses
    if size % group_size or responses % size:
        raise ValueError(
            f"minibatch_rows: {len(counts)} groups of {group_size} responses cannot be split "
            f"into mini-batches of {size} whole groups; mini_batch_size must be a multiple of "
            "the group size that divides the batch."
        )
    per_step = size // group_size
    steps = []
    for _ in range(num_epochs):
        order = torch.arange(len(counts)) if generator is None else \
            torch.randperm(len(counts), generator=generator)
        rows = torch.cat([torch.arange(s, s + c) for s, c in
                          zip(starts[order].tolist(), counts[order].tolist())])  # (B,)
        steps.extend(rows.split(counts[order].view(-1, per_step).sum(dim=1).tolist()))
    return steps
