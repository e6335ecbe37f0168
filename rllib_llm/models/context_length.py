"""The context length of a causal LM, read from its config without loading the weights."""

from __future__ import annotations

# Config attributes that hold the number of positions, by model family (Llama/Qwen/Mistral use
# the first, GPT-2 the second, a few others the third).
_CONTEXT_ATTRIBUTES = ("max_position_embeddings", "n_positions", "max_sequence_length")


def model_context_length(name_or_path: str) -> int | None:
    """Positions the model can attend over (prompt + response), None if its config omits them."""
    from transformers import AutoConfig

    from rllib_llm.models import resolve_checkpoint

    # A bad local path fails here at once, when the config is validated, not after hub retries.
    config = AutoConfig.from_pretrained(resolve_checkpoint(name_or_path, kind="model"))
    for attribute in _CONTEXT_ATTRIBUTES:
        value = getattr(config, attribute, None)
        if isinstance(value, int) and value > 0:
            return value
    return None
