"""The bf16 cases again as on a CPU without bf16 instructions (AVX2 only), where CI may run.

A CPU with AVX-512 BF16 or AMX (the development machine) and one with AVX2 alone (an EPYC, where
a bf16 matmul is ~70x slower and rounds differently) are both machines of this project's kind.
oneDNN capped at AVX2 (`ONEDNN_MAX_CPU_ISA`) and torch's kernels at AVX2 (`ATEN_CPU_CAPABILITY`)
make the first compute bf16 as the second does, and `native_bf16` answer False: every test that
uses bf16 or "auto" runs here both ways (this one runs them capped, in a child pytest).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AVX2_ONLY = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
# The files with bf16 or "auto" precision cases, and the names that pick those cases out.
BF16_FILES = ["tests/learner/test_autocast.py", "tests/exchange/test_precision.py",
              "tests/rollout/test_decode_graphs.py", "tests/learner/test_token_logp.py",
              "tests/algorithm/test_rlvr_e2e.py", "tests/learner/test_fused_kernels.py",
              "tests/outputs/test_export.py", "tests/core/test_core_properties.py",
              "tests/core/test_core_edge_cases.py", "tests/learner/test_tensor_state.py"]
BF16_CASES = "bfloat16 or bf16 or autocast or precision or dtype"


def avx2_env() -> dict[str, str]:
    return {**os.environ, **AVX2_ONLY, "OMP_NUM_THREADS": "1"}


def test_capped_at_avx2_bf16_is_not_native():
    probe = ("import torch; from rllib_llm.exchange.precision import native_bf16, "
             "autocast_for_device as a; print(native_bf16(torch.device('cpu')), a('auto', 'cpu'))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env=avx2_env(), cwd=ROOT, timeout=120)
    assert out.stdout.split() == ["False", "None"], out.stdout + out.stderr


@pytest.mark.slow
def test_the_bf16_cases_pass_on_a_cpu_without_bf16_instructions():
    """About 40 s: the bf16 cases of the files above (64 tests), in a child capped at AVX2."""
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", "-p",
                          "no:cacheprovider", *BF16_FILES, "-k", BF16_CASES],
                         capture_output=True, text=True, env=avx2_env(), cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout, run.stdout[-2000:]
