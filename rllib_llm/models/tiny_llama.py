"""Config of the embedded tiny causal LM: a standard Llama, only small.

Llama rather than a bespoke module so the checkpoint is an ordinary Hugging Face directory: the
same `AutoModelForCausalLM.from_pretrained` path that loads a user's model loads ours, and the
vLLM engine can serve it. (Qwen2 would do as well architecturally, but in transformers 5.x a
`qwen2` config makes `AutoTokenizer` insist on `Qwen2Tokenizer`, which breaks the char tokenizer.)
"""

from __future__ import annotations

from transformers import LlamaConfig


def tiny_llama_config(
    vocab_size: int,
    *,
    hidden_size: int = 128,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    intermediate_size: int = 512,
    max_position_embeddings: int = 128,
    pad_token_id: int | None = None,
    eos_token_id: int | None = None,
    tie_word_embeddings: bool = True,
) -> LlamaConfig:
    """Return a `LlamaConfig` for a model of a few hundred thousand parameters.

    Args:
        vocab_size: rows of the embedding; `len(tokenizer)`.
        hidden_size: width of the residual stream; must be divisible by `num_attention_heads`.
        num_hidden_layers: transformer blocks.
        num_attention_heads: query heads (as many key/value heads: no grouped-query attention).
        intermediate_size: width of the SwiGLU MLP.
        max_position_embeddings: longest prompt + response the RoPE tables are sized for.
        pad_token_id, eos_token_id: copied into the config so `generate` needs no extra arguments.
        tie_word_embeddings: share the input embedding with the LM head; with a 98-token vocabulary
            this halves the embedding parameters at no measurable cost.
    """
    if vocab_size < 1:
        raise ValueError(f"vocab_size={vocab_size} must be >= 1 (pass len(tokenizer))")
    if hidden_size % num_attention_heads:
        raise ValueError(
            f"hidden_size={hidden_size} must be divisible by "
            f"num_attention_heads={num_attention_heads}"
        )
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_attention_heads,
        head_dim=hidden_size // num_attention_heads,
        max_position_embeddings=max_position_embeddings,
        rms_norm_eps=1e-6,
        tie_word_embeddings=tie_word_embeddings,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=None,
    )
