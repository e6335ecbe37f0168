"""Learning under staleness: held-out accuracy of the off-policy variants trained asynchronously
with 1-4 batches generated ahead, against synchronous training, same samples and seeds.

    python benchmarks/learning/async_staleness.py [--variants topr tis cispo vanilla
        --ratios 0 1 2 4 --seeds 0 1 --iters 100 --every 25 --partial-splits 1 3]
    python benchmarks/learning/async_staleness.py --table-from runs.jsonl \
        --plot accuracy_vs_time.png

Each run trains the embedded default (the demo's 64 prompts x 8 responses) with one remote env
runner and `async_generation_ratio` k (0 = synchronous; the batch trained on is then k updates
old), and keeps the policy's weights every `--every` iterations with the seconds of training so
far. Afterwards every kept policy is scored on the 500 held-out problems, 2 samples each
(sampling at the training temperature, as the learning tests do), in this process: evaluation
takes no time from training and cannot let generation run ahead for free. Prints, per variant and
k, the accuracy after `--iters` iterations (mean over seeds, and each seed), the seconds of
training and the mean KL between each updated policy and the one that sampled its batch (the
learner's approx_kl: the lag the ratio sees); writes every run as a JSON line (`--out`) and,
with `--plot`, accuracy against training wall-clock of each variant, synchronous against
asynchronous. `--partial-splits` adds partial rollouts (`partial_rollout_max_split` N, for k >= 1;
1 = whole responses): the table then shows N, the mean staleness of the trained episodes and the
share of responses whose tokens several weight versions sampled.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import ray
import torch

EVAL_PROBLEMS = 500
EVAL_SEEDS = (0, 1)


def train(variant: str, ratio: int, seed: int, iters: int, every: int, lr_scale: float,
          split: int = 1):
    """(snapshots {iteration: state dict}, seconds of training by iteration, the mean KL of the
    updated policy to the one that sampled: the lag the ratio sees, the mean staleness and the
    mean share of responses of several weight versions)."""
    from rllib_llm.recipes.embedded import EMBEDDED_TRAINING, embedded_config

    lr = [[t, v * lr_scale] for t, v in EMBEDDED_TRAINING["lr"]]
    algo = (embedded_config(variant, seed=seed, async_generation_ratio=ratio, lr=lr,
                            partial_rollout_max_split=split)
            .env_runners(num_env_runners=1).build_algo())
    model = algo.learner_group.local_learner.module["default_policy"].model

    def weights():
        return {k: v.detach().clone() for k, v in model.state_dict().items()}

    snapshots, seconds, total, kls, lags, mixed = {0: weights()}, {0: 0.0}, 0.0, [], [], []
    for i in range(1, iters + 1):
        start = time.perf_counter()
        result = algo.train()
        total += time.perf_counter() - start
        kls.append(float(result["learners"]["default_policy"]["approx_kl"]))
        lags.append(float(result["async_sampling"]["staleness_mean"]))
        mixed.append(float(result["env_runners"].get("partial_mixed_version_fraction", 0.0)))
        if i % every == 0 or i == iters:
            snapshots[i], seconds[i] = weights(), total
    algo.stop()
    return snapshots, seconds, statistics.fmean(kls), statistics.fmean(lags), \
        statistics.fmean(mixed)


def make_evaluator():
    """A synchronous algorithm that samples in this process; its policy is what we load."""
    from rllib_llm.recipes.embedded import embedded_config

    algo = embedded_config("topr", seed=0).build_algo()
    return algo, algo.env_runner_group.local_env_runner.module.model  # the torch engine's model


def held_out(evaluator, model, state_dict) -> float:
    with torch.no_grad():
        model.load_state_dict(state_dict)
    return statistics.fmean(evaluator.evaluate_accuracy(num_problems=EVAL_PROBLEMS, seed=s)
                            ["pass@1"] for s in EVAL_SEEDS)


def summary_table(runs: list[dict]) -> str:
    partial = any(r.get("split", 1) > 1 for r in runs)
    lines = ["| pg_variant | async_generation_ratio | accuracy before | accuracy after "
             "(mean) | per seed | gain vs synchronous | training s | KL to the sampler |"
             + (" partial_rollout_max_split | staleness | mixed-version responses |"
                if partial else ""),
             "|---|---|---|---|---|---|---|---|" + ("---|---|---|" if partial else "")]
    for variant in dict.fromkeys(r["variant"] for r in runs):
        mine = [r for r in runs if r["variant"] == variant]
        by_ratio: dict[tuple[int, int], list[dict]] = {}
        for r in mine:
            by_ratio.setdefault((r["ratio"], r.get("split", 1)), []).append(r)
        sync = statistics.fmean(r["accuracy"][-1] for r in by_ratio.get((0, 1), mine))
        for (ratio, split), rs in sorted(by_ratio.items()):
            after = [r["accuracy"][-1] for r in rs]
            lines.append(
                f"| {variant} | {ratio} | {statistics.fmean(r['accuracy'][0] for r in rs):.1%} "
                f"| {statistics.fmean(after):.1%} | {', '.join(f'{a:.1%}' for a in after)} | "
                f"{(statistics.fmean(after) - sync) * 100:+.1f} | "
                f"{statistics.fmean(r['seconds'][-1] for r in rs):.0f} | "
                f"{_kl(rs)} |" + (f" {split} | {_mean(rs, 'staleness', '.2f')} | "
                                  f"{_mean(rs, 'mixed', '.0%')} |" if partial else ""))
    return "\n".join(lines)


def _mean(runs: list[dict], key: str, spec: str) -> str:
    values = [r[key] for r in runs if key in r]
    return format(statistics.fmean(values), spec) if values else "n/a"


def _kl(runs: list[dict]) -> str:
    kls = [r["approx_kl"] for r in runs if "approx_kl" in r]
    return f"{statistics.fmean(kls):.4f}" if kls else "n/a"


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(r["variant"] for r in runs))
    fig, axes = plt.subplots(1, len(variants), figsize=(4.2 * len(variants), 3.6), sharey=True,
                             squeeze=False)
    for ax, variant in zip(axes[0], variants, strict=True):
        ratios = sorted({r["ratio"] for r in runs if r["variant"] == variant})
        for ratio in ratios:
            rs = [r for r in runs if r["variant"] == variant and r["ratio"] == ratio]
            xs = [statistics.fmean(p) for p in zip(*(r["seconds"] for r in rs), strict=True)]
            ys = [statistics.fmean(p) for p in zip(*(r["accuracy"] for r in rs), strict=True)]
            label = "synchronous" if ratio == 0 else f"async, k={ratio}"
            ax.plot(xs, ys, marker="o", label=label)
        ax.set_title(variant)
        ax.set_xlabel("training wall-clock (s)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"held-out accuracy ({EVAL_PROBLEMS} problems)")
    axes[0][-1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=["topr", "tis", "cispo", "vanilla"])
    parser.add_argument("--ratios", type=int, nargs="+", default=[0, 1, 2, 4])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--partial-splits", type=int, nargs="+", default=[1],
                        help="partial_rollout_max_split values, each run at every k >= 1")
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--lr-scale", type=float, default=1.0,
                        help="multiplies the embedded learning-rate schedule (recipes/embedded.py)")
    parser.add_argument("--out", type=Path, default=Path("async_staleness.jsonl"))
    parser.add_argument("--table-from", type=Path, help="print the table of a finished --out")
    parser.add_argument("--plot", type=Path, help="write accuracy against wall-clock here")
    args = parser.parse_args()
    if args.table_from:
        runs = [json.loads(line) for line in args.table_from.read_text().splitlines()]
    else:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        torch.set_num_threads(1)
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores; {args.iters} iterations, "
              f"seeds {args.seeds}", flush=True)
        evaluator, model = make_evaluator()
        runs = []
        for variant in args.variants:
            for ratio, split in [(k, n) for k in args.ratios for n in args.partial_splits
                                 if k or n == 1]:
                for seed in args.seeds:
                    snapshots, seconds, kl, lag, mixed = train(
                        variant, ratio, seed, args.iters, args.every, args.lr_scale, split)
                    run = {"variant": variant, "ratio": ratio, "split": split, "seed": seed,
                           "lr_scale": args.lr_scale, "approx_kl": kl, "staleness": lag,
                           "mixed": mixed,
                           "iterations": list(snapshots), "seconds": list(seconds.values()),
                           "accuracy": [held_out(evaluator, model, s)
                                        for s in snapshots.values()]}
                    runs.append(run)
                    with args.out.open("a") as f:
                        f.write(json.dumps(run) + "\n")
                    print(f"{variant} k={ratio} N={split} seed={seed}: "
                          f"{run['accuracy'][0]:.3f} -> {run['accuracy'][-1]:.3f} in "
                          f"{run['seconds'][-1]:.0f} s", flush=True)
        evaluator.stop()
    print(summary_table(runs))
    if args.plot:
        plot(runs, args.plot)


if __name__ == "__main__":
    main()
