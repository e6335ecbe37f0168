"""`rllib-llm sweep SWEEP.yaml [--set key=value ...] [--run-dir DIR]`: a Ray Tune sweep.

A sweep file is a train file whose values may be search spaces — `{grid_search: [...]}`,
`{choice: [...]}`, `{uniform: [lo, hi]}`, `{loguniform: [lo, hi]}`, `{randint: [lo, hi]}`, in any
section — plus a `tune:` section: the metric, ASHA early stopping, trials per grid point. Trials run
side by side as far as Ray's resources go (it prints what each trial asks for: see
`tune_runs.trial_resources`). At the end it prints the best trial's settings and its metric curve.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path
from typing import Any

from rllib_llm.cli.config_file import BUILDER_SECTIONS, ConfigFileError, RunFile, read_run_file
from rllib_llm.cli.paths import absolute_path, new_run_dir_problem
from rllib_llm.cli.run_settings import TUNE_FIELDS
from rllib_llm.cli.search_spaces import (
    SEARCH_SPACE_KINDS,
    has_search_space,
    is_search_space,
    to_tune,
)
from rllib_llm.cli.settings_help import settings_help


def add_parser(subparsers) -> None:
    tune_help = "\n".join(f"  {f.name} (default {f.default!r}): {f.doc}" for f in TUNE_FIELDS)
    parser = subparsers.add_parser(
        "sweep", help="a Ray Tune sweep over any settings, with ASHA early stopping",
        description=__doc__, epilog=f"tune: (the sweep's own section)\n{tune_help}\n\n"
                                    f"{settings_help()}",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", type=absolute_path, help="the sweep's YAML file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting (as in `rllib-llm train`); repeatable")
    parser.add_argument("--run-dir", type=absolute_path,
                        help="where the sweep goes (default runs/<file>-<time>)")
    parser.add_argument("--dry-run", action="store_true",
                        help="read and check the file, print it, do not run")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        sweep = read_run_file(args.config, args.set, allow_search_spaces=True)
        if not any(has_search_space(v) for v in sweep.sections.values()):
            raise ConfigFileError(f"{sweep.path}: nothing to sweep: no setting is a search "
                                  "space ({grid_search: [...]}, {choice: [...]}, ...)")
        first_point(sweep).check()
    except ConfigFileError as e:
        print(f"rllib-llm sweep: error: {e}", file=sys.stderr)
        return 2
    run_dir = args.run_dir or absolute_path(
        f"runs/{sweep.path.stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    if (problem := new_run_dir_problem(run_dir)) is not None:
        print(f"rllib-llm sweep: error: --run-dir {problem}", file=sys.stderr)
        return 2
    if run_dir.exists() and any(run_dir.iterdir()):
        print(f"rllib-llm sweep: error: {run_dir} is not empty", file=sys.stderr)
        return 2
    try:
        for point in env_points(sweep):  # reads the data: after the cheap checks, as train does
            point.check_env()
    except ConfigFileError as e:
        print(f"rllib-llm sweep: error: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        import yaml

        from rllib_llm.cli.tune_runs import describe_resources, trial_resources

        print(yaml.safe_dump(sweep.sections, sort_keys=False))
        print(describe_resources(trial_resources(first_point(sweep).to_config())))
        return 0
    return start(sweep, run_dir)


def first_point(sweep: RunFile) -> RunFile:
    """The sweep with every search space at its first value (a grid's first, a range's low end):
    a config that can be checked before any trial starts."""

    def pick(value: Any) -> Any:
        if is_search_space(value):
            return next(iter(value.values()))[0]
        if isinstance(value, dict):
            return {k: pick(v) for k, v in value.items()}
        return value

    return RunFile(sweep.path, pick(copy.deepcopy(sweep.sections)))


def env_points(sweep: RunFile) -> list[RunFile]:
    """The sweep at its first point, and once more for each other discrete value of each swept
    `environment` setting (a grid of datasets: every dataset is read before any trial starts;
    a distribution's values are Tune's to draw)."""
    points = [first_point(sweep)]
    environment = sweep.sections.get("environment") or {}

    def swept(values: dict[str, Any], path: tuple[str, ...]):
        for name, value in values.items():
            if is_search_space(value):
                (kind, candidates), = value.items()
                if SEARCH_SPACE_KINDS[kind].discrete:
                    yield path + (name,), list(candidates)[1:]
            elif isinstance(value, dict):
                yield from swept(value, path + (name,))

    for path, candidates in swept(environment, ()):
        for candidate in candidates:
            point = first_point(sweep)
            target = point.sections["environment"]
            for part in path[:-1]:
                target = target[part]
            target[path[-1]] = candidate
            points.append(point)
    return points


def start(sweep: RunFile, run_dir: Path) -> int:
    import ray
    from ray import tune

    from rllib_llm.cli.tune_runs import (
        describe_resources,
        init_ray,
        report_errors,
        run_config,
        trainable,
        trial_resources,
        write_run_file,
    )

    run, settings = sweep.run, sweep.tune
    write_run_file(run_dir, sweep.sections)
    space = RunFile(sweep.path, {name: to_tune(values) if name not in ("run", "tune") else values
                                 for name, values in sweep.sections.items()})
    init_ray()
    print(describe_resources(trial_resources(first_point(sweep).to_config()),
                             ray.cluster_resources()), flush=True)
    # Held-out metrics are in the results of evaluating iterations only (`evaluation_interval`);
    # Tune's strict check would fail every other one. ASHA skips results without its metric.
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    tuner = tune.Tuner(
        trainable(run), param_space=space.to_config(),
        tune_config=tune.TuneConfig(
            metric=settings["metric"], mode=settings["mode"], num_samples=settings["num_samples"],
            scheduler=scheduler(settings, run["iterations"]),
            max_concurrent_trials=settings["max_concurrent_trials"]),
        run_config=run_config(run_dir, run, progress_bar=False,
                              swept=swept_keys(sweep.sections)),
    )
    results = tuner.fit()
    status = report_errors(results)
    print_best(results, settings["metric"], settings["mode"], swept_keys(sweep.sections))
    return status


def scheduler(settings: dict[str, Any], iterations: int):
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    if settings["scheduler"] == "fifo":
        return FIFOScheduler()
    return ASHAScheduler(time_attr="training_iteration", max_t=iterations,
                         grace_period=settings["grace_period"],
                         reduction_factor=settings["reduction_factor"])


def swept_keys(sections: dict[str, Any]) -> list[str]:
    """The settings that are search spaces, as `key/subkey` paths of the trial's config (whose
    top level holds every builder section's settings)."""

    def paths(values: dict[str, Any], prefix: str) -> list[str]:
        keys = []
        for name, value in values.items():
            if is_search_space(value):
                keys.append(prefix + name)
            elif isinstance(value, dict):
                keys += paths(value, f"{prefix}{name}/")
        return keys

    return [k for name in BUILDER_SECTIONS for k in paths(sections.get(name, {}), "")]


def print_best(results, metric: str, mode: str, keys: list[str]) -> None:
    """The best trial's swept settings (best: its best `metric` over all its iterations) and
    its metric, iteration by iteration."""
    try:
        best = results.get_best_result(scope="all")
    except RuntimeError as e:  # no trial reported the metric
        print(f"no best trial: {e}")
        return
    config = best.config or {}
    chosen = {k: _config_value(config, k) for k in keys}
    print(f"best trial: {best.path}")
    print("best settings: " + ", ".join(f"{k}={v!r}" for k, v in chosen.items()))
    frame = best.metrics_dataframe
    if frame is None or metric not in frame:
        return
    rows = frame[["training_iteration", metric]].dropna()
    print(f"its {metric} by iteration: " + ", ".join(
        f"{int(i)}: {v:.3f}" for i, v in zip(rows["training_iteration"], rows[metric],
                                             strict=True)))
    if len(rows):
        top = rows.loc[rows[metric].idxmax() if mode == "max" else rows[metric].idxmin()]
        print(f"best {metric}: {top[metric]:.3f} at iteration {int(top['training_iteration'])}; "
              f"last {rows[metric].iloc[-1]:.3f}")


def _config_value(config: dict[str, Any], key: str) -> Any:
    value: Any = config
    for part in key.split("/"):
        value = value.get(part) if isinstance(value, dict) else None
    return value

