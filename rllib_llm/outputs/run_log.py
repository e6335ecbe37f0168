"""Progress lines, metrics files and the reward curve of a training run.

A run directory gets `metrics.csv` and `metrics.jsonl` (one row per iteration, flattened result
keys), `summary.json`, and `reward_curve.png` (when matplotlib is installed).
"""

from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path
from typing import Any

# Result keys shown in the one-line progress output, with short labels.
PROGRESS_KEYS = (
    ("env_runners/episode_return_mean", "reward"),
    ("env_runners/accuracy", "acc"),
    ("env_runners/response_length_mean", "len"),
    ("learners/default_policy/kl_loss", "kl"),
    ("learners/default_policy/entropy", "ent"),
    ("learners/default_policy/clipfrac", "clip"),
    ("learners/default_policy/value_loss", "vf"),  # adv_estimator='gae' only
    ("learners/default_policy/explained_variance", "ev"),
    ("timers/sample", "t_sample"),
    ("timers/learn", "t_learn"),
    ("timers/weight_sync", "t_sync"),
)


def flatten(result: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Nested RLlib results → {"a/b/c": number}, numbers only."""
    flat: dict[str, float] = {}
    for key, value in result.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name + "/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[name] = float(value)
    return flat


class RunLog:
    """Collects one row per iteration and writes the run directory."""

    def __init__(self, run_dir: str | Path):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict[str, float]] = []
        self.start = time.perf_counter()
        self._jsonl = (self.dir / "metrics.jsonl").open("w")

    def add(self, iteration: int, result: dict[str, Any], extra: dict[str, float] | None = None):
        row = {"iteration": float(iteration), "wall_s": time.perf_counter() - self.start}
        row.update(flatten(result))
        row.update(extra or {})
        self.rows.append(row)
        self._jsonl.write(json.dumps(row) + "\n")
        self._jsonl.flush()
        return row

    @staticmethod
    def progress_line(row: dict[str, float]) -> str:
        parts = [f"iter {int(row['iteration']):3d}", f"{row['wall_s']:6.1f}s"]
        for key, label in PROGRESS_KEYS:
            if key in row and not math.isnan(row[key]):
                parts.append(f"{label} {row[key]:.3f}")
        return " | ".join(parts)

    def finish(self, summary: dict[str, Any]) -> None:
        self._jsonl.close()
        keys = sorted({k for row in self.rows for k in row})
        with (self.dir / "metrics.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(self.rows)
        (self.dir / "summary.json").write_text(json.dumps(summary, indent=2))
        plot_reward_curve(self.rows, self.dir / "reward_curve.png", summary)


def plot_reward_curve(rows: list[dict[str, float]], path: Path,
                      summary: dict[str, Any] | None = None) -> Path | None:
    """Reward and accuracy per iteration; returns None (and says so) without matplotlib.
    (`rllib-llm plot` draws the other curves, smoothed, of this and other runs.)"""
    from rllib_llm.outputs.metric_names import ACCURACY, REWARD
    from rllib_llm.outputs.plots import import_pyplot  # it imports this module: not at the top

    try:
        plt = import_pyplot()
    except ImportError as e:
        print(f"skipping {path.name}: {e}")
        return None
    xs = [r["iteration"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in ((REWARD, "train reward"), (ACCURACY, "train accuracy")):
        ys = [r.get(key, float("nan")) for r in rows]
        ax.plot(xs, ys, label=label)
    if summary and "eval_before" in summary and "eval_after" in summary:
        ax.axhline(summary["eval_before"]["pass@1"], ls="--", c="gray",
                   label="held-out accuracy before")
        ax.axhline(summary["eval_after"]["pass@1"], ls="--", c="green",
                   label="held-out accuracy after")
    ax.set_xlabel("iteration")
    ax.set_ylabel("reward / accuracy")
    ax.set_title(summary.get("title", "RLVR training") if summary else "RLVR training")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
