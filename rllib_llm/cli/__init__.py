"""`rllib-llm`: the command line (a console script; `python -m rllib_llm.cli` works too).

    rllib-llm train CONFIG.yaml [--set key=value ...]   train (RLVRConfig YAML or a ROLL YAML)
    rllib-llm eval ...                                   pass@1 / pass@k on held-out problems
    rllib-llm export RUN_DIR OUT                         the policy as a Hugging Face directory
    rllib-llm plot RUN_DIR [RUN_DIR ...]                 PNG curves of one or more runs
    rllib-llm sweep SWEEP.yaml                           a Ray Tune sweep

Each subcommand lives in its own module of this package (`SUBCOMMANDS`), which defines
`add_parser(subparsers)` (adding its parser, with `set_defaults(run=run)`) and `run(args) -> int`.
Modules load only when the command line is parsed, so `import rllib_llm` stays light.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = ("train", "eval", "export", "plot", "sweep")


def build_parser() -> argparse.ArgumentParser:
    from rllib_llm.cli.settings_help import settings_help

    parser = argparse.ArgumentParser(
        prog="rllib-llm",
        description="RL post-training of language models with verifiable rewards, on Ray RLlib.",
        epilog=settings_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"rllib_llm.cli.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 2
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
