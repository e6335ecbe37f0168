"""A command killed with SIGKILL leaves no Ray process of its own (rllib_llm/cli/ray_fate.py):
the local Ray that `init_ray` starts, as every subcommand does, goes with it; a reader of its logs
does not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

DRIVER = """
import time
import ray
from rllib_llm.cli.tune_runs import init_ray

init_ray()
print(ray._private.worker._global_node.get_session_dir_path(), flush=True)
time.sleep(600)
"""
READER = "import sys, time; f = open(sys.argv[1]); print('open', flush=True); time.sleep(600)"


def living(pids) -> list[int]:
    """Those of `pids` that are running (not gone, not a zombie waiting to be reaped)."""
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            alive.append(pid)
    return alive


def in_session(sid: int) -> list[int]:
    """The running processes of the Unix session `sid` (a process started with
    start_new_session leads one, and every process it starts joins it)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid:
                    pids.append(int(entry))
            except OSError:
                continue
    return living(pids)


def watchers(session_dir: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if b"ray_fate.py" in cmdline and session_dir.encode() in cmdline:
                pids.append(int(entry))
    return living(pids)


@pytest.mark.slow
def test_a_killed_driver_leaves_no_ray_process_of_its_own():
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                              start_new_session=True)
    reader = None
    try:
        session_dir = driver.stdout.readline().strip()
        assert session_dir.startswith("/"), session_dir
        deadline = time.monotonic() + 60
        # Ray's processes, the raylet's agents among them (the ones that outlived a driver).
        while len(in_session(driver.pid)) < 6:
            assert time.monotonic() < deadline, in_session(driver.pid)
            time.sleep(0.2)
        started = in_session(driver.pid)
        assert len(watchers(session_dir)) == 1
        log = next(Path(session_dir, "logs").glob("raylet.out"))
        reader = subprocess.Popen([sys.executable, "-c", READER, str(log)],
                                  stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert reader.stdout.readline().strip() == "open"

        driver.send_signal(signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 10
        while living(started) or watchers(session_dir):
            assert time.monotonic() < deadline, (living(started), watchers(session_dir))
            time.sleep(0.2)
        assert in_session(driver.pid) == []
        assert reader.poll() is None  # it only read a log of the session
    finally:
        for process in (driver, reader):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if driver.poll() is not None:
            for pid in in_session(driver.pid):  # what this test started, if the check failed
                os.kill(pid, signal.SIGKILL)
