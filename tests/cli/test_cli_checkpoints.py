"""`rllib-llm train`'s checkpoints (Tune's, through RLVR.save) are whole or absent: each carries
rllib_llm_complete.json, a run directory on a full disk ends the run with one line naming the
checkpoint it could not write and leaves none part-written, and `--resume`'s answer names the
newest whole checkpoint, not a torn one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rllib_llm.algorithm.checkpoint_files import write_complete_file
from rllib_llm.cli.train import UnresumableRunError, check_experiment_state
from rllib_llm.outputs.checkpoints import find_checkpoint, is_whole_checkpoint

ROOT = Path(__file__).resolve().parents[2]
RUN = """
environment:
  env: math_verify
  env_config: {dataset: arithmetic, dataset_kwargs: {max_operand: 4, test_size: 8}}
training: {pg_variant: topr, adv_estimator: grpo, rollout_batch_size: 16,
           num_return_sequences_in_group: 4, response_length: 6, use_kl_loss: false}
debugging: {seed: 0, log_level: ERROR}
run: {iterations: 4, checkpoint_every: 1, keep_checkpoints: 2}
"""


@pytest.mark.slow
def test_a_full_disk_ends_a_run_in_one_line_with_its_checkpoints_whole(small_disk, tmp_path):
    # 10 MiB: room for the run's logs and one checkpoint of the embedded model (6.5 MB), not two.
    disk = small_disk("10m")
    config = tmp_path / "run.yaml"
    config.write_text(RUN)
    run_dir = disk / "run"
    done = subprocess.run([sys.executable, "-m", "rllib_llm.cli", "train", str(config),
                           "--run-dir", str(run_dir)], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=ROOT, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert "Traceback" not in out
    (trial,) = run_dir.glob("RLVR_*")
    lines = [line for line in out.splitlines() if "could not write" in line]
    assert len(lines) == 1, out[-3000:]
    (line,) = lines
    assert f"could not write '{trial / 'checkpoint_000001'}': " in line, line
    assert "No space left on device; nothing of it was left" in line, line
    # The first checkpoint, whole (Tune copied it, rllib_llm_complete.json with it); no other.
    assert sorted(p.name for p in trial.iterdir() if "checkpoint" in p.name) == \
        ["checkpoint_000000"]
    assert is_whole_checkpoint(trial / "checkpoint_000000")
    assert find_checkpoint(run_dir) == trial / "checkpoint_000000"


def test_resume_names_the_newest_whole_checkpoint_of_a_run_it_cannot_resume(tmp_path):
    trial = tmp_path / "run" / "RLVR_x"
    for i in (1, 2):  # checkpoint_000002 torn: its copy stopped before the marker
        (trial / f"checkpoint_00000{i}" / "learner_group").mkdir(parents=True)
        (trial / f"checkpoint_00000{i}" / "algorithm_state.pkl").write_bytes(b"x" * 10)
    write_complete_file(trial / "checkpoint_000001", 1)
    (tmp_path / "run" / "experiment_state-2026-11-29_00-00-00.json").write_text('{"trial')
    with pytest.raises(UnresumableRunError) as e:
        check_experiment_state(tmp_path / "run")
    assert f"Its last whole checkpoint, {trial / 'checkpoint_000001'}, still serves" in \
        str(e.value)
