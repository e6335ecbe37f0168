"""Fixtures shared by the test modules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray with the machine's 2 cores for one test module (modules opt in with
    `pytestmark = pytest.mark.usefixtures("ray_session")`)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def untrained_greedy_accuracy() -> float:
    """`rllib-llm eval embedded`: greedy pass@1 of the untrained embedded model on the 500
    held-out problems the CLI tests' runs evaluate on (their `evaluation_config`)."""
    run = subprocess.run([sys.executable, "-m", "rllib_llm.cli", "eval", "embedded",
                          "--num-problems", "500", "--temperature", "0", "--response-length",
                          "6", "--json"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout[run.stdout.index("{"):])["pass@1"]
