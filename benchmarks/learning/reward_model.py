"""Reward models on the embedded task: training against the shipped classifier's reward alone,
the verifier's alone, and both, measured by held-out VERIFIER accuracy (benchmarks/RESULTS.md,
"Reward models").

    python benchmarks/learning/reward_model.py --iterations 150 --seed 1

Each run is the embedded recipe (`embedded_config("ppo")`: GRPO advantages, no KL) with
`reward_weights` [verifier, model] = [0, 1] (the model's reward alone, `embedded_reward` served by
one reward worker), [1, 0] without a reward model (the verifier alone), or [1, 1] (both); the
held-out accuracy is the mean of `--eval-samples` samples on each of the 500 test problems,
checked by the verifier, before and after. It prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import ray

from rllib_llm.recipes.embedded import embedded_config

RUNS = {
    "model": ("reward model alone ([0, 1])", {"reward_model_name_or_path": "embedded_reward",
                                              "reward_weights": [0.0, 1.0]}),
    "verifier": ("verifier alone (no reward model)", {}),
    "both": ("both ([1, 1])", {"reward_model_name_or_path": "embedded_reward",
                               "reward_weights": [1.0, 1.0]}),
}


def held_out_accuracy(algo, samples: int) -> float:
    return float(np.mean([algo.evaluate_accuracy(num_problems=500, seed=s)["pass@1"]
                          for s in range(samples)]))


def run(settings: dict, iterations: int, seed: int, samples: int) -> tuple[float, ...]:
    algo = embedded_config("ppo", seed=seed, **settings).build_algo()
    before = held_out_accuracy(algo, samples)
    start = time.perf_counter()
    model_scores = []
    for _ in range(iterations):
        result = algo.train()
        model_scores.append(result.get("reward_model", {}).get("model_score_mean", np.nan))
    elapsed = time.perf_counter() - start
    after = held_out_accuracy(algo, samples)
    algo.stop()
    first, last = np.mean(model_scores[:10]), np.mean(model_scores[-10:])
    return before, after, first, last, elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=150)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--eval-samples", type=int, default=2)
    parser.add_argument("--runs", nargs="+", choices=sorted(RUNS), default=list(RUNS))
    args = parser.parse_args(argv)
    # Ray's workers run at niceness 15 by default; the reward worker is one, and on cores
    # shared with other runs it would wait behind them every iteration.
    os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    print("| run | held-out accuracy before | after | gain (points) | reward model's mean score, "
          "first -> last 10 iterations | s of training |")
    print("|---|---|---|---|---|---|")
    for name, settings in (RUNS[run_name] for run_name in args.runs):
        before, after, first, last, elapsed = run(settings, args.iterations, args.seed,
                                                  args.eval_samples)
        scores = "(none)" if np.isnan(first) else f"{first:.3f} -> {last:.3f}"
        print(f"| {name} | {before * 100:.1f}% | {after * 100:.1f}% | "
              f"{(after - before) * 100:+.1f} | {scores} | {elapsed:.0f} |", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
