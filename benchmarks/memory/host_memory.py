"""Host memory of whole training iterations as the batch grows, with both token budgets fixed.

    python benchmarks/memory/host_memory.py [--responses 64 512 --iterations 8 --tokens 48]

Each batch size runs in a fresh subprocess with one torch thread: RLVR on the embedded task in
one process (the learner samples with its own model), a random Llama of 6 layers, hidden 384,
on the embedded tokenizer, PPO's loss on group-normalised advantages, `--responses` responses an
iteration (groups of 8) of up to
`--tokens` tokens, `max_tokens_per_generate_batch` and `max_tokens_per_micro_batch` both 4,096.
After each iteration the process's resident memory (VmRSS) is read, and its peak (VmHWM) at the
end. With both budgets fixed, memory that grows with the batch is memory no budget bounds: the
table's last column is its size per response token, (RSS at the larger batch - RSS at the
smaller) / (their difference in response tokens), after the last iteration. Each size runs
twice: as the learner runs now (freed memory handed back after each update,
rllib_llm/exchange/host_memory.py) and as it ran before (kept in the C heap).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
from pathlib import Path

# harness.py is shared by every folder of benchmarks/, so it sits one level up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import rss_mib, run_child  # noqa: E402

BUDGET = 4096
GROUP = 8


def write_model(path: str) -> None:
    """A randomly initialised 6-layer Llama of hidden 384 with the embedded tokenizer."""
    import torch
    from transformers import LlamaForCausalLM

    from rllib_llm.models import load_tokenizer
    from rllib_llm.models.tiny_llama import tiny_llama_config

    tokenizer = load_tokenizer("embedded")
    config = tiny_llama_config(len(tokenizer), hidden_size=384, num_hidden_layers=6,
                               num_attention_heads=6, intermediate_size=1536,
                               max_position_embeddings=256, pad_token_id=tokenizer.pad_token_id,
                               eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


def measure(args: argparse.Namespace) -> dict:
    import ray
    import torch

    from rllib_llm.recipes.embedded import embedded_config
    from rllib_llm.rollout.sample_metrics import RESPONSE_LENGTH_MEAN

    torch.set_num_threads(1)
    if not args.trim:  # before: freed memory stays in the C heap (rllib_llm before 2026-11-27)
        import rllib_llm.learner.learner as learner_module

        learner_module.release_freed_memory = lambda: False
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    config = embedded_config(
        "ppo", seed=0, model_name_or_path=args.model, rollout_batch_size=args.responses // GROUP,
        num_return_sequences_in_group=GROUP, response_length=args.tokens,
        max_tokens_per_generate_batch=BUDGET, max_tokens_per_micro_batch=BUDGET,
        num_torch_threads=1,
    )
    algo = config.build_algo()
    rss, tokens = [], []
    for _ in range(args.iterations):
        result = algo.train()
        rss.append(rss_mib("VmRSS"))
        tokens.append(args.responses * result["env_runners"][RESPONSE_LENGTH_MEAN])
    out = {"rss_mib": rss, "peak_mib": rss_mib("VmHWM"), "tokens": statistics.mean(tokens)}
    algo.stop()
    ray.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--responses", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--no-trim", dest="trim", action="store_false", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import json

        args.responses = args.responses[0]
        print(json.dumps(measure(args)))
        return
    with tempfile.TemporaryDirectory() as model:
        write_model(model)
        rows = {(trim, n): run_child([sys.executable, __file__, "--child", "--model", model,
                                      "--responses", str(n), "--iterations",
                                      str(args.iterations), "--tokens", str(args.tokens),
                                      *([] if trim else ["--no-trim"])])
                for trim in (False, True) for n in args.responses}
    print(f"Host memory of {args.iterations} iterations, budgets {BUDGET:,} tokens, up to "
          f"{args.tokens} response tokens; one torch thread; "
          f"{platform.processor() or platform.machine()}, {platform.system()}\n")
    print("| freed memory | responses | response tokens / iteration | RSS after each iteration "
          "MiB | peak MiB | MiB over the smallest | KiB per extra token |")
    print("|---|---|---|---|---|---|---|")
    for trim in (False, True):
        label = "returned after each update" if trim else "kept in the heap (before)"
        first = rows[trim, args.responses[0]]
        for n in args.responses:
            r = rows[trim, n]
            if "error" in r or "error" in first:
                print(f"| {label} | {n} | {r.get('error') or first['error']} |||||")
                continue
            extra = r["rss_mib"][-1] - first["rss_mib"][-1]
            tokens = r["tokens"] - first["tokens"]
            per_token = f"{extra * 1024 / tokens:.1f}" if tokens else "-"
            print(f"| {label} | {n} | {r['tokens']:,.0f} | "
                  f"{', '.join(f'{x:.0f}' for x in r['rss_mib'])} | {r['peak_mib']:.0f} | "
                  f"{extra:.0f} | {per_token} |")


if __name__ == "__main__":
    main()
