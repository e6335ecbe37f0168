"""VAPO's ablations on the embedded task: what each critic technique is worth here.

    python benchmarks/learning/critic_ablation.py [--iterations 100 --seeds 0 1 2
        --out ablation.json]

Trains each variant for the same number of iterations with the same seeds and the same sample
budget (EMBEDDED_RESPONSES responses per iteration; value-pretraining iterations count against
it), and prints a Markdown table of held-out accuracy (500 problems, 4 samples each) before and
after: mean +- standard deviation over the seeds, and seconds per iteration measured in this run.

Variants: vapo (rllib_llm.recipes.embedded.embedded_preset_config("vapo"), whose length-adaptive
alpha is sized for 6-token responses), vapo with the paper's alpha 0.05 (lambda 0 at these lengths),
vapo without value pretraining, without decoupled GAE (the critic's returns use the actor's
lambda), without length-adaptive lambda (lambda 0.95), without group sampling (1 response for each
of 512 prompts), and the ppo and grpo presets.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np
import ray

from rllib_llm.recipes.embedded import embedded_preset_config

VARIANTS = {
    "vapo": ("vapo", {}),
    "vapo, the paper's alpha 0.05": ("vapo", {"length_adaptive_alpha": 0.05}),
    "vapo - value pretraining": ("vapo", {"value_pretrain_steps": 0}),
    "vapo - decoupled GAE": ("vapo", {"critic_lambd": None}),
    "vapo - length-adaptive lambda": ("vapo", {"length_adaptive_alpha": None}),
    # Group sampling: 1 response for each of 512 prompts instead of 16 for each of 32.
    "vapo - group sampling": ("vapo", {"num_return_sequences_in_group": 1,
                                       "rollout_batch_size": 512}),
    "ppo": ("ppo", {}),
    "grpo": ("grpo", {}),
}
EVAL_PROBLEMS, EVAL_SAMPLES = 500, 4


def held_out_accuracy(algo) -> float:
    return float(np.mean([algo.evaluate_accuracy(num_problems=EVAL_PROBLEMS, seed=s)["pass@1"]
                          for s in range(EVAL_SAMPLES)]))


def run(variant: str, seed: int, iterations: int) -> dict:
    preset, overrides = VARIANTS[variant]
    algo = embedded_preset_config(preset, seed=seed, **overrides).build_algo()
    before = held_out_accuracy(algo)
    start = time.perf_counter()
    for _ in range(iterations):
        result = algo.train()
    seconds = time.perf_counter() - start
    after = held_out_accuracy(algo)
    learner = result["learners"]["default_policy"]
    algo.stop()
    return {"variant": variant, "seed": seed, "before": before, "after": after,
            "s_per_iter": seconds / iterations,
            "explained_variance": learner.get("explained_variance")}


def table(runs: list[dict]) -> str:
    rows = ["| variant | held-out before | after | gain (points) | s / iteration |",
            "|---|---|---|---|---|"]
    for variant in VARIANTS:
        mine = [r for r in runs if r["variant"] == variant]
        if not mine:
            continue

        def stat(values, scale=100.0):
            values = [v * scale for v in values]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            return f"{statistics.mean(values):.1f} ± {spread:.1f}"

        gains = [r["after"] - r["before"] for r in mine]
        rows.append(f"| {variant} | {stat([r['before'] for r in mine])} | "
                    f"{stat([r['after'] for r in mine])} | {stat(gains)} | "
                    f"{stat([r['s_per_iter'] for r in mine], 1.0)} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--out", help="append each run as a JSON line to this file")
    parser.add_argument("--table-from", help="print the table of the runs in this JSON-lines file "
                                             "(written by --out) and exit")
    args = parser.parse_args()
    if args.table_from:
        with open(args.table_from) as f:
            print(table([json.loads(line) for line in f if line.strip()]))
        return
    ray.init(include_dashboard=False, log_to_driver=False)
    runs = []
    for seed in args.seeds:  # seed-major: a cut-short run still compares every variant
        for variant in args.variants:
            runs.append(run(variant, seed, args.iterations))
            print(json.dumps(runs[-1]), flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(runs[-1]) + "\n")
    print(f"\n{args.iterations} iterations, seeds {args.seeds}, {platform.processor() or ''} "
          f"{platform.machine()}\n")
    print(table(runs))
    ray.shutdown()


if __name__ == "__main__":
    main()
