"""RLVR's own checkpoints, whole or not at all: a save SIGKILLed at a random point leaves the
previous checkpoint or the new one, exactly, and a full disk leaves the previous one and nothing
else (rllib_llm/algorithm/checkpoint_files.py; tests/outputs/test_checkpoint_files.py tests the
pieces without Ray).

One child process builds the algorithm once (Ray and the model take ~20 s to start; the saves
~0.1 s). For each trial it trains an iteration, forks, and the fork runs `algo.save_to_path` over
the one checkpoint directory while the child sleeps a random part of a save's duration and sends
it SIGKILL: the saving process dies mid-save, as a killed driver does. The child then restores
the newest whole checkpoint and compares its iteration and every weight with the two candidates.
A trial counts only when the kill landed inside the save (its temporary directory was left
behind); the child keeps going until `TRIALS` have.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

TRIALS = 20

CHILD = r"""
import json, os, random, signal, subprocess, sys, time
from pathlib import Path

import ray
import torch

from rllib_llm.algorithm.checkpoint_files import CheckpointWriteError, torn_reason
from rllib_llm.outputs.checkpoints import find_checkpoint
from rllib_llm.recipes.embedded import embedded_config

root, trials, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
# lr 1e-2: every iteration moves the weights, so the two candidates differ.
algo = embedded_config("topr", seed=0, rollout_batch_size=2, num_return_sequences_in_group=2,
                       response_length=2, lr=1e-2).build_algo()
target = root / "runs" / "checkpoint"
rng = random.Random(seed)


def snapshot():
    model = algo.learner_group.local_learner.module["default_policy"].model
    return algo.training_iteration, {k: v.clone() for k, v in model.state_dict().items()}


def same(a, b):
    return a[0] == b[0] and all(torch.equal(a[1][k], b[1][k]) for k in a[1])


def save_in_fork(path):
    pid = os.fork()
    if pid == 0:  # the process that is killed: it saves, as a driver does
        try:
            algo.save_to_path(str(path))
        finally:
            os._exit(0)
    return pid


algo.train()
start = time.perf_counter()
os.waitpid(save_in_fork(target), 0)
save_s = time.perf_counter() - start
saved = snapshot()
outcomes = []
while sum(o["mid_save"] for o in outcomes) < trials and len(outcomes) < 5 * trials:
    algo.train()
    new = snapshot()
    pid = save_in_fork(target)
    time.sleep(rng.uniform(0, save_s))
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    left = sorted(p.name for p in target.parent.iterdir() if p.name != "checkpoint")
    found = find_checkpoint(target.parent)
    algo.restore_from_path(str(found))
    got = snapshot()
    outcomes.append({"mid_save": bool(left), "found": found.name, "iteration": got[0],
                     "restored": "new" if same(got, new) else "old" if same(got, saved)
                     else "neither", "new": new[0], "old": saved[0]})
    saved = got
algo.save_to_path(str(target))  # a whole save removes what the killed ones left
leftovers = sorted(p.name for p in target.parent.iterdir())

# A full disk: a real filesystem of 1.5 checkpoints holds the first save, not the second.
full = {}
small = root / "small"
small.mkdir()
size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size * 3 // 2}", "tmpfs",
                          str(small)], capture_output=True, text=True)
if mounted.returncode == 0:
    try:
        before = snapshot()
        algo.save_to_path(str(small / "checkpoint"))
        algo.train()
        try:
            algo.save_to_path(str(small / "checkpoint"))
        except CheckpointWriteError as e:
            full["error"] = str(e)
        full["left"] = sorted(os.listdir(small))
        full["torn"] = torn_reason(small / "checkpoint")
        algo.restore_from_path(str(small / "checkpoint"))
        full["restored_previous"] = same(snapshot(), before)
    finally:
        subprocess.run(["umount", str(small)], check=True)
else:
    full["skipped"] = mounted.stderr.strip()
algo.stop()
print("RESULT " + json.dumps({"save_s": save_s, "outcomes": outcomes, "leftovers": leftovers,
                              "full_disk": full}))
"""


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    root = tmp_path_factory.mktemp("whole")
    run = subprocess.run([sys.executable, "-c", CHILD, str(root), str(TRIALS), "47"],
                         capture_output=True, text=True, timeout=600)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


@pytest.mark.slow
def test_a_save_killed_at_any_point_leaves_the_previous_checkpoint_or_the_new_one(child):
    outcomes = child["outcomes"]
    killed_mid_save = [o for o in outcomes if o["mid_save"]]
    assert len(killed_mid_save) == TRIALS, outcomes
    # Every trial restores one of the two exactly: its iteration and every weight.
    assert all(o["restored"] in ("old", "new") for o in outcomes), outcomes
    assert all(o["found"] == "checkpoint" for o in outcomes), outcomes
    # The kills landed all over the save: some before the rename, so the previous one stayed.
    assert {o["restored"] for o in killed_mid_save} >= {"old"}, killed_mid_save
    assert child["leftovers"] == ["checkpoint"]


@pytest.mark.slow
def test_a_full_disk_leaves_the_previous_checkpoint_and_nothing_else(child):
    full = child["full_disk"]
    if "skipped" in full:
        pytest.skip(f"cannot mount a small tmpfs here: {full['skipped']}")
    assert full["error"].startswith("could not write '")
    assert "No space left on device" in full["error"] and "\n" not in full["error"]
    assert full["error"].endswith("/small/checkpoint' is as it was")
    assert full["left"] == ["checkpoint"] and full["torn"] is None
    assert full["restored_previous"]
