"""Training curves of one or more runs as PNGs (`rllib-llm plot`).

A run is a directory with its per-iteration results, in one of two layouts:

- a Ray Tune trial (`rllib-llm train` / `sweep`): `result.json` (one nested JSON object per line)
  and `progress.csv`. `result.json` is read when present: Tune fixes the CSV's columns at the
  first row, so a key that first appears later (`evaluation/...` with `evaluation_interval` > 1)
  is in `result.json` only.
- a demo run (`python -m rllib_llm.recipes.demo`, `rllib_llm/outputs/run_log.py`): `metrics.csv`,
  or while it is still running `metrics.jsonl`, with the same flattened keys plus `iteration` and
  `wall_s`.

A directory holding several runs (a Tune experiment: one trial per sweep point) is several runs,
found at any depth and labelled by the parameters their trials vary.

Each figure is a grid of panels (reward, training accuracy, held-out accuracy, KL, entropy,
response length, clip fraction; `PANELS`) with every run overlaid: its raw values faint, and over
them the values smoothed by `smooth`, TensorBoard's debiased exponential moving average. A panel
no run has a value for is left out. Missing values (empty CSV cells, iterations that did not
evaluate) are skipped, so a line joins the iterations that have one.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rllib_llm.outputs.metric_names import (
    ACCURACY,
    APPROX_KL,
    CLIP_FRACTION,
    ENTROPY,
    HELD_OUT_ACCURACY,
    ITERATION,
    KL,
    RESPONSE_LENGTH,
    REWARD,
    TIME_TOTAL_S,
)
from rllib_llm.outputs.pyplot import import_pyplot
from rllib_llm.outputs.run_log import flatten

# Files that make a directory a run, in the order they are read (the first one present wins).
RESULT_FILES = ("result.json", "progress.csv", "metrics.csv", "metrics.jsonl")
# Columns of a demo run's metrics.csv that Tune's files call ITERATION and TIME_TOTAL_S.
DEMO_ITERATION = "iteration"
DEMO_WALL_S = "wall_s"
DEFAULT_SMOOTHING = 0.6  # TensorBoard's default weight


# ----------------------------------------------------------------------------- reading runs


@dataclass(frozen=True, eq=False)  # runs compare by identity (two may have one label)
class Run:
    """One run's results: `columns[key]` is (N,) float64 over its N result rows, NaN where a
    row lacks the key or its value is not a number."""

    label: str
    path: Path
    columns: dict[str, np.ndarray] = field(repr=False)

    def first_key(self, keys: Sequence[str]) -> str | None:
        """The first of `keys` this run has at least one finite value of."""
        return next((k for k in keys if k in self.columns
                     and np.isfinite(self.columns[k]).any()), None)

    def series(self, x_key: str, y_key: str) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of the rows where both are finite: (M,), (M,)."""
        x, y = self.columns[x_key], self.columns[y_key]
        keep = np.isfinite(x) & np.isfinite(y)
        return x[keep], y[keep]


def find_run_dirs(path: str | Path) -> list[Path]:
    """`path` itself if it is a run, else every run below it, sorted by path (a Tune
    experiment's trials in trial order)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    if not path.is_dir():
        raise NotADirectoryError(f"{path}: not a directory (give a run directory)")
    if _is_run_dir(path):
        return [path]
    found = {p.parent for name in RESULT_FILES for p in path.rglob(name) if p.is_file()}
    if not found:
        raise FileNotFoundError(
            f"{path}: no run in it: no {', '.join(RESULT_FILES)} in the directory or below it "
            "(give a `rllib-llm train`/`sweep` output directory, a trial directory of one, or "
            "a demo run directory)")
    return sorted(found)


def _is_run_dir(path: Path) -> bool:
    return any((path / name).is_file() for name in RESULT_FILES)


def read_columns(run_dir: str | Path) -> dict[str, np.ndarray]:
    """The results of one run directory as columns: {key: (N,) float64}, NaN for missing."""
    run_dir = Path(run_dir)
    for name in RESULT_FILES:
        path = run_dir / name
        if not path.is_file():
            continue
        rows = _read_json_lines(path) if path.suffix in (".json", ".jsonl") else _read_csv(path)
        if rows:
            return _to_columns(rows)
    return {}


def _read_json_lines(path: Path) -> list[dict[str, float]]:
    rows = []
    for line in path.read_text().splitlines():
        try:
            result = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line still being written
        if isinstance(result, dict):
            result.pop("config", None)  # Tune repeats the whole config in every row
            rows.append(flatten(result))
    return rows


def _read_csv(path: Path) -> list[dict[str, float]]:
    with path.open(newline="") as f:
        return [{k: _number(v) for k, v in row.items() if k} for row in csv.DictReader(f)]


def _number(cell: str | None) -> float:
    try:
        return float(cell)  # "" (a row without the key), "True", a date → NaN
    except (TypeError, ValueError):
        return math.nan


def _to_columns(rows: list[dict[str, float]]) -> dict[str, np.ndarray]:
    keys = dict.fromkeys(k for row in rows for k in row)  # first-seen order
    return {k: np.array([row.get(k, math.nan) for row in rows], dtype=np.float64) for k in keys}


def load_runs(paths: Sequence[str | Path]) -> list[Run]:
    """Every run in `paths`, labelled: by the directory given when each holds one run, by the
    parameters its trials vary when one holds several (a sweep), both with several of each."""
    if not paths:
        raise ValueError("no run directory given")
    groups = [(Path(p), find_run_dirs(p)) for p in paths]
    group_labels = _short_names([p for p, _ in groups])
    runs = []
    for (_, run_dirs), group_label in zip(groups, group_labels):
        trial_labels = trial_labels_of(run_dirs)
        for run_dir, trial_label in zip(run_dirs, trial_labels):
            if len(run_dirs) == 1:
                label = group_label
            elif len(groups) == 1:
                label = trial_label
            else:
                label = f"{group_label}: {trial_label}"
            runs.append(Run(label, run_dir, read_columns(run_dir)))
    return runs


def _short_names(paths: list[Path]) -> list[str]:
    """The last path component of each, with as many parents as it takes to tell them apart."""
    parts = [p.resolve().parts for p in paths]
    for depth in range(1, max(len(p) for p in parts) + 1):
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return names  # the same directory given twice


def trial_labels_of(run_dirs: list[Path]) -> list[str]:
    """"lr=0.0001, seed=1": the settings (Tune's `params.json`) that differ between the runs;
    the directory name where there is no params.json or no setting differs."""
    params = [_read_params(d) for d in run_dirs]
    names = [d.name for d in run_dirs]
    if len(run_dirs) < 2 or any(p is None for p in params):
        return names
    keys = dict.fromkeys(k for p in params for k in p)
    varied = [k for k in keys if len({p.get(k, "<unset>") for p in params}) > 1]
    if not varied:
        return names
    return [", ".join(f"{k}={json.loads(p[k]) if k in p else '<unset>'}" for k in varied)
            for p in params]


def _read_params(run_dir: Path) -> dict[str, str] | None:
    """params.json flattened to {"a/b": the value as JSON text}; None without one."""
    try:
        params = json.loads((run_dir / "params.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    flat: dict[str, str] = {}

    def walk(value: Any, prefix: str) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(v, f"{prefix}{k}/")
        else:
            flat[prefix[:-1]] = json.dumps(value, sort_keys=True)

    walk(params, "")
    return flat


# ----------------------------------------------------------------------------- smoothing


def smooth(values: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's scalar smoothing: a debiased exponential moving average.

    s_t = ((1 - w) * sum_{i<=t} w^(t-i) * y_i) / (1 - w^t), t counting the finite values,
    i.e. the EMA `m_t = w * m_(t-1) + (1 - w) * y_t` from m_0 = 0 divided by its weight sum, so
    the first values are not pulled towards 0. Non-finite values stay as they are and do not
    update the average. `weight` 0 returns the values unchanged; closer to 1 is smoother.

    values: (N,) float. Returns (N,) float64.
    """
    if not 0 <= weight < 1:
        raise ValueError(f"smoothing={weight!r}: must be in [0, 1) (0 = raw values, "
                         f"{DEFAULT_SMOOTHING} = TensorBoard's default)")
    values = np.asarray(values, dtype=np.float64)
    smoothed = values.copy()
    last, num_accum = 0.0, 0
    for t, y in enumerate(values):
        if not math.isfinite(y):
            continue
        last = last * weight + (1 - weight) * y
        num_accum += 1
        smoothed[t] = last / (1 - weight**num_accum)
    return smoothed


# ----------------------------------------------------------------------------- what to draw


@dataclass(frozen=True)
class Panel:
    """One panel: `keys` are (result key, title) alternatives; each run shows the first one it
    has (KL to the reference model where there is one, else the approximate KL)."""

    name: str  # as `--metrics` takes it
    keys: tuple[tuple[str, str], ...]

    @property
    def title(self) -> str:
        return " or ".join(title for _, title in self.keys)


PANELS = (
    Panel("reward", ((REWARD, "reward (training samples)"),)),
    Panel("accuracy", ((ACCURACY, "accuracy (training samples)"),)),
    Panel("held_out", ((HELD_OUT_ACCURACY, "held-out accuracy (pass@1)"),)),
    Panel("kl", ((KL, "KL to the reference model"),
                 (APPROX_KL, "approx. KL, policy vs. sampling policy"))),
    Panel("entropy", ((ENTROPY, "entropy (nats/token)"),)),
    Panel("response_length", ((RESPONSE_LENGTH, "response length (tokens)"),)),
    Panel("clip_fraction", ((CLIP_FRACTION, "clip fraction"),)),
)
PANELS_BY_NAME = {p.name: p for p in PANELS}


def panels_for(names: Sequence[str] | None) -> tuple[Panel, ...]:
    """`PANELS` by name; a name that is not one is a result key (`timers/learn`) of its own."""
    names = [n.strip() for n in names or () if n.strip()]
    if not names:
        return PANELS
    return tuple(PANELS_BY_NAME.get(n) or Panel(n, ((n, n),)) for n in names)


@dataclass(frozen=True)
class XAxis:
    name: str  # the figure's file is curves_by_<name>.png
    keys: tuple[str, ...]  # the first one a run has
    label: str


X_AXES = (
    XAxis("iteration", (ITERATION, DEMO_ITERATION), "training iteration"),
    XAxis("time", (TIME_TOTAL_S, DEMO_WALL_S), "training time"),
)


# ----------------------------------------------------------------------------- figures


@dataclass(frozen=True)
class Plots:
    paths: list[Path]  # the PNGs written
    panels: list[str]  # names of the panels drawn
    notes: list[str]  # what was left out, and why (print once)


def plot_runs(runs: Sequence[Run], out_dir: str | Path, smoothing: float = DEFAULT_SMOOTHING,
              panels: Sequence[Panel] = PANELS) -> Plots:
    """`curves_by_iteration.png` and `curves_by_time.png` in `out_dir`: every panel some run
    has, every run overlaid."""
    smooth(np.zeros(0), smoothing)  # the range check, before any work
    plt = import_pyplot()
    notes = []
    empty = [r.label for r in runs if not r.columns]
    if empty:
        notes.append(f"no results yet, left out: {', '.join(empty)}")
    drawn = [p for p in panels if any(r.first_key([k for k, _ in p.keys]) for r in runs)]
    for p in panels:
        if p not in drawn:
            keys = " or ".join(k for k, _ in p.keys)
            notes.append(f"no run has {p.title} ({keys}): panel left out")
    if not drawn:
        raise ValueError("none of the requested metrics is in any run: nothing to plot "
                         f"(panels: {', '.join(PANELS_BY_NAME)}, or any result key)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for axis in X_AXES:
        missing = [r.label for r in runs if r.columns and not r.first_key(axis.keys)]
        if missing:
            notes.append(f"no {' or '.join(axis.keys)} column, left out of the plots by "
                         f"{axis.name}: {', '.join(missing)}")
        if not any(r.first_key(axis.keys) for r in runs):
            continue
        fig = curves_figure(runs, axis, drawn, smoothing)
        path = out_dir / f"curves_by_{axis.name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return Plots(paths, [p.name for p in drawn], notes)


def curves_figure(runs: Sequence[Run], axis: XAxis, panels: Sequence[Panel] = PANELS,
                  smoothing: float = DEFAULT_SMOOTHING):
    """A matplotlib Figure: a grid of `panels` over `axis`, run i in colour C{i} (the same in
    every figure); runs without the axis' column are skipped. Per run and panel, the raw values
    (faint, only when smoothing) and then the smoothed ones."""
    plt = import_pyplot()
    shown = [(i, r) for i, r in enumerate(runs) if r.first_key(axis.keys)]
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.4 * ncols, 3.0 * nrows + 0.8),
                             layout="constrained", squeeze=False)
    scale, unit = _time_unit([r for _, r in shown], axis) if axis.name == "time" else (1, "")
    for ax, panel in zip(axes.flat, panels):
        _draw_panel(ax, shown, axis, panel, smoothing, scale)
        ax.set_xlabel(f"{axis.label} ({unit})" if unit else axis.label)
        if axis.name == "iteration":
            ax.xaxis.get_major_locator().set_params(integer=True)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    handles = [plt.Line2D([], [], **_style(i), label=r.label) for i, r in shown]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(shown), 3),
               fontsize="small", frameon=False)
    how = f"smoothed: debiased EMA, weight {smoothing:g}; faint: raw" if smoothing else "raw"
    fig.suptitle(f"by {axis.label} ({how})", fontsize="medium")
    return fig


def _draw_panel(ax, runs: list[tuple[int, Run]], axis: XAxis, panel: Panel, smoothing: float,
                scale: float) -> None:
    keys = [k for k, _ in panel.keys]
    y_keys = {i: r.first_key(keys) for i, r in runs if r.first_key(keys)}
    mixed = len(set(y_keys.values())) > 1  # some runs show KL, others approx. KL: say which
    for i, run in runs:
        if i not in y_keys:
            continue
        x, y = run.series(run.first_key(axis.keys), y_keys[i])
        x = x / scale
        style = _style(i)
        marker = "o" if len(x) <= 30 else None  # sparse series (evaluation) stay visible
        if smoothing:
            ax.plot(x, y, color=style["color"], alpha=0.25, linewidth=1)
        label = f"{run.label}: {y_keys[i]}" if mixed else None
        ax.plot(x, smooth(y, smoothing), **style, marker=marker, markersize=3, label=label)
    titles = dict(panel.keys)
    used = list(dict.fromkeys(y_keys.values()))  # first-seen order
    title = " / ".join(titles[k] for k in used)
    ax.set_title(title if used == [title] else f"{title}\n{', '.join(used)}",
                 fontsize="small")
    if mixed:
        ax.legend(fontsize="xx-small")
    ax.grid(alpha=0.3)


def _style(i: int) -> dict[str, Any]:
    """Run i's colour, and a line style once the 10 colours repeat."""
    return {"color": f"C{i % 10}", "linestyle": ("-", "--", ":", "-.")[i // 10 % 4],
            "linewidth": 1.6}


def _time_unit(runs: Sequence[Run], axis: XAxis) -> tuple[float, str]:
    longest = max(np.nanmax(r.columns[r.first_key(axis.keys)]) for r in runs)
    if longest > 2 * 3600:
        return 3600.0, "h"
    if longest > 120:
        return 60.0, "min"
    return 1.0, "s"
