"""The `run:` section of a `rllib-llm train` / `sweep` file: how long to train, when to
checkpoint, which checkpoints to keep, where to log. Not RLVRConfig fields (an algorithm does not
know how long it will be trained); declared here once, with their rules, for the file loader and
`--help`.
"""

from __future__ import annotations

from typing import Any

from rllib_llm.algorithm.fields import (
    Field,
    boolean,
    non_negative_int,
    one_of,
    optional,
    positive_int,
)
from rllib_llm.outputs.metric_names import HELD_OUT_ACCURACY, METRICS


def _metric(v: Any) -> str | None:
    return None if v is None or (isinstance(v, str) and ("/" in v or v in METRICS)) else (
        "must be a result key such as "
        f"{HELD_OUT_ACCURACY!r} (rllib_llm/outputs/metric_names.py lists the stable ones), or None")


def _logger(v: Any) -> str | None:
    return None if v is None or isinstance(v, (bool, dict)) else (
        "must be true, false, null or a mapping of the callback's options")


RUN_FIELDS: tuple[Field, ...] = (
    Field("iterations", 100,
          "Training iterations of the run (Tune's stop criterion `training_iteration`). A "
          "resumed run ends at the same count; data epochs do not end a run.",
          positive_int, "run"),
    Field("checkpoint_every", 10,
          "Iterations between checkpoints (Tune's `checkpoint_frequency`); 0 checkpoints only "
          "at the end. Every run also checkpoints when it ends.", non_negative_int, "run"),
    Field("keep_checkpoints", 3,
          "Checkpoints kept on disk (Tune's `num_to_keep`): the most recent ones, or with "
          "`checkpoint_score` the best ones by it; the latest is always kept too, to resume "
          "from. null keeps all.", optional(positive_int), "run"),
    Field("checkpoint_score", None,
          "Metric that ranks checkpoints for `keep_checkpoints` (e.g. 'evaluation/pass@1', "
          "which needs `evaluation_interval` to be a multiple of `checkpoint_every`); null "
          "ranks by recency.", _metric, "run"),
    Field("checkpoint_score_mode", "max",
          "'max' or 'min': whether a higher or a lower `checkpoint_score` is better.",
          one_of(("max", "min")), "run"),
    Field("progress", True,
          "A progress bar with reward, accuracy, KL, tokens/s and ETA (`rllib-llm train`; "
          "sweeps show Tune's trial table instead).", boolean, "run"),
    Field("mlflow", None,
          "Log to MLflow (needs `mlflow`): true, or a mapping of MLflowLoggerCallback options "
          "(rllib_llm/outputs/experiment_logs.py).", _logger, "run"),
    Field("wandb", None,
          "Log to Weights & Biases (needs `wandb`): true, or a mapping of WandbLoggerCallback "
          "options (rllib_llm/outputs/experiment_logs.py).", _logger, "run"),
)
RUN_FIELDS_BY_NAME = {f.name: f for f in RUN_FIELDS}


def run_defaults() -> dict[str, Any]:
    return {f.name: f.default for f in RUN_FIELDS}


# The `tune:` section of a sweep file (`rllib-llm sweep`).
TUNE_FIELDS: tuple[Field, ...] = (
    Field("metric", HELD_OUT_ACCURACY,
          "The result key trials are compared and stopped by (rllib_llm/outputs/metric_names.py). "
          "'evaluation/pass@1' needs `evaluation.evaluation_interval`: it is reported only in "
          "iterations that evaluate, and ASHA judges a trial by the latest one.", _metric, "tune"),
    Field("mode", "max", "'max' or 'min': whether a higher or a lower `metric` is better.",
          one_of(("max", "min")), "tune"),
    Field("num_samples", 1,
          "Trials per point of the grid (Tune's `num_samples`): each samples the "
          "distributions anew.", positive_int, "tune"),
    Field("scheduler", "asha",
          "'asha' (ASHA early stopping: at iterations grace_period x reduction_factor^k, a "
          "trial in the bottom 1 - 1/reduction_factor of its rung stops) or 'fifo' (every trial "
          "runs all `run.iterations`).", one_of(("asha", "fifo")), "tune"),
    Field("grace_period", 10,
          "ASHA: iterations every trial runs before it may be stopped.", positive_int, "tune"),
    Field("reduction_factor", 2,
          "ASHA: 1/reduction_factor of the trials at a rung go on to the next.",
          lambda v: None if isinstance(v, int) and not isinstance(v, bool) and v >= 2
          else "must be an integer >= 2", "tune"),
    Field("max_concurrent_trials", None,
          "Trials running at once (default: as many as Ray's resources fit; `rllib-llm "
          "sweep` prints what one trial asks for: 1 CPU for the embedded default, so 2 on 2 "
          "cores).", optional(positive_int), "tune"),
)
TUNE_FIELDS_BY_NAME = {f.name: f for f in TUNE_FIELDS}


def tune_defaults() -> dict[str, Any]:
    return {f.name: f.default for f in TUNE_FIELDS}
