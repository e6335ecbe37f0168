"""`progress.csv` whose columns stay put: Tune's CSV logger with two of its faults mended.

Tune's `CSVLoggerCallback` takes its columns from a trial's first result: the held-out columns
(`evaluation/...`, only in iterations that evaluate) are missing whenever iteration 1 does not
evaluate. And when a trial is restored it appends rows in the order of the restored process's
first result, under the header of the first process: after `rllib-llm train --resume` the values
sat under the wrong columns (measured: `loss` held `num_module_steps_trained_lifetime`).

Here the columns are the first result's keys plus every stable metric
(rllib_llm/outputs/metric_names.py; empty where a result has none), and a continued file keeps its
header: each row is written under it by name. Tune adds its own CSV logger only when no
CSVLoggerCallback is given, so passing this one replaces it.

And each iteration is logged once, here and in `result.json` (`ResultJSON` replaces Tune's JSON
logger the same way). A trial restored from a checkpoint (`rllib-llm train --resume` after a
kill, or Tune retrying a failed trial) runs again the iterations after that checkpoint, and Tune's
loggers appended them a second time: after a kill at iteration 12 with a checkpoint at 10,
iteration 11 and 12 were there twice, `time_total_s` went back at the restart and curves by time
zigzagged. Now a result whose iteration is not after the last one logged first drops the rows of
that iteration and later from the file (in place: the logger's appending handle stays valid), as
does a trial's first result in a new process, which also drops a row cut short by the kill.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
from ray.tune.result import EXPR_PROGRESS_FILE, EXPR_RESULT_FILE
from ray.tune.utils import flatten_dict

from rllib_llm.outputs.metric_names import ITERATION, METRICS


class _OncePerIteration:
    """Keeps a trial's log file to one row per training iteration (see the module docstring)."""

    def _drop_repeated(self, trial, result: dict[str, Any], file_name: str) -> None:
        last = self.__dict__.setdefault("_last_iteration", {})
        iteration = result.get(ITERATION)
        if iteration is None:
            return
        # A trial not yet seen by this process may continue a file of an earlier one.
        if iteration <= last.get(trial, math.inf):
            drop_rows_from(Path(trial.local_path, file_name), iteration)
        last[trial] = iteration


def drop_rows_from(path: Path, iteration: int) -> int:
    """Rewrite a trial's `progress.csv` or `result.json` in place without its rows of training
    iteration `iteration` and later, and without a last line cut short (no newline: a process
    killed while writing it); return how many lines were dropped. A missing file is left alone.
    """
    if not path.is_file():
        return 0
    with path.open("r+", newline="") as f:
        lines = f.readlines()
        if path.name == EXPR_PROGRESS_FILE:
            keep = _csv_lines_before(lines, iteration)
        else:
            keep = [line for line in lines if _json_line_before(line, iteration)]
        if len(keep) < len(lines):
            f.seek(0)
            f.writelines(keep)
            f.truncate()
    return len(lines) - len(keep)


def _whole(line: str) -> bool:
    return line.endswith("\n")


def _csv_lines_before(lines: list[str], iteration: int) -> list[str]:
    """The header and the whole rows of iterations before `iteration` (one line per row: the
    flattened results hold numbers and short strings)."""
    if not lines or not _whole(lines[0]):
        return []
    header = next(csv.reader(lines[:1]))
    if ITERATION not in header:
        return lines
    column = header.index(ITERATION)
    keep = [lines[0]]
    for line in lines[1:]:
        row = next(csv.reader([line]), [])
        if _whole(line) and column < len(row) and _number(row[column]) < iteration:
            keep.append(line)
    return keep


def _json_line_before(line: str, iteration: int) -> bool:
    if not _whole(line):
        return False
    try:
        return _number(json.loads(line).get(ITERATION)) < iteration
    except (ValueError, AttributeError):
        return False


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.inf  # not an iteration: dropped with the repeated rows


class ProgressCSV(_OncePerIteration, CSVLoggerCallback):
    def log_trial_result(self, iteration: int, trial, result: dict[str, Any]) -> None:
        if trial not in self._trial_files:
            self._setup_trial(trial)
        self._drop_repeated(trial, result, EXPR_PROGRESS_FILE)
        row = flatten_dict({k: v for k, v in result.items() if k != "config"}, delimiter="/")
        if not self._trial_csv[trial]:
            header = self._existing_header(trial) if self._trial_continue[trial] else None
            columns = header or [*row, *(k for k in METRICS if k not in row)]
            self._trial_csv[trial] = csv.DictWriter(self._trial_files[trial], columns,
                                                    extrasaction="ignore")
            if header is None:
                self._trial_csv[trial].writeheader()
        self._trial_csv[trial].writerow(row)
        self._trial_files[trial].flush()

    @staticmethod
    def _existing_header(trial) -> list[str] | None:
        path = Path(trial.local_path, "progress.csv")
        with path.open(newline="") as f:
            return next(csv.reader(f), None)


class ResultJSON(_OncePerIteration, JsonLoggerCallback):
    """Tune's `result.json` logger, each iteration once (see the module docstring)."""

    def log_trial_result(self, iteration: int, trial, result: dict[str, Any]) -> None:
        if trial not in self._trial_files:
            self.log_trial_start(trial)
        self._drop_repeated(trial, result, EXPR_RESULT_FILE)
        super().log_trial_result(iteration, trial, result)
