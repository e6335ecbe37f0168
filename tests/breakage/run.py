"""The breakage check: run the update-level tests with every optimizer step undone, and list the
tests that took an optimizer step and still passed. Each of them must say, in its docstring, why
an update's movement is not its subject ("Not about moving weights: ..."); any other one checks
an update without looking at what it did, and is listed as unexplained (exit status 1).

    .venv/bin/python tests/breakage/run.py [pytest arguments, e.g. a file or -k EXPR]
    make breakage-check

Not part of `make test` (it runs the update-level tests a second time, ~10 minutes on 2 cores).
How the steps are undone and counted: `sitecustomize.py` beside this file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# The tests whose subject is an update: learner steps, losses through the learner, LoRA,
# data-parallel and multi-node learners, DeepSpeed, the critic, async training, fused kernels,
# rollout importance sampling in training, ROLL's TOPR.
UPDATE_TESTS = ["learner/test_learner_steps.py", "models/test_lora.py",
                "learner/test_data_parallel.py", "algorithm/test_multi_node.py",
                "learner/test_deepspeed.py", "learner/test_critic.py",
                "algorithm/test_async_training.py", "learner/test_fused_kernels.py",
                "algorithm/test_rollout_is_training.py", "core/test_roll_topr.py"]


def main(argv: list[str]) -> int:
    targets = argv or [f"tests/{name}" for name in UPDATE_TESTS]
    with tempfile.TemporaryDirectory(prefix="breakage") as scratch:
        log, report = Path(scratch, "steps.log"), Path(scratch, "report.jsonl")
        env = {**os.environ, "RLLIB_LLM_BREAK_UPDATES": "1", "RLLIB_LLM_BREAK_LOG": str(log),
               "RLLIB_LLM_BREAK_REPORT": str(report),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE),
                                                           os.environ.get("PYTHONPATH")]))}
        subprocess.run([sys.executable, "-m", "pytest", "-p", "breakage_plugin", "-q",
                        "-n", os.environ.get("TEST_WORKERS", "2"), "--dist", "worksteal",
                        "-p", "no:cacheprovider", *targets], cwd=REPO, env=env, check=False)
        rows = [json.loads(line) for line in report.read_text().splitlines()] \
            if report.exists() else []
    stepped = [r for r in rows if r["steps"] > 0]
    still_passing = sorted((r for r in stepped if r["passed"]), key=lambda r: r["test"])
    unexplained = [r for r in still_passing if not r["explained"]]
    print(f"\nbreakage check: {len(rows)} tests ran, {len(stepped)} took an optimizer step "
          f"(all undone); {len(still_passing)} of those still passed:")
    for r in still_passing:
        print(f"  {'explained  ' if r['explained'] else 'UNEXPLAINED'} {r['test']}")
    if not rows:
        print("no test reported: did pytest run?")
        return 2
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
