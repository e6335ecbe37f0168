"""The main job (`make demo`): TOPR on the embedded default, held-out accuracy before and after.

    python -m rllib_llm.demo [--pg-variant topr] [--minutes 4.4] [--run-dir runs/demo]

Trains the tiny char-level Llama shipped with rllib_llm on arithmetic problems with the
math-verify reward, printing one progress line per iteration, and writes metrics.csv,
metrics.jsonl, summary.json and reward_curve.png into the run directory.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from rllib_llm.presets import embedded_config


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-variant", default="topr")
    parser.add_argument("--engine", default="torch", help="rollout engine: torch or vllm")
    parser.add_argument("--minutes", type=float, default=4.4, help="training time budget")
    parser.add_argument("--max-iterations", type=int, default=100_000)
    parser.add_argument("--eval-problems", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-dir", default=None)
    args = parser.parse_args(argv)

    import ray

    from rllib_llm.run_log import RunLog

    run_dir = Path(args.run_dir or f"runs/demo-{args.pg_variant}-{time.strftime('%Y%m%d-%H%M%S')}")
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
             ignore_reinit_error=True)
    config = embedded_config(args.pg_variant, seed=args.seed)
    config = config.env_runners(rollout_engine=args.engine)
    algo = config.build_algo()
    log = RunLog(run_dir)
    print(f"rllib_llm demo: pg_variant={args.pg_variant}, engine={args.engine}, "
          f"budget {args.minutes} min, run dir {run_dir}")
    before = algo.evaluate_accuracy(num_problems=args.eval_problems)
    print(f"held-out accuracy before: {before['pass@1']:.3f} ({before['num_problems']} problems)")
    start = time.perf_counter()
    iteration = 0
    while iteration < args.max_iterations and time.perf_counter() - start < args.minutes * 60:
        iteration += 1
        row = log.add(iteration, algo.train())
        print(log.progress_line(row), flush=True)
    after = algo.evaluate_accuracy(num_problems=args.eval_problems)
    gain = after["pass@1"] - before["pass@1"]
    print(f"held-out accuracy after:  {after['pass@1']:.3f} "
          f"({gain * 100:+.1f} points in {iteration} iterations, "
          f"{time.perf_counter() - start:.0f} s)")
    summary = {
        "title": f"{args.pg_variant} on the embedded default",
        "pg_variant": args.pg_variant,
        "iterations": iteration,
        "train_seconds": time.perf_counter() - start,
        "eval_before": before,
        "eval_after": after,
        "accuracy_gain_points": gain * 100,
    }
    log.finish(summary)
    print(f"wrote {run_dir}/metrics.csv, metrics.jsonl, summary.json, reward_curve.png")
    algo.stop()
    ray.shutdown()
    return summary


if __name__ == "__main__":
    main()
