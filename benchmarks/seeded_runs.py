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


def table(runs: list[dict], variants: Iterable[str], header: Sequence[str],
          cells: Callable[[list[dict]], list[str]]) -> str:
    """A Markdown table: one row per variant that has runs, `cells(its runs)` after its name."""
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for variant in variants:
        mine = [r for r in runs if r["variant"] == variant]
        if mine:
            rows.append("| " + " | ".join([variant, *cells(mine)]) + " |")
    return "\n".join(rows)
