"""Off-policy on SmolLM2-135M-Instruct: TOPR, GRPO and TIS taking several optimizer steps per
batch, over seeds, against the on-policy baseline; held-out accuracy by iteration and by minute.

    python benchmarks/learning/smollm2_off_policy.py --out runs.jsonl [--arms on-policy topr grpo
        tis --seeds 0 1 2 --steps 4 --iterations 8 --eval-every 4 --eval-problems 100]
    python benchmarks/learning/smollm2_off_policy.py --out runs.jsonl --table-only --plot curves.png

Each run is one `smollm2_gsm.py` child (its own process, so no run's memory reaches the next) on
`dataset="compare"`: 8 prompts x 8 responses of up to 32 tokens per iteration, learning rate 2e-5,
bf16 autocast for the learner and the sampler, greedy held-out accuracy on the first
`--eval-problems` held-out problems every `--eval-every` iterations (evaluation time not counted
as training). The arms:

- "on-policy": TOPR with one optimizer step per batch. Every ratio is then 1 (up to the sampler's
  and the learner's kernels), where TOPR, GRPO and TIS take the same REINFORCE step, so one
  baseline stands for all three.
- "topr", "grpo", "tis": `mini_batch_size` = responses / `--steps`, so each batch takes `--steps`
  optimizer steps and the last is taken `--steps - 1` updates away from the policy that sampled:
  the regime where the variants' ratio handling differs (GRPO is `pg_variant="ppo"`, clip 0.2, as
  TRL's GRPOTrainer).

Each finished run is one JSON line in `--out`, and a rerun skips the (arm, seed) pairs already
there: a budget cut short resumes. The table gives, per arm, the held-out accuracy at each
evaluation as the mean over seeds with the lowest and highest seed, the training minutes and the
training reward; `--plot` draws the mean with the seeds' range against iterations and minutes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ARMS = {"on-policy": "topr", "topr": "topr", "grpo": "grpo", "tis": "tis"}
# The shape and rate of the on-policy runs in benchmarks/RESULTS.md ("SmolLM2-135M-Instruct
# learns `compare`"), under the bf16 autocast measured there.
PROMPTS, GROUP = 8, 8
RESPONSES = PROMPTS * GROUP  # per batch
TASK = ["--dataset", "compare", "--response-length", "32", "--prompt-length", "96",
        "--prompts", str(PROMPTS), "--group", str(GROUP), "--lr", "2e-5", "--threads", "2"]
PRECISION = {"autocast_dtype": "bfloat16", "sampler_autocast": True}


def settings(arm: str, steps: int) -> dict:
    if arm == "on-policy":
        return dict(PRECISION)
    return {**PRECISION, "mini_batch_size": RESPONSES // steps}


def run_one(arm: str, seed: int, args: argparse.Namespace, before: float | None) -> dict:
    """One child run; its row with the arm, seed and settings."""
    training = settings(arm, args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        cmd = [sys.executable, str(HERE / "smollm2_gsm.py"), *TASK,
               "--variants", ARMS[arm], "--seed", str(seed), "--settings", json.dumps(training),
               "--iterations", str(args.iterations), "--minutes", "1000",
               "--eval-problems", str(args.eval_problems), "--eval-every", str(args.eval_every),
               "--json-out", str(out)]
        if before is not None:
            cmd += ["--before", str(before)]
        subprocess.run(cmd, check=True)
        result = json.loads(out.read_text())
    row = result[ARMS[arm]]
    return {"arm": arm, "seed": seed, "steps": 1 if arm == "on-policy" else args.steps,
            "settings": training, "before": result["before"], **row}


def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def spread(values: list[float]) -> str:
    return f"{statistics.fmean(values):.1%} ({min(values):.0%}-{max(values):.0%})"


def table(rows: list[dict]) -> str:
    arms = [a for a in ARMS if any(r["arm"] == a for r in rows)]
    points = sorted({p["iteration"] for r in rows for p in r["curve"]})
    lines = ["| arm | steps / batch | seeds | " + " | ".join(f"held-out at {i}" for i in points)
             + " | training min | reward, first -> last quarter |",
             "|---|---|---|" + "---|" * len(points) + "---|---|"]
    for arm in arms:
        runs = [r for r in rows if r["arm"] == arm]
        cells = []
        for i in points:
            values = [p["held_out"] for r in runs for p in r["curve"] if p["iteration"] == i]
            cells.append(spread(values) if values else "")
        lines.append(
            f"| {arm} | {runs[0]['steps']} | {', '.join(str(r['seed']) for r in runs)} | "
            + " | ".join(cells)
            + f" | {statistics.fmean(r['train_min'] for r in runs):.1f} | "
            f"{statistics.fmean(r['reward_first'] for r in runs):.3f} -> "
            f"{statistics.fmean(r['reward_last'] for r in runs):.3f} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    """Mean held-out accuracy over seeds with the seeds' range, against iterations and against
    training minutes (each evaluation's minutes averaged over the seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for arm in ARMS:
        runs = [r for r in rows if r["arm"] == arm]
        if not runs:
            continue
        points = sorted({p["iteration"] for r in runs for p in r["curve"]})
        at = [[p for r in runs for p in r["curve"] if p["iteration"] == i] for i in points]
        mean = [statistics.fmean(p["held_out"] for p in ps) for ps in at]
        low = [min(p["held_out"] for p in ps) for ps in at]
        high = [max(p["held_out"] for p in ps) for ps in at]
        minutes = [statistics.fmean(p["train_min"] for p in ps) for ps in at]
        label = f"{arm} ({len(runs)} seed{'s' if len(runs) > 1 else ''})"
        for ax, x in zip(axes, (points, minutes), strict=True):
            line, = ax.plot(x, mean, marker="o", label=label)
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.15)
    axes[0].set_xlabel("iteration")
    axes[1].set_xlabel("training minutes (2-core CPU)")
    axes[0].set_ylabel("held-out accuracy (greedy)")
    fig.suptitle("mean over seeds, shaded: lowest to highest seed")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="JSON lines, one per finished run")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per batch off-policy")
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--eval-problems", type=int, default=100)
    parser.add_argument("--table-only", action="store_true", help="run nothing: table and plot")
    parser.add_argument("--plot", help="draw the curves into this PNG file")
    args = parser.parse_args()
    if RESPONSES % args.steps:
        parser.error(f"--steps must divide the {RESPONSES} responses of a batch")

    out = Path(args.out)
    rows = read_rows(out)
    if not args.table_only:
        # Seed-major: a budget cut short leaves every arm with the same seeds.
        for seed in args.seeds:
            for arm in args.arms:
                if any(r["arm"] == arm and r["seed"] == seed for r in rows):
                    continue
                before = rows[0]["before"] if rows else None
                print(f"== {arm}, seed {seed}", flush=True)
                rows.append(run_one(arm, seed, args, before))
                with out.open("a") as f:
                    f.write(json.dumps(rows[-1]) + "\n")
    print(table(rows))
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
