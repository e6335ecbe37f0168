"""DAPO's overlong shaping on the embedded task: what the soft punishment and the filtering do to
truncation, response length and held-out accuracy, against plain GRPO.

    python benchmarks/learning/overlong_shaping.py [--iterations 40 --seeds 0 1]

Every variant trains GRPO ("ppo" loss, group advantages, 8 responses per prompt, the embedded
settings: responses of at most 6 tokens) for the same iterations. The table gives held-out pass@1
(500 problems, one sample each) before and after, the share of sampled responses cut off at the
limit without EOS (truncated) and the mean response length, each over the first and the last 5
iterations, and the mean overlong penalty added to the scores.
"""

from __future__ import annotations

import argparse
import platform
import statistics

import ray
from seeded_runs import accuracy_cells, column, percent, run_all, table

from rllib_llm.recipes.embedded import embedded_config

GROUP = 8
WINDOW = 5  # iterations averaged at the start and at the end
LEARNER = "learners/default_policy"
VARIANTS = {
    "grpo": {},
    "+ overlong punishment, L_cache 'auto' (1 of 6)": {"overlong_buffer_len": "auto"},
    "+ overlong punishment, L_cache 3": {"overlong_buffer_len": 3},
    "+ truncated responses masked": {"mask_truncated_completions": True},
}


def lookup(result: dict, path: str) -> float | None:
    for key in path.split("/"):
        if not isinstance(result, dict) or key not in result:
            return None
        result = result[key]
    return float(result)


def run(variant: str, seed: int, iterations: int) -> dict:
    config = embedded_config("ppo", seed=seed, adv_estimator="grpo",
                             num_return_sequences_in_group=GROUP, **VARIANTS[variant])
    algo = config.build_algo()
    before = algo.evaluate_accuracy(num_problems=500, seed=0)["pass@1"]
    truncated, lengths, penalties = [], [], []
    for _ in range(iterations):
        result = algo.train()
        truncated.append(lookup(result, f"{LEARNER}/truncated_fraction"))
        lengths.append(lookup(result, "env_runners/response_length_mean"))
        penalties.append(lookup(result, f"{LEARNER}/overlong_penalty_mean"))
    after = algo.evaluate_accuracy(num_problems=500, seed=0)["pass@1"]
    algo.stop()

    def mean(values: list[float | None]) -> float | None:
        values = [v for v in values if v is not None]
        return statistics.mean(values) if values else None

    return {"variant": variant, "seed": seed, "before": before, "after": after,
            "truncated_first": mean(truncated[:WINDOW]),
            "truncated_last": mean(truncated[-WINDOW:]),
            "length_first": mean(lengths[:WINDOW]), "length_last": mean(lengths[-WINDOW:]),
            "penalty_mean": mean(penalties)}


HEADER = ("variant", "held-out before", "after", "gain (points)",
          f"truncated, first {WINDOW} iterations", f"truncated, last {WINDOW}",
          f"response length, first {WINDOW}", f"last {WINDOW}", "overlong penalty mean")


def cells(mine: list[dict]) -> list[str]:
    return [*accuracy_cells(mine),
            percent(column(mine, "truncated_first", 100, 2)),
            percent(column(mine, "truncated_last", 100, 2)),
            column(mine, "length_first", digits=2), column(mine, "length_last", digits=2),
            column(mine, "penalty_mean", digits=3)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--out", help="append each run as a JSON line to this file")
    args = parser.parse_args()
    ray.init(include_dashboard=False, log_to_driver=False)
    runs = run_all(list(VARIANTS), args.seeds,
                   lambda variant, seed: run(variant, seed, args.iterations), args.out)
    print(f"\n{args.iterations} iterations, seeds {args.seeds}, {platform.machine()}\n")
    print(table(runs, VARIANTS, HEADER, cells))


if __name__ == "__main__":
    main()
