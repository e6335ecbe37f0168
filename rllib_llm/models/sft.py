"""Supervised fine-tuning batches: the warm start of the embedded checkpoints
(`scripts/pretrain_embedded.py`) trains on these, and tests check what they train.

An example is `(token ids, loss mask)`, the mask 1 on the tokens the policy acts on (answer, tool
call, EOS) and 0 on what is given (the prompt, a tool's output), as the RL loss masks them.
"""

from __future__ import annotations

import torch

IGNORE_INDEX = -100  # label value torch's cross-entropy skips
Example = tuple[list[int], list[int]]  # (token ids, loss mask: 1 where the policy acts)


def collate(
    examples: list[Example], pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad into `(input_ids, attention_mask, labels)`, each `(B, L)`.

    Labels are the input ids where the loss mask is 1 and IGNORE_INDEX elsewhere; the model
    shifts them by one itself.
    """
    L = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), L), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(examples), L), dtype=torch.long)
    labels = torch.full((len(examples), L), IGNORE_INDEX, dtype=torch.long)
    for i, (ids, mask) in enumerate(examples):
        row = torch.tensor(ids, dtype=torch.long)  # (L_i,)
        input_ids[i, : len(ids)] = row
        attention_mask[i, : len(ids)] = 1
        labels[i, : len(ids)] = torch.where(torch.tensor(mask, dtype=torch.bool), row,
                                            IGNORE_INDEX)
    return input_ids, attention_mask, labels
