"""The main job (`make demo`): TOPR on the embedded default, held-out accuracy before and after.

    python -m rllib_llm.recipes.demo [--pg-variant topr] [--iterations 300] [--minutes M]
                                     [--run-dir DIR]

Trains the tiny char-level Llama shipped with rllib_llm on arithmetic problems with the
math-verify reward, printing one progress line per iteration, and writes metrics.csv,
metrics.jsonl, summary.json and reward_curve.png into the run directory.

The budget is a number of iterations, so the result does not depend on the machine: a slower one
reaches the same accuracy after the same iterations, only later. `--minutes` caps the wall-clock
time on top (stopping early, with a smaller gain, on a slow machine).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from rllib_llm.recipes.embedded import DEMO_ITERATIONS, demo_config, embedded_preset_config


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-variant", default="topr")
    parser.add_argument("--preset", default=None,
                        help="an algorithm preset instead (ppo, vc_ppo, vapo, grpo, ...: "
                             "RLVRConfig.preset), sized for the embedded task; sets its own "
                             "pg_variant")
    parser.add_argument("--engine", default="torch", help="rollout engine: torch or vllm")
    parser.add_argument("--iterations", type=int, default=DEMO_ITERATIONS,
                        help="training iterations (the budget)")
    parser.add_argument("--minutes", type=float, default=None,
                        help="optional cap on training time: stop early when it runs out")
    parser.add_argument("--eval-problems", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-dir", default=None)
    return parser.parse_args(argv)


def train(algo, log, iterations: int, minutes: float | None) -> tuple[int, float]:
    """Up to `iterations` iterations, fewer if `minutes` run out: (iterations done, seconds)."""
    start = time.perf_counter()
    deadline = start + (float("inf") if minutes is None else minutes * 60)
    done = 0
    while done < iterations and time.perf_counter() < deadline:
        done += 1
        row = log.add(done, algo.train())
        print(log.progress_line(row), flush=True)
    return done, time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    import ray

    from rllib_llm.outputs.run_log import RunLog

    name = args.preset or args.pg_variant
    run_dir = Path(args.run_dir or f"runs/demo-{name}-{time.strftime('%Y%m%d-%H%M%S')}")
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
             ignore_reinit_error=True)
    config = embedded_preset_config(args.preset, seed=args.seed) if args.preset else \
        demo_config(args.pg_variant, seed=args.seed)
    algo = config.env_runners(rollout_engine=args.engine).build_algo()
    log = RunLog(run_dir)
    cap = "" if args.minutes is None else f" (at most {args.minutes} min)"
    what = f"preset={args.preset}" if args.preset else f"pg_variant={args.pg_variant}"
    print(f"rllib_llm demo: {what}, engine={args.engine}, "
          f"{args.iterations} iterations{cap}, run dir {run_dir}")
    before = algo.evaluate_accuracy(num_problems=args.eval_problems)
    print(f"held-out accuracy before: {before['pass@1']:.3f} ({before['num_problems']} problems)")
    iterations, seconds = train(algo, log, args.iterations, args.minutes)
    after = algo.evaluate_accuracy(num_problems=args.eval_problems)
    gain = after["pass@1"] - before["pass@1"]
    per_iteration = seconds / max(iterations, 1)
    print(f"held-out accuracy after:  {after['pass@1']:.3f} ({gain * 100:+.1f} points in "
          f"{iterations} iterations, {seconds:.0f} s, {per_iteration:.2f} s per iteration)")
    summary = {
        "title": f"{name} on the embedded default",
        "pg_variant": config.pg_variant,
        "preset": args.preset,
        "iterations": iterations,
        "train_seconds": seconds,
        "seconds_per_iteration": per_iteration,
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
