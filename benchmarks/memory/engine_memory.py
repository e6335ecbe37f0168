"""The torch engine's peak memory while generating, against the formula of its KV cache.

    python benchmarks/memory/engine_memory.py [--prompts 32 --group 8 --tokens 256]

The embedded model generates `--prompts` x `--group` responses of exactly `--tokens` tokens (its
EOS replaced by an id past the vocabulary, so no row stops early) in a fresh process with one
torch thread, once per `max_tokens_per_batch` budget (None, the default of
`max_tokens_per_generate_batch`, and a quarter of the batch). Each measured `generate` follows a
warm-up one; the peak RSS is reset before it (`/proc/self/clear_refs`), and its rise is the
call's peak extra memory. glibc maps blocks of 1 MiB or more on their own
(`MALLOC_MMAP_THRESHOLD_`), so freed caches go back at once (tests/rollout/test_engine_memory.py
says why).

The formula, per decode batch (chunk): rows x (prompt + tokens) x layers x 2 x kv_heads x
head_dim x 4 bytes of KV cache, plus the preallocated attention mask, tokens and log-probs, plus
a step's logits. Prints a Markdown table: rows per chunk, formula MiB, measured MiB, ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

# harness.py is shared by every folder of benchmarks/, so it sits one level up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import reset_peak_rss, rss_mib, run_child  # noqa: E402

PROMPT_LEN = 8


def peak_extra_mib(args: argparse.Namespace) -> dict:
    import torch

    from rllib_llm.models import load_model
    from rllib_llm.rollout.engine import SamplingParams
    from rllib_llm.rollout.torch_engine import TorchRolloutEngine

    torch.set_num_threads(1)
    model = load_model("embedded").eval()
    vocab = model.config.vocab_size
    prompts = [[3 + (i + j) % (vocab - 3) for j in range(PROMPT_LEN)] for i in range(args.prompts)]
    budget = None if args.budget == "none" else int(args.budget)
    engine = TorchRolloutEngine(model, eos_token_id=vocab, pad_token_id=0,
                                max_tokens_per_batch=budget)
    engine.generate(prompts[:2], 2, SamplingParams(max_tokens=8, seed=0))  # warm-up

    before = reset_peak_rss()
    out = engine.generate(prompts, args.group, SamplingParams(max_tokens=args.tokens, seed=1))
    assert all(len(r.token_ids) == args.tokens for group in out for r in group)
    config = model.config
    return {"peak_mib": rss_mib("VmHWM") - before, "layers":
            config.num_hidden_layers, "kv_heads": config.num_key_value_heads,
            "head_dim": config.head_dim, "vocab": vocab}


def formula_mib(rows: int, length: int, tokens: int, shape: dict) -> float:
    kv_cache = rows * length * shape["layers"] * 2 * shape["kv_heads"] * shape["head_dim"] * 4
    rest = rows * tokens * 12 + rows * length * 8 + rows * shape["vocab"] * 16
    return (kv_cache + rest) / 2**20


def main() -> None:
    from rllib_llm.algorithm.fields import DEFAULT_GENERATE_TOKENS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--budget", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(peak_extra_mib(args)))
        return
    rows, length = args.prompts * args.group, PROMPT_LEN + args.tokens
    budgets = ["none", str(DEFAULT_GENERATE_TOKENS), str(rows * length // 4)]
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(1 << 20)  # (run_child's children inherit it)
    print(f"embedded model, {args.prompts} prompts x {args.group} responses x {args.tokens} "
          f"tokens (prompts of {PROMPT_LEN}), float32, one torch thread; "
          f"{platform.processor() or platform.machine()}, {platform.system()}\n")
    print("| max_tokens_per_batch | rows per chunk | formula MiB (one chunk) | measured peak MiB "
          "| measured / formula |")
    print("|---|---|---|---|---|")
    for budget in budgets:
        r = run_child([sys.executable, __file__, "--child", "--budget", budget, "--prompts",
                       str(args.prompts), "--group", str(args.group), "--tokens",
                       str(args.tokens)])
        if "error" in r:
            print(f"| {budget} | {r['error']} ||||")
            continue
        chunk = rows if budget == "none" else min(rows, int(budget) // length)
        formula = formula_mib(chunk, length, args.tokens, r)
        print(f"| {budget} | {chunk} | {formula:.1f} | {r['peak_mib']:.1f} "
              f"| {r['peak_mib'] / formula:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
