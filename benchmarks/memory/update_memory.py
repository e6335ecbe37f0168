"""Peak memory of one learner update as the batch grows, with and without a token budget.

    python benchmarks/memory/update_memory.py [--responses 64 256 1024 --prompt 16 --tokens 112]

Each (responses, budget) pair runs in a fresh subprocess with one torch thread: the RLVR
algorithm of the embedded task in one process builds its learner; a batch of `--responses`
rows, all of the same length (`--prompt` random prompt tokens and `--tokens` response tokens:
no early EOS, so the batch is exactly responses x length tokens), goes through what an iteration
does with it — a no-grad scoring pass (the old log-probs, as recompute_old_logp does) and one
optimizer step (PPO's loss, through the learner's public `update`, RLlib's way in for a batch
that is already the connector's output) — after a warm-up on a small batch (Adam's state
exists). The process's peak RSS is reset before (VmHWM) and read after: the update's peak above
its start.

Budgets: the default `max_tokens_per_micro_batch` and None (the whole mini-batch in one
forward, what the learner did before the budget existed). Prints a Markdown table: tokens,
peak MiB, the ratio to the smallest batch's peak, and seconds per 1,000 tokens.

`--demo-shape N` instead times the learner at the demo's own shape (the embedded task's
defaults: 64 prompts x 8 responses of up to 6 tokens, sampled) for N iterations after one
warm-up, each budget in a fresh process: the learner's tokens/s (median).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

# harness.py is shared by every folder of benchmarks/, so it sits one level up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import reset_peak_rss, rss_mib, run_child  # noqa: E402


def batch_of(rows: int, prompt: int, tokens: int, vocab: int, seed: int) -> dict:
    """A learner batch (the connector's output) of `rows` full-length responses."""
    import torch

    from rllib_llm.exchange.columns import CORRECT

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (rows, prompt + tokens), generator=g)
    return {
        "input_ids": ids, "attention_mask": torch.ones_like(ids),
        "response_ids": ids[:, prompt:].clone(),
        "action_mask": torch.ones(rows, tokens),
        "old_logp": torch.full((rows, tokens), -3.0),
        "advantages": torch.randn(rows, tokens, generator=g),
        "scores": torch.zeros(rows), CORRECT: torch.zeros(rows),
    }


def measure(args: argparse.Namespace) -> dict:
    import ray
    import torch
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

    from rllib_llm.recipes.embedded import embedded_config

    torch.set_num_threads(1)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    budget = None if args.budget == "none" else int(args.budget)
    config = embedded_config("ppo", seed=0, rollout_batch_size=args.responses,
                             num_return_sequences_in_group=1, adv_estimator="reinforce",
                             response_length=args.tokens, prompt_length=args.prompt,
                             max_tokens_per_micro_batch=budget, num_torch_threads=1)
    algo = config.build_algo()
    learner = algo.learner_group.local_learner
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    vocab = module.model.config.vocab_size

    def iteration(rows: int, seed: int) -> None:
        batch = batch_of(rows, args.prompt, args.tokens, vocab, seed)
        batch["old_logp"] = module.score_tokens(batch, reference=False)
        learner.update(batch=MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(batch)},
                                             env_steps=rows))

    iteration(8, seed=1)  # warm-up: Adam's state, allocator pools
    before = reset_peak_rss()
    start = time.perf_counter()
    iteration(args.responses, seed=2)
    seconds = time.perf_counter() - start
    result = {"tokens": args.responses * (args.prompt + args.tokens),
              "peak_mib": rss_mib("VmHWM") - before, "seconds": seconds}
    algo.stop()
    ray.shutdown()
    return result


def time_demo_shape(args: argparse.Namespace) -> dict:
    import statistics

    import ray
    import torch

    from rllib_llm.recipes.embedded import embedded_config

    torch.set_num_threads(1)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    budget = None if args.budget == "none" else int(args.budget)
    algo = embedded_config("topr", seed=0, max_tokens_per_micro_batch=budget,
                           num_torch_threads=1).build_algo()
    rates = []
    for i in range(args.demo_shape + 1):
        learner = algo.train()["learners"]["default_policy"]
        if i:  # (the first is a warm-up)
            rates.append(learner["learner_tokens_per_s"])
    algo.stop()
    ray.shutdown()
    return {"tokens_per_s": statistics.median(rates)}


def print_demo_shape(args: argparse.Namespace, budgets: tuple[str, ...]) -> None:
    print(f"The demo's shape, {args.demo_shape} iterations after one warm-up, one torch thread; "
          f"{platform.processor() or platform.machine()}, {platform.system()}\n")
    print("| max_tokens_per_micro_batch | learner tokens/s (median) | vs None |")
    print("|---|---|---|")
    rows = {b: run_child([sys.executable, __file__, "--child", "--budget", b, "--demo-shape",
                          str(args.demo_shape)]) for b in budgets}
    base = rows["none"].get("tokens_per_s")
    for budget, r in rows.items():
        if "error" in r:
            print(f"| {budget} | {r['error']} ||")
            continue
        ratio = f"{r['tokens_per_s'] / base:.2f}x" if base else "-"
        print(f"| {budget} | {r['tokens_per_s']:,.0f} | {ratio} |")


def main() -> None:
    from rllib_llm.algorithm.fields import DEFAULT_MICRO_BATCH_TOKENS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--responses", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=112)
    parser.add_argument("--demo-shape", type=int, default=0, metavar="N",
                        help="time the learner at the demo's shape for N iterations instead")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--budget", help=argparse.SUPPRESS)
    args = parser.parse_args()
    budgets = (str(DEFAULT_MICRO_BATCH_TOKENS), "none")
    if args.child:
        args.responses = args.responses[0]
        print(json.dumps(time_demo_shape(args) if args.demo_shape else measure(args)))
        return
    if args.demo_shape:
        print_demo_shape(args, budgets)
        return
    print(f"embedded model, responses of {args.prompt} + {args.tokens} tokens, PPO loss, one "
          f"scoring pass + one optimizer step, one torch thread; "
          f"{platform.processor() or platform.machine()}, {platform.system()}\n")
    print("| max_tokens_per_micro_batch | responses | tokens | update's peak MiB "
          "| vs the smallest batch | s per 1k tokens |")
    print("|---|---|---|---|---|---|")
    for budget in budgets:
        first = None
        for responses in args.responses:
            r = run_child([sys.executable, __file__, "--child", "--budget", budget,
                           "--responses", str(responses), "--prompt", str(args.prompt),
                           "--tokens", str(args.tokens)])
            if "error" in r:
                print(f"| {budget} | {responses} | {r['error']} ||||")
                continue
            first = first or r["peak_mib"]
            print(f"| {budget} | {responses} | {r['tokens']} | {r['peak_mib']:.0f} "
                  f"| {r['peak_mib'] / first:.2f}x | {1000 * r['seconds'] / r['tokens']:.3f} |",
                  flush=True)


if __name__ == "__main__":
    main()
