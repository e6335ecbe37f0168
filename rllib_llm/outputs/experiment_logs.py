"""Experiment logs of Tune runs: where an RLVR trial's results go, and under which names.

Tune writes three logs into every trial directory without being asked (its default logger
callbacks; `TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1` turns them off):

- `progress.csv`: a row per iteration, the result keys of rllib_llm/outputs/metric_names.py as
  columns.
- `result.json`: a JSON line per iteration, the nested result.
  (`rllib-llm train` and `sweep` replace Tune's loggers of these two with those of
  rllib_llm/cli/progress_csv.py, which log each iteration once also after a resume.)
- `events.out.tfevents.*`: TensorBoard scalars, written by tensorboardX (a dependency of
  `ray[tune]`, so nothing to switch on). Tag `ray/tune/<name>`, step `training_iteration`; NaN
  values, `config`, `training_iteration` and `time_total_s` are not written. View with
  `tensorboard --logdir RUN_DIR` (tensorboard itself is not a dependency of rllib_llm).

`experiment_callbacks(mlflow=..., wandb=...)` adds Ray's own MLflowLoggerCallback and
WandbLoggerCallback, with these defaults:

MLflow (`pip install 'rllib_llm[mlflow]'`: mlflow-skinny, plus SQLAlchemy and alembic for a
local SQLite store; no server). One MLflow run per trial, named after it; the trial's config,
flattened ("a/b"), as its params when it starts; each iteration's numbers as metrics, step
`training_iteration` (the config is left out of the metrics: it is in the params).
- Store: the `tracking_uri` option, else MLFLOW_TRACKING_URI, else `sqlite:///RUN_DIR/mlflow.db`
  in the Tune experiment directory, with artifacts (`save_artifact=True`) in
  `RUN_DIR/mlartifacts`. (When the experiment is not on local disk, MLflow's own default:
  `./mlflow.db`.) Not a `file:` store: in MLflow 3 the file store is in maintenance mode and
  refuses to open unless MLFLOW_ALLOW_FILE_STORE=true. Browse with
  `mlflow ui --backend-store-uri sqlite:///RUN_DIR/mlflow.db` (needs the full `mlflow` package).
- Experiment: the `experiment_name` option, else MLFLOW_EXPERIMENT_NAME, else the Tune
  experiment's name (the run directory's name).
- Other options: those of MLflowLoggerCallback (`tags`, `save_artifact`, ...).
- A trial resumed after a failure (`Tuner.restore`, `rllib-llm train --resume`) gets a second
  MLflow run (Ray's callback), same name and `trial_name` tag, steps from the checkpoint's
  iteration on; the first stays FAILED.

W&B (`pip install 'rllib_llm[wandb]'`). One W&B run per trial, grouped by the Tune experiment.
- Project: the `project` option, else WANDB_PROJECT, else "rllib_llm".
- Offline: WANDB_MODE=offline, or the option `mode: offline` (either also skips Ray's check
  for an API key); `wandb sync` uploads later.
- Other options: those of WandbLoggerCallback (`group`, `excludes`, `upload_checkpoints`, ...);
  any other goes to `wandb.init` (`entity`, `tags`, `dir`, ...).

Names. CSV, JSON and W&B keep the result keys. TensorBoard and MLflow refuse some characters in
names, so both log a key under `logged_name(key)`: any character other than a letter, digit,
`_`, `-`, `.` or `/` becomes `_` (tensorboardX's rule, whose names MLflow accepts too). Among
the stable names that renames `evaluation/pass@1` to `evaluation/pass_1` and `evaluation/pass@k`
to `evaluation/pass_k` (`RENAMED_METRICS`). MLflow also refuses names longer than 250 characters
or that a path normalisation would change (`a//b`); those are not logged, with a warning.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import posixpath
import re
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ray import tune
from ray.air.integrations.mlflow import MLflowLoggerCallback
from ray.air.integrations.wandb import WandbLoggerCallback
from ray.tune.result import TIMESTEPS_TOTAL, TRAINING_ITERATION

from rllib_llm.outputs.metric_names import METRICS
from rllib_llm.outputs.run_log import flatten

TENSORBOARD_TAG_PREFIX = "ray/tune/"  # Tune's TBXLoggerCallback puts it before every name
# The characters tensorboardX replaces with "_" in a tag (tensorboardX/summary.py, _clean_tag).
_NOT_IN_TAGS = re.compile(r"[^-/\w.]")
MLFLOW_MAX_NAME_LENGTH = 250  # mlflow.utils.validation.MAX_ENTITY_KEY_LENGTH
# What each logger needs installed (importable modules) and the extra that installs them.
_MLFLOW_MODULES = ("mlflow",)
_MLFLOW_SQLITE_MODULES = ("sqlalchemy", "alembic")  # MLflow's SQLAlchemy store (sqlite:)
_WANDB_MODULES = ("wandb",)


def logged_name(key: str) -> str:
    """The name TensorBoard (after `ray/tune/`) and MLflow log the result key `key` under:
    `evaluation/pass@1` → `evaluation/pass_1`."""
    return _NOT_IN_TAGS.sub("_", key).lstrip("/")


# The stable metric names that TensorBoard and MLflow log under another name.
RENAMED_METRICS: Mapping[str, str] = {
    key: logged_name(key) for key in METRICS if logged_name(key) != key
}


def mlflow_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """A Tune result's numbers under names MLflow accepts: flattened, renamed by `logged_name`,
    without the trial config (`config/...`, logged as params instead)."""
    metrics = {}
    for key, value in flatten(dict(result)).items():
        if key.startswith("config/"):
            continue
        name = logged_name(key)
        if len(name) > MLFLOW_MAX_NAME_LENGTH or posixpath.normpath(name) != name:
            warnings.warn(f"MLflow refuses the metric name {name!r} (result key {key!r}): it is "
                          "longer than 250 characters or not a normalised path; not logged",
                          stacklevel=2)
            continue
        metrics[name] = value
    return metrics


def _local_experiment_dir(trial) -> Path | None:
    """The Tune experiment directory, when it is on this machine's disk."""
    if trial.storage.storage_filesystem.type_name != "local":
        return None
    return Path(trial.remote_experiment_path)


class MLflowCallback(MLflowLoggerCallback):
    """Ray's MLflowLoggerCallback, which sets MLflow up at the first trial (the first moment the
    experiment directory and name are known) and logs metrics under names MLflow accepts."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._asked = (self.tracking_uri, self.experiment_name)  # the defaults are per experiment

    def setup(self, *args, **kwargs):
        self.tracking_uri, self.experiment_name = self._asked
        self._set_up = False

    def _set_up_store(self, trial) -> None:
        import mlflow
        from mlflow.tracking import MlflowClient

        env_uri = os.environ.get("MLFLOW_TRACKING_URI")
        self.experiment_name = (self.experiment_name or os.environ.get("MLFLOW_EXPERIMENT_NAME")
                                or trial.experiment_dir_name)
        run_dir = _local_experiment_dir(trial)
        if not (self.tracking_uri or env_uri) and run_dir:
            self.tracking_uri = f"sqlite:///{run_dir / 'mlflow.db'}"
            # Created here only to put its artifacts in the run directory too (MLflow would put
            # them in ./mlruns of the working directory).
            client = MlflowClient(self.tracking_uri)
            if client.get_experiment_by_name(self.experiment_name) is None:
                client.create_experiment(self.experiment_name,
                                         artifact_location=(run_dir / "mlartifacts").as_uri())
        self.tracking_uri = self.tracking_uri or env_uri
        super().setup()
        self._client = MlflowClient(mlflow.get_tracking_uri())
        # mlflow.set_tracking_uri also sets MLFLOW_TRACKING_URI (for subprocesses): put back the
        # user's, or a later experiment in this process would log into this one's store.
        if env_uri is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = env_uri
        self._set_up = True

    def log_trial_start(self, trial):
        if not self._set_up:
            self._set_up_store(trial)
        super().log_trial_start(trial)

    def log_trial_result(self, iteration, trial, result):
        # One batch per iteration, where Ray's callback writes each metric on its own: on a
        # SQLite store ~0.02 s instead of ~0.4 s for an RLVR result's ~90 numbers.
        from mlflow.entities import Metric

        step = result.get(TIMESTEPS_TOTAL) or result[TRAINING_ITERATION]
        at_ms = int(time.time() * 1000)
        metrics = [Metric(name, value, at_ms, step)
                   for name, value in mlflow_metrics(result).items()]
        self._client.log_batch(self._trial_runs[trial], metrics=metrics)

    def log_trial_end(self, trial, failed=False):
        # A trial that failed before it started has no MLflow run.
        if self._set_up and trial in self._trial_runs:
            super().log_trial_end(trial, failed)


class WandbCallback(WandbLoggerCallback):
    """Ray's WandbLoggerCallback; the option `mode="offline"` (or "disabled") also skips Ray's
    check for an API key, which otherwise only WANDB_MODE skips."""

    def setup(self, *args, **kwargs):
        mode = self.kwargs.get("mode")
        if mode not in ("offline", "disabled") or os.environ.get("WANDB_MODE") == mode:
            return super().setup(*args, **kwargs)
        before = os.environ.get("WANDB_MODE")
        os.environ["WANDB_MODE"] = mode
        try:
            return super().setup(*args, **kwargs)
        finally:
            if before is None:
                del os.environ["WANDB_MODE"]
            else:
                os.environ["WANDB_MODE"] = before


def _require(modules: tuple[str, ...], what: str, extra: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ModuleNotFoundError(
            f"{what} needs the package(s) {', '.join(missing)}, which are not installed; "
            f"install them with: pip install 'rllib_llm[{extra}]'")


def _options(value: bool | Mapping[str, Any], name: str) -> dict[str, Any]:
    if value is True:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"experiment_callbacks({name}={value!r}): must be None, False, True or a "
                    f"mapping of {name} options")


def mlflow_callback(**options: Any) -> MLflowCallback:
    """An MLflow logger for a Tuner's `RunConfig(callbacks=...)`; options as MLflowLoggerCallback's
    (see the module docstring for the defaults)."""
    valid = [p for p in inspect.signature(MLflowLoggerCallback.__init__).parameters if p != "self"]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"mlflow options {unknown} are not MLflowLoggerCallback options; valid "
                         f"ones: {valid}")
    uri = options.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:"
    sqlite = _MLFLOW_SQLITE_MODULES if uri.startswith("sqlite:") else ()
    _require(_MLFLOW_MODULES + sqlite, "MLflow logging", "mlflow")
    return MLflowCallback(**options)


def wandb_callback(**options: Any) -> WandbCallback:
    """A W&B logger for a Tuner's `RunConfig(callbacks=...)`; options as WandbLoggerCallback's,
    others to `wandb.init` (see the module docstring for the defaults)."""
    _require(_WANDB_MODULES, "W&B logging", "wandb")
    options.setdefault("project", os.environ.get("WANDB_PROJECT", "rllib_llm"))
    # Passed to wandb.init explicitly: Ray's logging actor may have started before WANDB_MODE
    # was set in the driver.
    if os.environ.get("WANDB_MODE"):
        options.setdefault("mode", os.environ["WANDB_MODE"])
    return WandbCallback(**options)


def experiment_callbacks(*, mlflow: bool | Mapping[str, Any] | None = None,
                         wandb: bool | Mapping[str, Any] | None = None) -> list[tune.Callback]:
    """Tune callbacks that log each trial to MLflow and/or W&B; None or False: not that one,
    True: its defaults, a mapping: its options (see the module docstring).

        tune.RunConfig(callbacks=experiment_callbacks(mlflow=True))
    """
    callbacks: list[tune.Callback] = []
    if mlflow is not None and mlflow is not False:
        callbacks.append(mlflow_callback(**_options(mlflow, "mlflow")))
    if wandb is not None and wandb is not False:
        callbacks.append(wandb_callback(**_options(wandb, "wandb")))
    return callbacks
