"""Progress lines, metrics files and the reward curve of a training run.

A run directory gets `metrics.csv` and `metrics.jsonl` (one row per iteration, flattened result
keys), `summary.json`, and `reward_curve.png` (when matplotlib is installed): train reward and
accuracy (one series when they coincide, as a binary reward makes them), each per iteration
(faint) and as a trailing moving average over 10% of the iterations, and held-out accuracy.
"""

from __future__ import annotations

import csv
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllib_llm.outputs.pyplot import import_pyplot

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


# Equal within this for every iteration, train reward and accuracy are one series (a binary
# reward: 1 for a correct answer, else 0).
SAME_SERIES_ATOL = 1e-9
# The smoothed line of `reward_curve.png`: a trailing moving average over this share of the
# iterations (at least 1).
SMOOTHING_SHARE = 0.1


@dataclass
class CurveSeries:
    """One series of `reward_curve.png`: its label, iterations and values, its smoothed values
    (None: drawn as points, unsmoothed)."""

    label: str
    x: list[float]
    raw: list[float]
    smoothed: list[float] | None


def smoothing_window(iterations: int) -> int:
    """Iterations averaged by the smoothed lines: `SMOOTHING_SHARE` of them, rounded, >= 1."""
    return max(1, round(SMOOTHING_SHARE * iterations))


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing moving average: value t is the mean of the finite values among t − window + 1 ..
    t (fewer at the start; NaN where none is finite)."""
    out = []
    for t in range(len(values)):
        finite = [v for v in values[max(0, t - window + 1) : t + 1] if math.isfinite(v)]
        out.append(sum(finite) / len(finite) if finite else float("nan"))
    return out


def reward_curve_series(rows: list[dict[str, float]]) -> list[CurveSeries]:
    """What `reward_curve.png` draws from a run's rows: train reward and train accuracy, each
    raw and smoothed (`moving_average` over `smoothing_window` iterations), or one series
    "train reward (= accuracy)" when they are equal (within `SAME_SERIES_ATOL`, NaN equal to
    NaN) at every iteration; plus the held-out accuracy of the iterations that evaluated, as
    points. A series with no finite value is left out."""
    from rllib_llm.outputs.metric_names import ACCURACY, HELD_OUT_ACCURACY, REWARD

    xs = [r["iteration"] for r in rows]
    window = smoothing_window(len(rows))

    def values(key: str) -> list[float]:
        return [float(r.get(key, float("nan"))) for r in rows]

    def has_values(ys: list[float]) -> bool:
        return any(math.isfinite(y) for y in ys)

    reward, accuracy = values(REWARD), values(ACCURACY)
    same = all((math.isnan(a) and math.isnan(b)) or abs(a - b) <= SAME_SERIES_ATOL
               for a, b in zip(reward, accuracy, strict=True))
    train = [("train reward (= accuracy)", reward)] if same else \
        [("train reward", reward), ("train accuracy", accuracy)]
    series = [CurveSeries(label, xs, ys, moving_average(ys, window))
              for label, ys in train if has_values(ys)]
    held_out = [(x, y) for x, y in zip(xs, values(HELD_OUT_ACCURACY), strict=True)
                if math.isfinite(y)]
    if held_out:
        series.append(CurveSeries("held-out accuracy", [x for x, _ in held_out],
                                  [y for _, y in held_out], None))
    return series


def plot_reward_curve(rows: list[dict[str, float]], path: Path,
                      summary: dict[str, Any] | None = None) -> Path | None:
    """Reward and accuracy per iteration (`reward_curve_series`: each raw and faint, with its
    moving average over it); returns None (and says so) without matplotlib.
    (`rllib-llm plot` draws the other curves, smoothed, of this and other runs.)"""
    try:
        plt = import_pyplot()
    except ImportError as e:
        print(f"skipping {path.name}: {e}")
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, s in enumerate(reward_curve_series(rows)):
        color = f"C{i}"
        if s.smoothed is None:
            ax.plot(s.x, s.raw, "o", color=color, markersize=4, label=s.label)
            continue
        ax.plot(s.x, s.raw, color=color, alpha=0.25, linewidth=1)
        ax.plot(s.x, s.smoothed, color=color, linewidth=1.8, label=s.label)
    if summary and "eval_before" in summary and "eval_after" in summary:
        ax.axhline(summary["eval_before"]["pass@1"], ls="--", c="gray",
                   label="held-out accuracy before")
        ax.axhline(summary["eval_after"]["pass@1"], ls="--", c="green",
                   label="held-out accuracy after")
    ax.set_xlabel("iteration")
    ax.set_ylabel("reward / accuracy")
    title = summary.get("title", "RLVR training") if summary else "RLVR training"
    window = smoothing_window(len(rows))
    ax.set_title(f"{title}\n(faint: per iteration; line: mean of the last {window})",
                 fontsize="medium")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
