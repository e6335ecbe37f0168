"""A real model for the gateway's engine tests: a tiny Llama over the BPE chat tokenizer of
`gateway_fakes` whose next token depends on the current token alone, so that a test can make
it sample the re-tokenization trap ("a", "b" as two ids, whose text "ab" re-encodes as one).

Its attention and MLP write nothing into the residual stream (their output projections are
zero), and each token's embedding is a one-hot column: the logits after token i are row i of a
chosen matrix, `noise + strength * [j == chain[i]]`. The noise keeps the other tokens' log-probs
distinct, so top-k alternatives have an order to check.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

from rllib_llm.models.tiny_llama import tiny_llama_config


def chain_llama(path: Path, tokenizer: PreTrainedTokenizerBase, chain: dict[int, int], *,
                strength: float = 12.0, seed: int = 0) -> Path:
    """Save to `path` a Llama (and `tokenizer`) that after token i samples `chain[i]` with
    probability ~ 1 - V * exp(-strength), and otherwise draws from fixed random logits."""
    V = len(tokenizer)
    config = tiny_llama_config(V, hidden_size=128, num_hidden_layers=1, intermediate_size=128,
                               tie_word_embeddings=False, pad_token_id=tokenizer.pad_token_id,
                               eos_token_id=tokenizer.eos_token_id)
    H = config.hidden_size
    if V > H:
        raise ValueError(f"one-hot embeddings need hidden_size {H} >= vocabulary {V}")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    logits = torch.randn(V, V)  # (current token, next token)
    for current, following in chain.items():
        logits[current, following] += strength
    with torch.no_grad():
        for layer in model.model.layers:  # nothing but the embedding reaches the head
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.zero_()
        model.model.embed_tokens.weight[:, :V] = torch.eye(V)  # (V, H)
        # RMSNorm scales a one-hot vector to sqrt(H): divide it back out.
        model.lm_head.weight.zero_()
        model.lm_head.weight[:, :V] = logits.T / math.sqrt(H)  # (V, H)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
