"""Loading causal LMs and tokenizers, and turning prompts into token ids.

`"embedded"` names the tiny char-level Llama the project trains itself (`models/pretrain.py`) and
ships in `models/embedded/`; any other name goes to Hugging Face's `Auto*.from_pretrained` (a local
directory, or a hub id on a machine that can reach the hub). Both go through the same code path, so
the embedded default exercises exactly what a user's model does.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

EMBEDDED = "embedded"
EMBEDDED_DIR = Path(__file__).parent / "embedded"

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

__all__ = [
    "DTYPES",
    "EMBEDDED",
    "EMBEDDED_DIR",
    "encode_prompt",
    "load_model",
    "load_model_and_tokenizer",
    "load_tokenizer",
    "resolve_path",
]


def resolve_path(name_or_path: str) -> str:
    """Map `"embedded"` to the shipped checkpoint directory; return any other name unchanged."""
    return str(EMBEDDED_DIR) if name_or_path == EMBEDDED else name_or_path


def load_tokenizer(name_or_path: str = EMBEDDED) -> PreTrainedTokenizerBase:
    """Load a tokenizer; guarantee it has a pad token (eos doubles as pad when it has none).

    Generation pads prompt batches, so a pad id must exist; reusing eos is the usual choice for
    decoder-only models and is harmless because padded positions are masked out.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_path(name_or_path))
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(
                f"tokenizer {name_or_path!r} has neither pad_token nor eos_token; generation needs "
                "one of them to pad prompts and stop responses"
            )
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def encode_prompt(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Turn a prompt into the token ids the policy sees: the ONE place this happens.

    SFT pretraining and the RL environments both call this, so what the model was taught on and
    what it is rewarded on agree token for token. With a chat template, `text` becomes a single
    user message followed by the assistant's generation prompt; without one it is encoded as is
    (plus whatever special tokens the tokenizer adds itself, e.g. a BOS).
    """
    if tokenizer.chat_template:
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
        # The rendered template already contains BOS and friends: adding them again would double.
        return list(tokenizer(rendered, add_special_tokens=False)["input_ids"])
    return list(tokenizer(text)["input_ids"])


def load_model(name_or_path: str = EMBEDDED, *, dtype: str = "float32") -> PreTrainedModel:
    """Load a causal LM in eval mode.

    Args:
        name_or_path: `"embedded"`, a local checkpoint directory, or a hub id.
        dtype: one of `DTYPES` ("float32", "bfloat16", "float16"); the weights are cast to it.
    """
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of {sorted(DTYPES)}; pass e.g. 'float32'")
    path = resolve_path(name_or_path)
    if name_or_path == EMBEDDED and not (EMBEDDED_DIR / "config.json").exists():
        raise FileNotFoundError(
            f"the embedded checkpoint is missing from {EMBEDDED_DIR}; rebuild it with "
            "`python -m rllib_llm.models.pretrain --out rllib_llm/models/embedded`"
        )
    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype])
    return model.eval()


def load_model_and_tokenizer(
    name_or_path: str = EMBEDDED, *, dtype: str = "float32"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """`load_model` and `load_tokenizer` of the same name, as a pair."""
    return load_model(name_or_path, dtype=dtype), load_tokenizer(name_or_path)
