"""Ray Tune runs for `rllib-llm train` and `sweep`: one RLVR trial (train) or many (sweep), with
Tune's checkpointing, loggers (CSV, JSON and TensorBoard by default; MLflow and W&B on request) and
its experiment state, which is what `train --resume` restores.

A run directory is a Tune experiment directory:

    RUN_DIR/
      rllib_llm_run.yaml            the file as run (sections after --set; the ROLL file mapped)
      experiment_state-*.json       Tune's record of the trials (what --resume reads)
      RLVR_<id>_00000_.../          one per trial: progress.csv, result.json, events.out.tfevents*,
                                    params.json, checkpoint_000NNN/ (RLlib Algorithm checkpoints)
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import yaml

RUN_FILE = "rllib_llm_run.yaml"


def init_ray() -> None:
    """A local Ray for this command (or the cluster at RAY_ADDRESS), its workers' logs kept out
    of the driver's output, which shows the progress bar or Tune's table."""
    import ray

    # Tune's older console output: with verbose=0 it prints nothing, so the progress bar is
    # alone; the newer one prints its banner and a TensorBoard hint to a temporary directory.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # Tune snapshots its experiment state whenever a trial has written `keep_checkpoints`
    # checkpoints since the last one (so a resume never looks for a deleted checkpoint), and
    # warns when that is often; runs of small models checkpoint often on purpose.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # A trial runs where the command was started, not in its trial directory (Tune's default):
    # a relative path in the config (a dataset, a model directory) means what it meant to the
    # checks the command ran before Ray, which passed it.
    os.environ.setdefault("RAY_CHDIR_TO_TRIAL_DIR", "0")
    for name in HideTrialTracebacks.LOGGERS:
        tune_log = logging.getLogger(name)
        if not any(isinstance(f, HideTrialTracebacks) for f in tune_log.filters):
            tune_log.addFilter(HideTrialTracebacks())
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False,
                 num_cpus=None if os.environ.get("RAY_ADDRESS") else os.cpu_count())
        node = ray._private.worker._global_node  # Ray's own node object: no public accessor
        if node is not None and node.head:  # started here, not a cluster it connected to
            from rllib_llm.cli.ray_fate import watch_driver

            # A local Ray started here ends with this process, even SIGKILLed (ray_fate.py).
            watch_driver(node.get_session_dir_path())


def checkpoint_config(run: dict[str, Any]):
    """Tune's CheckpointConfig from the run settings (cli/run_settings.py)."""
    from ray import tune

    return tune.CheckpointConfig(
        checkpoint_frequency=run["checkpoint_every"],
        checkpoint_at_end=True,
        num_to_keep=run["keep_checkpoints"],
        checkpoint_score_attribute=run["checkpoint_score"],
        checkpoint_score_order=run["checkpoint_score_mode"],
    )


def run_config(run_dir: Path, run: dict[str, Any], *, progress_bar: bool,
               swept: list[str] = ()):
    """Where the run goes, when it stops, its checkpoints and its callbacks; a sweep (no
    progress bar) reports Tune's trial table with the `swept` settings' columns."""
    from ray import tune

    from rllib_llm.cli.checkpoint_list import ForgetDeletedCheckpoints
    from rllib_llm.cli.progress_csv import ProgressCSV, ResultJSON

    # Replacing Tune's CSV and JSON loggers (progress_csv.py says why); checkpoint_list.py says
    # what the last one is for.
    callbacks = [ProgressCSV(), ResultJSON(), ForgetDeletedCheckpoints()]
    if run["mlflow"] or run["wandb"]:
        from rllib_llm.outputs.experiment_logs import experiment_callbacks

        callbacks += experiment_callbacks(mlflow=run["mlflow"] or None,
                                          wandb=run["wandb"] or None)
    if progress_bar:
        from rllib_llm.cli.progress import ProgressBar

        callbacks.append(ProgressBar(run["iterations"]))
    run_dir = run_dir.resolve()
    return tune.RunConfig(
        name=run_dir.name,
        storage_path=str(run_dir.parent),
        stop={"training_iteration": run["iterations"]},
        checkpoint_config=checkpoint_config(run),
        callbacks=callbacks,
        # The bar replaces Tune's table in `train`; sweeps keep the table, trial by trial.
        verbose=0 if progress_bar else 1,
        progress_reporter=None if progress_bar else trial_table(swept),
    )


def trial_table(swept: list[str]):
    """Tune's table of trials: their swept settings and the stable metrics, not whole configs."""
    from ray import tune

    from rllib_llm.outputs import metric_names as m

    return tune.CLIReporter(
        parameter_columns=list(swept),
        metric_columns={m.ITERATION: "iter", m.REWARD: "reward", m.ACCURACY: "acc",
                        m.HELD_OUT_ACCURACY: "held_out", m.TIME_TOTAL_S: "seconds"},
        max_report_frequency=30,
    )


def trial_resources(config) -> dict[str, float]:
    """What one trial of `config` asks Ray for, summed over its placement group's bundles (RLlib's
    `Algorithm.default_resource_request`): the main process, max(`num_cpus_for_main_process`,
    `num_cpus_per_learner`) CPUs (1 and "auto" = 1 without a GPU: the local learner runs in it)
    and `num_gpus_per_learner` GPUs; plus each remote env runner's and learner's own."""
    from rllib_llm.algorithm.rlvr import RLVR

    total: dict[str, float] = {}
    for bundle in RLVR.default_resource_request(config).bundles:
        for name, amount in bundle.items():
            total[name] = total.get(name, 0.0) + float(amount)
    return {name: amount for name, amount in total.items() if amount}


def describe_resources(per_trial: dict[str, float],
                       available: dict[str, float] | None = None) -> str:
    """'each trial asks for 1 CPU; Ray has 2 CPU: up to 2 trial(s) at once'."""
    text = "each trial asks for " + ", ".join(f"{n:g} {name}" for name, n in per_trial.items())
    if available is None:
        return text
    fits = min(int(available.get(name, 0.0) // n) for name, n in per_trial.items())
    has = ", ".join(f"{available.get(name, 0.0):g} {name}" for name in per_trial)
    return f"{text}; Ray has {has}: up to {fits} trial(s) at once"


def write_run_file(run_dir: Path, sections: dict[str, Any]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RUN_FILE).write_text(yaml.safe_dump(sections, sort_keys=False))


def read_run_file(run_dir: Path) -> dict[str, Any]:
    """The sections a run was started with (for --resume); ConfigFileError if they cannot be
    read (not UTF-8, not YAML: one line, as for a config file)."""
    from rllib_llm.cli.config_file import read_yaml_file

    path = run_dir / RUN_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{run_dir} is not a run directory of `rllib-llm train` ({RUN_FILE} is missing)")
    return read_yaml_file(path)


def report_errors(results) -> int:
    """Print each failed trial's cause in one line (its traceback is in the trial directory's
    error.txt); the exit status (1 if any failed)."""
    failed = [r for r in results if r.error]
    for r in failed:
        print(f"trial {r.path} failed: {trial_cause(r.error)} (traceback: {r.path}/error.txt)")
    return 1 if failed else 0


def trial_cause(error: BaseException | str) -> str:
    """'ValueError: <its message>' of the exception that failed a trial.

    Tune hands back a RayTaskError (the trial actor's), whose text is the whole remote traceback,
    and an error of an env runner inside it is another; each keeps what was raised as `cause`.
    The innermost cause's own message is the one line a user needs. Where Tune has only the
    text of the trial's error.txt (a `str`: "Failure # 1 (occurred at ...)", then Ray's or the
    traceback's text), its first line after that header, or a traceback's last line.
    """
    while isinstance(getattr(error, "cause", None), BaseException) and error.cause is not error:
        error = error.cause
    lines = [line.strip() for line in str(error).splitlines()
             if line.strip() and not line.startswith("Failure # ")]
    if any(line.startswith('File "') for line in lines):
        # No cause kept (a RayTaskError whose exception did not pickle; an actor whose
        # constructor raised): its text ends in the traceback, whose last line is the exception.
        return lines[-1]
    if isinstance(error, str):  # e.g. Ray's out-of-memory kill: "1 worker(s) were killed ..."
        return lines[0] if lines else "unknown (see error.txt)"
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


class HideTrialTracebacks(logging.Filter):
    """Drop Tune's console records of a failed trial: "Trial task failed for trial ..." with the
    trial's whole traceback, "Trials did not complete", and "Failed to fetch metrics" of a trial
    that failed before its first result. `report_errors` says the cause in one line, and Tune
    keeps the traceback in the trial's error.txt."""

    LOGGERS = ("ray.tune.execution.tune_controller", "ray.tune.tune",
               "ray.tune.analysis.experiment_analysis")
    DROPPED = ("Trial task failed for trial", "Trials did not complete",
               "Failed to fetch metrics for")

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.DROPPED)


def trainable(run: dict[str, Any]) -> type:
    """The class Tune trains: RLVR, or with `checkpoint_score` a subclass whose results also
    carry that metric under its flat name at the top level.

    Tune's checkpoint manager orders checkpoints by their score only when the score's key is in
    the result as given (`score_attr in metrics`, ray/train/_internal/checkpoint_manager.py), and
    falls back to recency otherwise: a nested metric such as `env_runners/accuracy` kept the most
    recent checkpoints, not the best. The flat copy is what it looks for.
    """
    from rllib_llm.algorithm.rlvr import RLVR

    score = run.get("checkpoint_score")
    if not score:
        return RLVR

    class ScoredRLVR(RLVR):
        def train(self):
            from ray.tune.utils import flatten_dict

            result = super().train()  # Tune's checkpoints read this same dict (_last_result)
            flat = flatten_dict(result)
            if score in flat and score not in result:
                result[score] = flat[score]
            return result

    ScoredRLVR.__name__ = ScoredRLVR.__qualname__ = RLVR.__name__  # trial names stay RLVR_...
    return ScoredRLVR
