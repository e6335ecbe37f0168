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
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from ray.tune.logger import CSVLoggerCallback
from ray.tune.utils import flatten_dict

from rllib_llm.outputs.metric_names import METRICS


class ProgressCSV(CSVLoggerCallback):
    def log_trial_result(self, iteration: int, trial, result: dict[str, Any]) -> None:
        if trial not in self._trial_files:
            self._setup_trial(trial)
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
