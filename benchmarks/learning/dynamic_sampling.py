"""DAPO's dynamic sampling against plain GRPO on the embedded task, at the same sample budget.

    python benchmarks/learning/dynamic_sampling.py [--budget 20480 --seeds 0 1]

Both train GRPO ("ppo" loss, group advantages, 8 responses per prompt, the embedded settings)
until they have sampled `--budget` responses (plain: budget / 512 iterations; dynamic: its
iterations sample more, so it runs fewer). The table gives held-out pass@1 (500 problems, one
sample each with the evaluation settings) before and after, optimizer updates, the share of
uninformative groups sampled, responses sampled per informative group trained on, and seconds
per sampled response measured in this run.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import ray
from seeded_runs import accuracy_cells, column, percent, run_all, table

from rllib_llm.recipes.embedded import EMBEDDED_TRAINING, embedded_config

GROUP = 8
VARIANTS = {"grpo": {}, "grpo + dynamic sampling": {"dynamic_sampling": True,
                                                      "dynamic_sampling_max_rounds": 4}}


def run(variant: str, seed: int, budget: int) -> dict:
    config = embedded_config("ppo", seed=seed, adv_estimator="grpo",
                             num_return_sequences_in_group=GROUP, **VARIANTS[variant])
    per_round = config.rollout_batch_size * GROUP
    algo = config.build_algo()
    before = algo.evaluate_accuracy(num_problems=500, seed=0)["pass@1"]
    sampled = iterations = 0
    uninformative, per_group = [], []
    start = time.perf_counter()
    while sampled < budget:
        result = algo.train()
        iterations += 1
        stats = result.get("dynamic_sampling")
        sampled += int(stats["responses_sampled"]) if stats else per_round
        if stats:
            uninformative.append(stats["uninformative_fraction"])
            per_group.append(stats["samples_per_informative_group"])
    seconds = time.perf_counter() - start
    after = algo.evaluate_accuracy(num_problems=500, seed=0)["pass@1"]
    algo.stop()
    return {"variant": variant, "seed": seed, "before": before, "after": after,
            "iterations": iterations, "sampled": sampled, "s_per_response": seconds / sampled,
            "uninformative_fraction": statistics.mean(uninformative) if uninformative else None,
            "samples_per_informative_group": statistics.mean(per_group) if per_group else None}


HEADER = ("variant", "held-out before", "after", "gain (points)", "updates",
          "uninformative groups sampled", "responses per informative group",
          "ms / sampled response")


def cells(mine: list[dict]) -> list[str]:
    return [*accuracy_cells(mine), column(mine, "iterations", digits=0),
            percent(column(mine, "uninformative_fraction", 100)),
            column(mine, "samples_per_informative_group"),
            column(mine, "s_per_response", 1000, 2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=40 * EMBEDDED_TRAINING.get(
        "rollout_batch_size", 64) * GROUP, help="responses sampled per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--out", help="append each run as a JSON line to this file")
    args = parser.parse_args()
    ray.init(include_dashboard=False, log_to_driver=False)
    runs = run_all(list(VARIANTS), args.seeds,
                   lambda variant, seed: run(variant, seed, args.budget), args.out)
    print(f"\nbudget {args.budget} responses, seeds {args.seeds}, {platform.machine()}\n")
    print(table(runs, VARIANTS, HEADER, cells))


if __name__ == "__main__":
    main()
