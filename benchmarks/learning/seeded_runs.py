"""What the benchmarks that compare variants over seeds share: every variant run for every seed
(seed-major, so a run cut short still compares every variant; each result printed and appended
to a JSON-lines file as it ends), and the table's cells: mean ± standard deviation over seeds."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Sequence


def run_all(variants: Sequence[str], seeds: Iterable[int], run: Callable[[str, int], dict],
            out: str | None = None) -> list[dict]:
    """run(variant, seed) for every seed and variant, each result printed and appended to `out`."""
    runs = []
    for seed in seeds:
        for variant in variants:
            runs.append(run(variant, seed))
            print(json.dumps(runs[-1]), flush=True)
            if out:
                with open(out, "a") as f:
                    f.write(json.dumps(runs[-1]) + "\n")
    return runs


def mean_spread(values: Iterable[float | None], scale: float = 1.0, digits: int = 1) -> str:
    """'mean ± sd' of the values that are not None, times `scale` ('-' when there are none)."""
    values = [v * scale for v in values if v is not None]
    if not values:
        return "-"
    spread = f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else ""
    return f"{statistics.mean(values):.{digits}f}{spread}"


def column(runs: list[dict], key: str, scale: float = 1.0, digits: int = 1) -> str:
    """`mean_spread` of one result key over the runs."""
    return mean_spread([r[key] for r in runs], scale, digits)


def percent(cell: str) -> str:
    """A cell as a percentage ('-' stays '-')."""
    return cell if cell == "-" else f"{cell}%"


def accuracy_cells(runs: list[dict]) -> list[str]:
    """Held-out accuracy before, after and the gain, in points, from the runs' 'before' and
    'after'."""
    return [column(runs, "before", 100), column(runs, "after", 100),
            mean_spread([r["after"] - r["before"] for r in runs], 100)]


def table(runs: list[dict], variants: Iterable[str], header: Sequence[str],
          cells: Callable[[list[dict]], list[str]]) -> str:
    """A Markdown table: one row per variant that has runs, `cells(its runs)` after its name."""
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for variant in variants:
        mine = [r for r in runs if r["variant"] == variant]
        if mine:
            rows.append("| " + " | ".join([variant, *cells(mine)]) + " |")
    return "\n".join(rows)
