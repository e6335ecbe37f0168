"""`rllib-llm plot RUN_DIR [RUN_DIR ...]`: PNG curves of one or more runs, side by side.

Writes `curves_by_iteration.png` and `curves_by_time.png` (reward, accuracy, held-out accuracy,
KL, entropy, response length, clip fraction; `rllib_llm.outputs.plots`) and prints their paths.
"""

from __future__ import annotations

import argparse
import sys

from rllib_llm.cli.paths import absolute_path, new_dir_problem


def add_parser(subparsers) -> None:
    from rllib_llm.outputs.plots import DEFAULT_SMOOTHING, PANELS_BY_NAME

    parser = subparsers.add_parser(
        "plot", help="PNG curves of one or more runs",
        description=__doc__.splitlines()[0].split(": ", 1)[1] + " A RUN_DIR is a `rllib-llm "
        "train`/`sweep` output directory (each trial in it a run, labelled by the settings the "
        "trials vary), one trial directory of it, or a demo run directory (metrics.csv).")
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", type=absolute_path,
                        help="run directories")
    parser.add_argument("--out", metavar="DIR", default=None, type=absolute_path,
                        help="where to write the PNGs (default: the first RUN_DIR)")
    parser.add_argument("--smoothing", type=float, default=DEFAULT_SMOOTHING, metavar="S",
                        help="weight in [0, 1) of TensorBoard's debiased exponential moving "
                        f"average; 0 plots the raw values (default {DEFAULT_SMOOTHING})")
    parser.add_argument("--metrics", metavar="NAME,NAME,...", default=None,
                        help="panels to draw, in order, comma-separated: "
                        f"{','.join(PANELS_BY_NAME)}, or any result key such as timers/learn "
                        "(default: all the panels)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rllib_llm.outputs.plots import load_runs, panels_for, plot_runs

    out = args.out or args.run_dirs[0]
    try:
        if args.out is not None and (problem := new_dir_problem(out, "a directory")):
            raise ValueError(f"--out {problem}")
        runs = load_runs(args.run_dirs)
        plots = plot_runs(runs, out, smoothing=args.smoothing,
                          panels=panels_for(args.metrics.split(",") if args.metrics else None))
    except (OSError, ValueError) as e:  # what was given: 2, as argparse's own usage errors
        print(f"rllib-llm plot: error: {e}", file=sys.stderr)
        return 2
    except ImportError as e:  # no matplotlib: the installation, not the input
        print(f"rllib-llm plot: error: {e}", file=sys.stderr)
        return 1
    for note in plots.notes:
        print(note)
    for path in plots.paths:
        print(path)
    return 0
