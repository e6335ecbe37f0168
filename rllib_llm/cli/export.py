"""`rllib-llm export RUN_DIR OUT`: a run's trained policy as a Hugging Face model directory.

    rllib-llm export runs/my_run exported/            the latest checkpoint of the run
    rllib-llm export runs/sweep out --checkpoint RLVR_abc_00001      one trial of a sweep
    rllib-llm export runs/my_run/RLVR_x/checkpoint_000004 out       that checkpoint

OUT then loads with `AutoModelForCausalLM.from_pretrained(OUT)` and
`AutoTokenizer.from_pretrained(OUT)` (and vLLM's `LLM(model=OUT)`); see
`rllib_llm.outputs.checkpoints.export_policy` for what it holds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rllib_llm.cli.paths import absolute_path


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "export",
        help="write a run's trained policy as a Hugging Face model directory",
        description="Write the trained policy of a run (or of one checkpoint) to OUT as a "
                    "Hugging Face model directory: weights in the policy's dtype, config, "
                    "tokenizer and generation config.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", type=absolute_path,
                        help="a run directory (the latest checkpoint in it is exported) or a "
                             "checkpoint directory")
    parser.add_argument("out", metavar="OUT", type=absolute_path,
                        help="directory to write (new or empty)")
    parser.add_argument("--checkpoint", metavar="PATH",
                        help="the checkpoint or trial directory to export, relative to RUN_DIR "
                             "(or absolute); needed when RUN_DIR holds several trials")
    parser.add_argument("--force", action="store_true",
                        help="write into OUT even if it is not empty (files of the same names "
                             "are overwritten)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rllib_llm.outputs.checkpoints import (
        CheckpointError,
        CheckpointWriteError,
        export_policy,
        find_checkpoint,
        training_iteration,
    )

    try:
        checkpoint = find_checkpoint(args.run_dir, args.checkpoint)
        print(f"exporting {checkpoint} (iteration {training_iteration(checkpoint)})",
              file=sys.stderr)
        files = export_policy(checkpoint, args.out, force=args.force)
    except (CheckpointError, FileNotFoundError, FileExistsError) as e:
        print(f"rllib-llm export: error: {e}", file=sys.stderr)
        return 2
    except CheckpointWriteError as e:  # a full disk: nothing of OUT was written
        print(f"rllib-llm export: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}:")
    for path in files:
        print(f"  {path.relative_to(Path(args.out).expanduser())}  ({_size(path.stat().st_size)})")
    return 0


def _size(num_bytes: int) -> str:
    if num_bytes >= 2**20:
        return f"{num_bytes / 2**20:.1f} MB"
    return f"{num_bytes / 1024:.1f} KB" if num_bytes >= 1024 else f"{num_bytes} B"
