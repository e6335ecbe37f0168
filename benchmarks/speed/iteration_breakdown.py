"""Time of one RLVR iteration by phase, against the raw backend and the floor, in one run.

    python benchmarks/speed/iteration_breakdown.py [--prompts 8 --group 4 --tokens 16 --iters 10]

Prints a Markdown table:
- generate / verify / learn / weight sync / other: mean seconds of the phases of an iteration
  (sampling in the driver, the default local setup);
- sampler throughput of the rollout engine against the backend's own `model.generate` (KV cache)
  on the same model and batch (goal: overhead <= 10%);
- the whole iteration against the floor: one batched `generate` plus one forward and backward
  over the same tokens (goal: <= 1.5x);
- peak RSS of the process.
"""

from __future__ import annotations

import argparse
import platform
import resource
import statistics
import time

import torch


def raw_generate_s(model, tok, prompts: list[list[int]], n: int, t: int) -> tuple[float, int]:
    """Seconds and generated tokens of one batched HF generate over the same prompts."""
    rows = [p for p in prompts for _ in range(n)]
    width = max(len(p) for p in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(rows):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, top_p=1.0,
                             temperature=1.0, max_new_tokens=t, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id)
    seconds = time.perf_counter() - start
    new = out[:, width:]
    return seconds, int((new != tok.pad_token_id).sum())


def forward_backward_s(model, batch: dict[str, torch.Tensor]) -> float:
    """One forward and backward of the causal LM over a packed learner batch."""
    start = time.perf_counter()
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                use_cache=False)
    out.logits.float().logsumexp(-1).mean().backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--variant", default="topr")
    args = parser.parse_args()

    import ray

    from rllib_llm.learner.packing import episode_tokens, pack
    from rllib_llm.recipes.embedded import embedded_config
    from rllib_llm.rollout.engine import SamplingParams

    ray.init(include_dashboard=False, log_to_driver=False)
    algo = embedded_config(args.variant, rollout_batch_size=args.prompts,
                           num_return_sequences_in_group=args.group,
                           response_length=args.tokens).build_algo()
    runner = algo.env_runner_group.local_env_runner
    tok = runner.env.tokenizer
    learner_model = algo.learner_group.local_learner.module["default_policy"].model
    phases = {k: [] for k in ("generate", "verify", "learn", "weight_sync", "other", "total")}
    engine_tps, raw_tps, floor = [], [], []
    for i in range(args.iters + 2):  # the first two iterations warm up
        start = time.perf_counter()
        result = algo.train()
        total = time.perf_counter() - start
        # Same batch through the raw backend and the floor, right after the real iteration.
        prompts = [runner.env.reset()[1]["prompt_ids"] for _ in range(args.prompts)]
        t0 = time.perf_counter()
        responses = runner.engine.generate(prompts, args.group,
                                           SamplingParams(max_tokens=args.tokens))
        engine_s = time.perf_counter() - t0
        engine_tokens = sum(len(r.token_ids) for g in responses for r in g)
        raw_s, raw_tokens = raw_generate_s(runner.engine.model, tok, prompts, args.group,
                                           args.tokens)
        episodes = runner.sample()
        fb_s = forward_backward_s(learner_model, pack([episode_tokens(e) for e in episodes],
                                                      tok.pad_token_id))
        if i < 2:
            continue
        r, timers = result["env_runners"], result["timers"]
        phases["generate"].append(r["time_generate_s"])
        # "verify": verifying and replaying into episodes (one timer before they were split).
        phases["verify"].append(r["time_verify_s"] + r["time_replay_s"])
        # RLVR logs its phase timers with window=1: these are this iteration's values.
        phases["learn"].append(timers["learn"])
        phases["weight_sync"].append(timers["weight_sync"])
        phases["total"].append(total)
        phases["other"].append(total - r["time_generate_s"] - phases["verify"][-1]
                               - timers["learn"] - timers["weight_sync"])
        engine_tps.append(engine_tokens / engine_s)
        raw_tps.append(raw_tokens / raw_s)
        floor.append(raw_s + fb_s)
    algo.stop()
    ray.shutdown()

    mean = {k: statistics.mean(v) for k, v in phases.items()}
    print(f"\nmachine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} "
          f"torch threads; batch {args.prompts} prompts x {args.group} samples x "
          f"{args.tokens} tokens, pg_variant={args.variant}, {args.iters} iterations\n")
    print("| phase | mean s | share |")
    print("|---|---|---|")
    for k in ("generate", "verify", "learn", "weight_sync", "other"):
        print(f"| {k} | {mean[k]:.4f} | {mean[k] / mean['total']:.0%} |")
    print(f"| **iteration** | {mean['total']:.4f} | 100% |\n")
    e, raw = statistics.mean(engine_tps), statistics.mean(raw_tps)
    print("| measure | value |")
    print("|---|---|")
    print(f"| rollout engine tokens/s | {e:,.0f} |")
    print(f"| raw model.generate tokens/s | {raw:,.0f} |")
    print(f"| engine overhead vs raw generate | {raw / e - 1:+.1%} |")
    print(f"| floor (generate + fwd/bwd) s | {statistics.mean(floor):.4f} |")
    print(f"| iteration / floor | {mean['total'] / statistics.mean(floor):.2f}x |")
    print(f"| peak RSS | {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB |")


if __name__ == "__main__":
    main()
