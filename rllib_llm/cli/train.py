"""`rllib-llm train CONFIG.yaml [--set key=value ...] [--run-dir DIR]` and
`rllib-llm train --resume RUN_DIR`: one RLVR run through Ray Tune (cli/tune_runs.py), checkpointed
every `run.checkpoint_every` iterations; a resumed run continues from its last checkpoint and ends
at the same iteration count.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rllib_llm.cli.config_file import ConfigFileError, RunFile, read_run_file
from rllib_llm.cli.paths import absolute_path, new_run_dir_problem
from rllib_llm.cli.settings_help import settings_help


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "train", help="train from a config file (rllib_llm sections or a ROLL RLVR YAML)",
        description=__doc__, epilog=settings_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?", type=absolute_path, help="the YAML file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting: section.key=value, or field=value for a "
                             "training field or run setting (values are YAML); repeatable")
    parser.add_argument("--run-dir", type=absolute_path,
                        help="where the run goes (default runs/<file>-<time>)")
    parser.add_argument("--resume", metavar="RUN_DIR", type=absolute_path,
                        help="continue a run from its last checkpoint (after a crash or a kill)")
    parser.add_argument("--strict", action="store_true",
                        help="a ROLL field that maps onto nothing is an error, not a report line")
    parser.add_argument("--dry-run", action="store_true",
                        help="read and check the file, print the settings, do not train")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        if args.resume:
            if args.config or args.set:
                raise ConfigFileError("--resume continues a run as it was started: give no "
                                      "config file and no --set with it")
            return resume(args.resume)
        if not args.config:
            raise ConfigFileError("give a config file (or --resume RUN_DIR)")
        run_file = read_run_file(args.config, args.set, strict=args.strict)
        _print_mapping(run_file)
        run_file.check()
    except (ConfigFileError, FileNotFoundError, UnresumableRunError) as e:
        print(f"rllib-llm train: error: {e}", file=sys.stderr)
        return 2
    run_dir = args.run_dir or absolute_path(
        f"runs/{run_file.path.stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    if (problem := new_run_dir_problem(run_dir)) is not None:
        print(f"rllib-llm train: error: --run-dir {problem}", file=sys.stderr)
        return 2
    if run_dir.exists() and any(run_dir.iterdir()):
        print(f"rllib-llm train: error: {run_dir} is not empty: continue that run with "
              f"--resume {run_dir}, or pick another --run-dir", file=sys.stderr)
        return 2
    try:
        run_file.check_env()  # reads the data: after the cheap checks
    except ConfigFileError as e:
        print(f"rllib-llm train: error: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(_dump(run_file.sections))
        return 0
    return start(run_file, run_dir)


def start(run_file: RunFile, run_dir: Path) -> int:
    from ray import tune

    from rllib_llm.algorithm.cluster_fit import check_trial_fits
    from rllib_llm.cli.tune_runs import init_ray, run_config, trainable, write_run_file

    run = run_file.run
    init_ray()
    try:
        check_trial_fits(run_file.to_config())  # Tune would wait for it forever, silently
    except ValueError as e:
        print(f"rllib-llm train: error: {e}", file=sys.stderr)
        return 2
    write_run_file(run_dir, run_file.sections)
    print(f"run directory: {run_dir} ({run['iterations']} iterations, a checkpoint every "
          f"{run['checkpoint_every'] or 'run (at the end)'})", flush=True)
    tuner = tune.Tuner(trainable(run), param_space=run_file.to_config(),
                       run_config=run_config(run_dir, run, progress_bar=run["progress"]))
    return finish(tuner.fit(), run_dir)


class UnresumableRunError(RuntimeError):
    """A run directory whose Tune experiment state cannot be read back."""


def resume(run_dir: Path) -> int:
    from ray import tune

    from rllib_llm.cli.tune_runs import RUN_FILE, init_ray, read_run_file, trainable

    sections = read_run_file(run_dir)  # a run directory of ours, or a clear error
    if not tune.Tuner.can_restore(str(run_dir.resolve())):
        raise FileNotFoundError(f"{run_dir} holds no Tune experiment state to resume from")
    check_experiment_state(run_dir)
    # The data may have changed or gone since the run started: said now, not by a trial.
    RunFile(run_dir / RUN_FILE, sections).check_env()
    init_ray()
    print(f"resuming {run_dir} from its last checkpoint", flush=True)
    tuner = tune.Tuner.restore(str(run_dir.resolve()),
                               trainable=trainable(sections.get("run") or {}),
                               resume_unfinished=True, resume_errored=True)
    return finish(tuner.fit(), run_dir)


def check_experiment_state(run_dir: Path) -> None:
    """Raise UnresumableRunError when the experiment state Tune would resume from (the newest
    experiment_state-*.json, as Tune picks it) is not JSON.

    Ray Tune 2.60 writes that file in place (open for writing, then json.dump), not through a
    temporary file and a rename: a run killed during the write leaves it empty or cut short.
    Tune's restore then logs the error, starts the experiment over with an empty config, and the
    new trial fails on a missing environment; saying what happened is the useful answer.
    """
    newest = max(run_dir.glob("experiment_state-*.json"), key=lambda p: p.name)
    try:
        json.loads(newest.read_text())
    except ValueError as e:
        from rllib_llm.outputs.checkpoints import newest_whole_checkpoint

        # Whole ones only: a run killed while Tune copied a checkpoint left it part-written.
        last = newest_whole_checkpoint(run_dir)
        raise UnresumableRunError(
            f"{run_dir} cannot be resumed: Ray Tune's experiment state {newest.name} is empty or "
            f"cut short ({e}): the run was stopped while Tune wrote it, which Tune does not do "
            "atomically. "
            + (f"Its last whole checkpoint, {last}, still serves `rllib-llm eval` and "
               "`rllib-llm export`; start a new run to train further."
               if last else "It holds no whole checkpoint: start a new run.")) from e


def finish(results, run_dir: Path) -> int:
    """Say how the run ended, where its checkpoints are and what to do with them."""
    from rllib_llm.cli.progress import result_value
    from rllib_llm.cli.tune_runs import report_errors
    from rllib_llm.outputs import metric_names as m

    status = report_errors(results)
    result = results[0]
    metrics = result.metrics or {}
    done = metrics.get(m.ITERATION, 0)
    parts = [f"{label} {value:.3f}" for label, key in
             (("reward", m.REWARD), ("accuracy", m.ACCURACY))
             if (value := result_value(metrics, key)) is not None]
    print(f"{'failed' if status else 'done'} after {done} iterations"
          + (f": {', '.join(parts)}" if parts else ""))
    if result.checkpoint is not None:
        print(f"last checkpoint: {result.checkpoint.path}")
    # Only what there is something for: plot needs an iteration's results, export and eval a
    # checkpoint (a run that failed before either has nothing to go on with).
    if result.checkpoint is not None:
        print(f"next: rllib-llm plot {run_dir} | rllib-llm export {run_dir} OUT | "
              f"rllib-llm eval {run_dir}")
    elif done:
        print(f"next: rllib-llm plot {run_dir}")
    return status


def _print_mapping(run_file: RunFile) -> None:
    if run_file.roll_report:
        print(run_file.roll_report)
    for note in run_file.notes:
        print(note)


def _dump(sections: dict) -> str:
    import yaml

    return yaml.safe_dump(sections, sort_keys=False)
