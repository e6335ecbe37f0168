"""The shapes benchmarks/gpu/gpu_check.py runs, and the random model both sides of a shape train.

    403m (the default): a Llama of hidden 1024 x 24 layers, MLP 4096, 16 heads, the embedded char
        tokenizer's 98 tokens (403M parameters); 32 prompts x 8 responses x 256 tokens; TRL trains
        the batch in one micro-batch of 256 rows (its setting since the first GPU run).
    1.5b: Qwen2.5-1.5B's shape (its config.json): hidden 1536 x 28 layers, MLP 8960, grouped-query
        attention with 12 query and 2 key/value heads, biases on q/k/v, a vocabulary of 151,936
        rows tied to the LM head (1.54B parameters); 32 x 8 x 512 tokens. Built as a Llama: a
        `qwen2` config makes AutoTokenizer insist on Qwen2Tokenizer, which the char tokenizer is
        not (models/tiny_llama.py). The differences cost nothing measurable: Llama's
        `attention_bias` puts a bias on o_proj as well (43k parameters more), and RoPE's base
        stays Llama's. TRL trains the 256 rows in micro-batches of 32 (8 accumulation steps, one
        optimizer step): 256 rows of 527 tokens in one would make 41 GB of bf16 logits.

Each has a `--small` stand-in for the CPU with the same code paths: float32, 4 prompts x 4 x 16
tokens, a 2-layer model of hidden 64; the 1.5b one keeps grouped-query attention (4 / 2 heads), a
vocabulary padded past the tokenizer's (1,024) and TRL's micro-batches (4 rows, 4 steps).

EOS never ends a response on either side: the saved tokenizer's EOS is an id one past the model's
logits, which neither sampler can draw. Where the model's vocabulary is larger than the char
tokenizer's, the tokenizer's vocabulary is padded to it first (ids the model samples decode to one
character each) and EOS goes after the padding.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

NO_EOS = "<no-eos>"  # the tokenizer's EOS: a token the model's logits do not cover
PROMPTS_FILE = "train_prompts.json"  # beside the model: the prompts TRL trains on
LR = 1e-6  # constant on both sides (TRL's default learning rate)
PAD_CHARS = 0x10000  # padding tokens are single characters from here on (no ASCII among them)


@dataclass(frozen=True)
class Sizes:
    gpu: float  # GPUs of a process that holds one (halves where two share it); 0 = all on the CPU
    iterations: int  # training iterations per placement
    eval_problems: int  # held-out problems scored before and after
    hidden: int  # (b): the model's shape
    layers: int
    intermediate: int
    heads: int
    prompts: int  # (b): the GRPO batch
    group: int
    tokens: int
    dtype: str
    updates: int  # (b): updates per side, the first `warmup` of them not measured
    warmup: int
    name: str = "403M"  # in the tables
    kv_heads: int | None = None  # grouped-query attention's key/value heads; None = heads
    vocab: int | None = None  # the model's vocabulary; None = the char tokenizer's 98
    attention_bias: bool = False
    trl_micro_batch: int | None = None  # TRL's per_device_train_batch_size; None = the batch


FULL = Sizes(gpu=1, iterations=150, eval_problems=500, hidden=1024, layers=24, intermediate=4096,
             heads=16, prompts=32, group=8, tokens=256, dtype="bfloat16", updates=5, warmup=1)
SMALL = Sizes(gpu=0, iterations=2, eval_problems=50, hidden=64, layers=2, intermediate=256,
              heads=4, prompts=4, group=4, tokens=16, dtype="float32", updates=2, warmup=1)
# 3 updates (2 measured): each side's update takes several times the 403M's (an estimate).
QWEN_1_5B = Sizes(gpu=1, iterations=150, eval_problems=500, hidden=1536, layers=28,
                  intermediate=8960, heads=12, kv_heads=2, vocab=151_936, attention_bias=True,
                  prompts=32, group=8, tokens=512, dtype="bfloat16", updates=3, warmup=1,
                  trl_micro_batch=32, name="1.5B")
QWEN_1_5B_SMALL = Sizes(gpu=0, iterations=2, eval_problems=50, hidden=64, layers=2,
                        intermediate=256, heads=4, kv_heads=2, vocab=1024, attention_bias=True,
                        prompts=4, group=4, tokens=16, dtype="float32", updates=2, warmup=1,
                        trl_micro_batch=4, name="1.5B (small stand-in)")
SHAPES = {"403m": (FULL, SMALL), "1.5b": (QWEN_1_5B, QWEN_1_5B_SMALL)}  # (GPU, --small)


def write_model(sizes: Sizes, out_dir: Path) -> dict:
    """A randomly initialised model of `sizes` with the embedded char tokenizer (its EOS never
    sampled: module docstring), saved to `out_dir` for `model_name_or_path` and TRL alike, with
    the prompts TRL trains on; its parameters, vocabulary, EOS id and mean prompt tokens."""
    import torch
    from rllib_llm.envs.datasets import load_problems
    from transformers import LlamaForCausalLM

    from rllib_llm.models import DTYPES, encode_prompt, load_tokenizer
    from rllib_llm.models.tiny_llama import tiny_llama_config

    tokenizer = load_tokenizer("embedded")
    vocab = sizes.vocab or len(tokenizer)
    if sizes.vocab is None:
        tokenizer.add_special_tokens({"eos_token": NO_EOS})
    else:
        tokenizer = padded_tokenizer(tokenizer, vocab, out_dir)
    config = tiny_llama_config(vocab, hidden_size=sizes.hidden, num_hidden_layers=sizes.layers,
                               num_attention_heads=sizes.heads,
                               intermediate_size=sizes.intermediate,
                               max_position_embeddings=sizes.tokens + 64,
                               pad_token_id=tokenizer.pad_token_id, eos_token_id=None)
    config.num_key_value_heads = sizes.kv_heads or sizes.heads
    config.attention_bias = sizes.attention_bias
    torch.manual_seed(0)
    device = "cuda" if sizes.gpu and torch.cuda.is_available() else "cpu"  # a faster init
    with torch.device(device):
        model = LlamaForCausalLM(config).to(DTYPES[sizes.dtype])
    model.generation_config.eos_token_id = None
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    params = model.num_parameters()
    # TRL's prompts: the training split our env samples from (env_config dataset "arithmetic").
    prompts = [p["prompt"] for p in load_problems("arithmetic", split="train")]
    (out_dir / PROMPTS_FILE).write_text(json.dumps(prompts))
    prompt_tokens = statistics.mean(len(encode_prompt(tokenizer, p)) for p in prompts)
    return {"parameters": params, "vocab": vocab, "eos_token_id": tokenizer.eos_token_id,
            "mean_prompt_tokens": prompt_tokens, "kv_heads": config.num_key_value_heads}


def padded_tokenizer(tokenizer, vocab: int, out_dir: Path):
    """`tokenizer` (the char tokenizer, a WordLevel model) with its vocabulary padded to `vocab`
    ids by single characters, and NO_EOS as its EOS at id `vocab`: saved to `out_dir`, loaded
    back. Padding through `add_tokens` instead made 151,838 added tokens, a 28 MB file and 13.5 s
    per load in every process; in the WordLevel vocabulary it loads in about a second."""
    from transformers import AutoTokenizer

    tokenizer.save_pretrained(out_dir)
    path = out_dir / "tokenizer.json"
    spec = json.loads(path.read_text())
    have = len(tokenizer)
    if spec["model"]["type"] != "WordLevel" or vocab < have:
        raise ValueError(f"cannot pad a {spec['model']['type']} tokenizer of {have} tokens to "
                         f"{vocab}")
    spec["model"]["vocab"].update({chr(PAD_CHARS + i): i for i in range(have, vocab)})
    spec["added_tokens"].append({"id": vocab, "content": NO_EOS, "single_word": False,
                                 "lstrip": False, "rstrip": False, "normalized": False,
                                 "special": True})
    path.write_text(json.dumps(spec))
    config_path = out_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["eos_token"] = NO_EOS
    config_path.write_text(json.dumps(config))
    padded = AutoTokenizer.from_pretrained(out_dir)
    if padded.eos_token_id != vocab or padded.pad_token_id != tokenizer.pad_token_id:
        raise ValueError(f"padded tokenizer: EOS {padded.eos_token_id} (wanted {vocab}), pad "
                         f"{padded.pad_token_id} (wanted {tokenizer.pad_token_id})")
    return padded
