"""`use_remove_padding`: the learner's forward passes over a micro-batch's real tokens only
(verl's `use_remove_padding`, TRL's `padding_free`, OpenRLHF's `--packing_samples`).

A micro-batch of padded rows (module.py's layout, B rows of P + T)

    [pad pad p0 p1 p2 | a0 a1 a2 pad]
    [ q0  q1 q2 q3 q4 | b0 pad pad pad]

becomes one row of its N real tokens, each row's positions starting again at 0:

    input_ids    [p0 p1 p2 a0 a1 a2 q0 q1 q2 q3 q4 b0]
    position_ids [ 0  1  2  3  4  5  0  1  2  3  4  5]

Hugging Face models see the restarts (transformers' `masking_utils.find_packed_sequence_indices`,
with no attention mask given) and keep each row's attention within the row: varlen kernels under
flash_attention_2/3, a block-sparse mask under flex_attention, a dense N x N mask under sdpa and
eager. Each token then sees what it saw padded, at the same position, so the hidden states are
the padded pass's at the real positions (float rounding; `check_packed_rows` checks the model at
build). The LM head and a value head run only on the hidden states that predict a response token
(n of them), and log-probs, entropies and values are put back as (B, T), zero at padding, where
the losses mask them out.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rllib_llm.exchange.columns import ATTENTION_MASK, INPUT_IDS, RESPONSE_IDS

# Attention implementations that keep packed rows apart with a dense (N, N) mask: N^2 bytes and
# N^2 attention FLOPs per pass, fine at a CPU's budgets, not at a GPU's (tens of thousands).
DENSE_MASKS = ("sdpa", "eager")


@dataclass(frozen=True)
class Unpadded:
    """A padded micro-batch as one row of its real tokens.

    input_ids, position_ids: (1, N); predictors: (n,) the index in N of the position whose
    hidden state predicts each real response token, in (row, token) order; response_ids: (1, n)
    those tokens; response_mask: (B, T) bool, where they sit in the padded layout."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    predictors: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor

    def scatter(self, values: torch.Tensor) -> torch.Tensor:
        """(1, n) or (n,) values of the response tokens laid out as (B, T), 0 at padding (the
        gradient flows back to `values`)."""
        out = values.new_zeros(self.response_mask.shape)
        return out.index_put((self.response_mask,), values.reshape(-1))


def unpad(batch: dict[str, torch.Tensor]) -> Unpadded:
    """The real tokens of `batch` (input_ids, attention_mask (B, P + T), response_ids (B, T)):
    left-padded prompts, right-padded responses, every row with at least one prompt token."""
    mask = batch[ATTENTION_MASK].bool()
    t = batch[RESPONSE_IDS].shape[1]
    p = mask.shape[1] - t
    index = mask.reshape(-1).long().cumsum(0).view(mask.shape) - 1  # (B, L): index in N
    positions = mask.long().cumsum(1) - 1  # restarts at 0 in each row
    response_mask = mask[:, p:]
    # Token P + j is predicted at position P + j - 1: the prompt's last token for j = 0, so
    # every real response token's predictor is a real token too.
    predictors = index[:, p - 1 : p + t - 1][response_mask]
    return Unpadded(input_ids=batch[INPUT_IDS][mask][None], position_ids=positions[mask][None],
                    predictors=predictors, response_ids=batch[RESPONSE_IDS][response_mask][None],
                    response_mask=response_mask)


def trunk_hidden(trunk: torch.nn.Module, rows: Unpadded) -> torch.Tensor:
    """A Hugging Face base model's last hidden states (1, N, H) of the unpadded row. No
    attention mask: the position restarts tell the model where rows begin."""
    return trunk(input_ids=rows.input_ids, position_ids=rows.position_ids,
                 use_cache=False).last_hidden_state


def response_hidden(hidden: torch.Tensor, rows: Unpadded) -> torch.Tensor:
    """The hidden states (1, n, H) that predict the response tokens, from (1, N, H)."""
    return hidden[:, rows.predictors]


def check_packed_rows(trunk: torch.nn.Module) -> None:
    """Raise ValueError unless `trunk` (a Hugging Face base model), given two rows packed into
    one with restarting positions, gives each row the hidden states it gives the row alone: a
    model that ignores the restarts would let one response attend to another row's tokens."""
    ids = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]) % trunk.config.vocab_size
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    batch = {INPUT_IDS: ids, ATTENTION_MASK: mask, RESPONSE_IDS: ids[:, -1:]}
    was_training = trunk.training
    trunk.eval()
    try:
        with torch.no_grad():
            packed = trunk_hidden(trunk, unpad(batch))[0]
            alone = torch.cat([trunk(input_ids=ids[i:i + 1, mask[i].bool()],
                                     use_cache=False).last_hidden_state[0] for i in range(2)])
    finally:
        trunk.train(was_training)
    if not torch.allclose(packed.float(), alone.float(), rtol=1e-3, atol=1e-4):
        attention = getattr(trunk.config, "_attn_implementation", None)
        raise ValueError(
            "RLVRConfig.use_remove_padding=True packs a micro-batch's rows into one, but "
            f"{type(trunk).__name__} (attention {attention!r}) lets packed rows attend to each "
            "other (its hidden states differ from each row's alone); set "
            "use_remove_padding=False.")


def check_attention_for_device(model: torch.nn.Module, device: torch.device) -> None:
    """Raise ValueError where `model` computes on a GPU with an attention that would mask
    packed rows densely (`DENSE_MASKS`)."""
    attention = getattr(model.config, "_attn_implementation", None)
    if device.type != "cpu" and attention in DENSE_MASKS:
        raise ValueError(
            f"RLVRConfig.use_remove_padding=True on {device.type}: with {attention!r} attention "
            "each pass would mask its packed rows with a dense N x N mask (N = the micro-batch's "
            "tokens, tens of thousands on a GPU: N^2 bytes and N^2 attention work); set "
            "attn_implementation='flex_attention' (or 'flash_attention_2' with flash-attn "
            "installed), or use_remove_padding=False.")
