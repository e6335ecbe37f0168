"""`benchmarks/gpu/gpu_check.py --small`: the GPU check's code paths on the CPU, so the script a GPU
loan runs has not rotted by the time one comes. Here every process must report the CPU (no GPU is
given), and the 403M-shape comparison must have run our side and run or skipped TRL's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROLES = {"learner", "env runner 0", "env runner 1"}
OURS_BUDGET = 2048  # --ours-set: not the default (4096), so the report shows it arrived

pytestmark = pytest.mark.slow


def gpu_check(tmp_path_factory, part: str) -> dict:
    """One part of `gpu_check.py --small`, in a process of its own: pytest-xdist may hand this
    module's tests to two workers, and a module fixture runs once in each, so a fixture per part
    keeps the check from running twice whole (about 50 s a part, 80 s both in one process)."""
    path = tmp_path_factory.mktemp("gpu_check") / "report.json"
    run = subprocess.run([sys.executable, "benchmarks/gpu/gpu_check.py", "--small", "--parts", part,
                          "--json", str(path), "--profile",
                          "--ours-set", f"max_tokens_per_micro_batch={OURS_BUDGET}"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "GPU check passed" in run.stdout
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def placements_report(tmp_path_factory) -> dict:
    return gpu_check(tmp_path_factory, "placements")


@pytest.fixture(scope="module")
def shape_report(tmp_path_factory) -> dict:
    return gpu_check(tmp_path_factory, "shape")


def test_every_placement_reports_each_process_on_the_cpu(placements_report):
    placements = {row["placement"]: row for row in placements_report["placements"]}
    assert set(placements) == {"one process", "local learner + remote runner",
                               "remote learner + remote runner"}
    for name, row in placements.items():
        assert "error" not in row, (name, row)
        roles = {p["role"] for p in row["processes"]}
        assert roles == (ROLES - {"env runner 1"} if name == "one process" else ROLES), name
        for p in row["processes"]:
            assert p["device"] == "cpu" and p["gpu_given"] is not True, (name, p)
        assert row["problems"] == [] and 0 <= row["before"] <= 1 and row["s_per_iteration"] > 0
    assert placements_report["failures"] == []
    one = placements["one process"]["processes"]
    assert len({p["pid"] for p in one}) == 1  # learner and sampler in the driver
    remote = placements["remote learner + remote runner"]["processes"]
    assert len({p["pid"] for p in remote}) == 3  # driver, learner actor, env runner actor


def test_the_shape_ran_our_side_and_ran_or_skipped_trls(shape_report):
    shape = shape_report["shape"]
    ours, trl = shape["ours"], shape["trl"]
    assert "error" not in ours, ours
    assert ours["update_s"] > 0 and ours["full_length"] is True
    assert set(ours["memory"]) == {"learner (driver)", "env runner 1"}
    assert all(m["rss_gib"] > 0 for m in ours["memory"].values())
    assert ours["mfu"] is None  # no GPU peak on the CPU
    assert ours["settings"]["max_tokens_per_micro_batch"] == OURS_BUDGET
    # --profile: one more update under torch.profiler, its learn phase by pass (no old-logp
    # pass: the learner trains on the sampler's log-probs here).
    passes = {p["pass"]: p for p in ours["profile"]["passes"]}
    assert set(passes) == {"rllib_llm/forward", "rllib_llm/backward", "rllib_llm/optimizer_step"}
    assert all(p["host_s"] > 0 for p in passes.values()) and ours["profile"]["top"]
    if "skipped" in trl:
        assert trl["skipped"]  # the reason
    else:
        assert "error" not in trl, trl
        assert trl["update_s"] > 0 and trl["full_length"] is True
        assert shape["comparison"]["time_ratio"] > 0
    assert shape_report["failures"] == []


def test_our_side_reports_its_sized_settings_its_phases_and_its_engine_against_generate(
        shape_report):
    """What the goal line reads: the settings each process settled on its device (on a CPU the
    fixed defaults, an explicit value as given), an update's time by phase from the new metrics,
    and the engine alone against model.generate on the same rows."""
    shape = shape_report["shape"]
    ours, sizes = shape["ours"], shape["sizes"]
    assert ours["sized"] == {"max_tokens_per_micro_batch": OURS_BUDGET,
                             "gradient_checkpointing": False,
                             "max_tokens_per_generate_batch": 32768}
    phases = ours["phases"]
    assert set(phases) == {"generate", "verify", "replay", "rest of the sample call",
                           "transfer to the driver", "learn", "weight sync (driver)",
                           "rest of the update (driver)", "weight load (runner)"}
    assert all(seconds >= 0 for seconds in phases.values()), phases
    assert phases["generate"] > 0 and phases["learn"] > 0
    # One measured update: its phases are its time, split (the object store's sync does not wait
    # for the runner's load, the driver's next call does: the load is taken out of its rest).
    assert len(ours["measured"]) == 1
    assert sum(phases.values()) == pytest.approx(ours["update_s"])
    engine = ours["engine_vs_generate"]
    tokens = sizes["prompts"] * sizes["group"] * sizes["tokens"]
    assert engine["engine_tokens"] == engine["generate_tokens"] == tokens
    assert engine["speedup"] > 0 and shape["comparison"]["engine_speedup"] == engine["speedup"]
    assert "goal_engine" not in shape["comparison"]  # the goal is a GPU's
