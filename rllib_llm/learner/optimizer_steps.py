"""Which rows of a rollout batch each optimizer step trains on.

RLlib splits a batch into mini-batches by env steps, and here every token is an env step, so a
"mini-batch of 64" would be 64 tokens, a few responses cut mid-group (docs/DESIGN.md, "Learner
details that bite"). RLVR counts in responses and keeps prompt groups whole: one iteration takes
`ppo_epochs * total / mini_batch_size` optimizer steps, and each epoch sees every response once.
"""

from __future__ import annotations

import torch


def minibatch_rows(
    num_rows: int,
    *,
    group_size: int,
    mini_batch_size: int | None,
    num_epochs: int,
    generator: torch.Generator | None = None,
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

    Returns:
        num_epochs * num_rows / mini_batch_size int64 tensors of row indices.
    """
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
