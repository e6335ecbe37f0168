"""The critic of PPO with `adv_estimator='gae'`: a causal LM's trunk with a scalar value head.

    V(s_t) = head(h_t),  h_t = the trunk's last hidden state at the position that predicts token t

so the value of response token t sits where the policy's logits for it do (position P + t - 1 of
the packed sequence, learner/module.py): the value of the state *before* the token is chosen.

A critic starts from a causal LM (the policy's checkpoint, usually: verl and ROLL initialise it
so) with a zero head, V = 0 everywhere; or from a reward model, a `*ForSequenceClassification`
checkpoint with one label, whose `score` head becomes the value head (OpenRLHF's and TRL's
PPO start the critic from the reward model).
"""

from __future__ import annotations

import torch
from torch import nn

from rllib_llm.models import DTYPES, EMBEDDED, load_model, resolve_checkpoint, resolve_path


def value_head(hidden_size: int, dtype: torch.dtype) -> nn.Linear:
    """A zero-initialised scalar head: a fresh critic predicts V = 0, and explained variance
    starts at 0 instead of at the mercy of a random projection."""
    head = nn.Linear(hidden_size, 1, bias=True, dtype=dtype)
    nn.init.zeros_(head.weight)
    nn.init.zeros_(head.bias)
    return head


def response_values(head: nn.Module, hidden: torch.Tensor, t: int) -> torch.Tensor:
    """Values (B, t) of the last `t` tokens' states from last hidden states (B, L, H), in float32
    (the GAE recursion sums them over the response)."""
    return head(hidden[:, -(t + 1) : -1]).squeeze(-1).float()


def last_hidden_state(trunk: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      position_ids: torch.Tensor) -> torch.Tensor:
    """The trunk's (a Hugging Face base model's) last hidden states (B, L, H), after its final
    norm: what an LM head or a value head reads."""
    return trunk(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                 use_cache=False).last_hidden_state


class ValueModel(nn.Module):
    """A trunk (a Hugging Face base model: embeddings + blocks + final norm) and a value head."""

    def __init__(self, trunk: nn.Module, head: nn.Module):
        super().__init__()
        self.trunk = trunk
        self.head = head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, t: int,
                position_ids: torch.Tensor) -> torch.Tensor:
        """Values (B, t) of the states before each of the last `t` tokens of `input_ids`."""
        hidden = last_hidden_state(self.trunk, input_ids, attention_mask, position_ids)
        return response_values(self.head, hidden, t)


def load_value_model(name_or_path: str = EMBEDDED, *, dtype: str = "float32",
                     attn_implementation: str | None = None) -> ValueModel:
    """A critic from a causal LM (zero head) or a one-label reward model (its score head);
    `attn_implementation` as `load_model`'s."""
    path = resolve_checkpoint(name_or_path, kind="model")
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(resolve_path(path))
    if any(a.endswith("ForSequenceClassification") for a in config.architectures or ()):
        if config.num_labels != 1:
            raise ValueError(
                f"critic checkpoint {name_or_path!r} is a classifier with {config.num_labels} "
                "labels; a value model needs a reward model with one output (num_labels=1), or "
                "a causal LM (its value head then starts at zero)."
            )
        from transformers import AutoModelForSequenceClassification

        model = AutoModelForSequenceClassification.from_pretrained(
            path, dtype=DTYPES[dtype], attn_implementation=attn_implementation)
        return ValueModel(model.base_model, model.score)
    model = load_model(name_or_path, dtype=dtype, attn_implementation=attn_implementation)
    trunk = model.base_model  # the LM without its vocabulary head
    return ValueModel(trunk, value_head(model.config.hidden_size, DTYPES[dtype]))
