"""Synchronous against asynchronous training: time per update, tokens/s and idle time, in one run.

    python benchmarks/speed/async_overlap.py [--iters 30 --warmup 3 --runners 1 2 --ratios 0 1 2]

Trains the embedded default (TOPR, the demo's 64 prompts x 8 responses) with `--runners` remote
env runners at each `async_generation_ratio` in `--ratios` (0 = synchronous) and prints a Markdown
table per runner count:
- s/update: wall-clock seconds per training iteration (one update each), after `--warmup`;
- tokens/s: response tokens sampled per second of wall-clock;
- speed-up: against the synchronous run with the same runners;
- generate s, learn s: a runner's seconds generating and verifying one batch part, and the
  learner's seconds per update (both grow when the processes share too few cores);
- learner idle, runner idle: the learner's wait for samples and the runners' time between samples
  (mean per runner), as shares of the update;
- vs max, vs sum: s/update over max(generate, learn) and over generate + learn of the synchronous
  run: overlap's goal is 1.0 against the max.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import ray


def measure(runners: int, ratio: int, iters: int, warmup: int) -> dict[str, float]:
    from rllib_llm.recipes.embedded import embedded_config

    algo = (embedded_config("topr", seed=0, async_generation_ratio=ratio)
            .env_runners(num_env_runners=runners).build_algo())
    for _ in range(warmup):
        tokens_before = algo.train()["num_env_steps_sampled_lifetime"]
    start = time.perf_counter()
    rows = [algo.train() for _ in range(iters)]
    wall = time.perf_counter() - start
    algo.stop()

    def mean(path: tuple[str, ...]) -> float:
        values = []
        for r in rows:
            value = r
            for key in path:
                value = value[key]
            values.append(float(value))
        return statistics.fmean(values)

    return {
        "s_per_update": wall / iters,
        "tokens_per_s": (rows[-1]["num_env_steps_sampled_lifetime"] - tokens_before) / wall,
        "sample_s": mean(("timers", "sample")),
        # A runner's busy time per sample call: generating, then verifying and replaying.
        "generate_s": mean(("env_runners", "time_generate_s"))
        + mean(("env_runners", "time_verify_s")) + mean(("env_runners", "time_replay_s")),
        "learn_s": mean(("timers", "learn")),
        "learner_wait_s": mean(("async_sampling", "learner_wait_s")),
        "runner_idle_s": mean(("env_runners", "time_idle_s")),
        "staleness": mean(("async_sampling", "staleness_mean")),
    }


def table(runners: int, results: dict[int, dict[str, float]]) -> str:
    sync = results[0]
    generate, learn = sync["sample_s"], sync["learn_s"]
    lines = [f"{runners} remote env runner(s); synchronous: sampling {generate:.3f} s (the "
             f"learner waits), learning {learn:.3f} s per update", "",
             "| async_generation_ratio | staleness | s/update | tokens/s | speed-up | generate s "
             "| learn s | learner idle | runner idle | vs max | vs sum |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for ratio, r in results.items():
        t = r["s_per_update"]
        lines.append(
            f"| {ratio} | {r['staleness']:.2f} | {t:.3f} | {r['tokens_per_s']:.0f} | "
            f"{sync['s_per_update'] / t:.2f}x | {r['generate_s']:.3f} | {r['learn_s']:.3f} | "
            f"{r['learner_wait_s'] / t:.0%} | "
            f"{r['runner_idle_s'] / t:.0%} | {t / max(generate, learn):.2f} | "
            f"{t / (generate + learn):.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3, help=">= 1")
    parser.add_argument("--runners", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--ratios", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ray.init(num_cpus=max(args.runners), include_dashboard=False, log_to_driver=False)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"{args.iters} iterations after {args.warmup} of warm-up, 1 torch thread per process")
    for runners in args.runners:
        results = {ratio: measure(runners, ratio, args.iters, args.warmup)
                   for ratio in sorted(set([0, *args.ratios]))}
        print()
        print(table(runners, results), flush=True)


if __name__ == "__main__":
    main()
