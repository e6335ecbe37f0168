"""A local Ray that ends with the command that started it, even one killed with SIGKILL.

`ray.init()` gives the processes it starts (GCS, raylet, monitors) the driver's fate: Linux kills
them when it dies (PR_SET_PDEATHSIG, ray/_private/services.py `start_ray_process`). Not so the
agents the raylet starts, DashboardAgent and RuntimeEnvAgent: they notice the raylet's death, then
wait on the dead GCS to report it (ray/_private/process_watcher.py), and a SIGKILLed driver left
them running (still there 60 s later; a user counted 4 Ray processes per killed driver).

`watch_driver(session_dir)` starts this file as a small process of its own (stdlib only, so no
Ray or torch is imported) that checks twice a second whether the driver lives; once it does not,
it SIGKILLs every process still writing to a file of the driver's Ray session (each Ray process
writes its logs there: a session directory is unique to one `ray.init()`), and exits.
It touches nothing else: not a Ray cluster the command only connected to, not another session's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_S = 0.5
# The watchers started: a Popen dropped while its process runs makes Python warn (ResourceWarning).
_watchers: list[subprocess.Popen] = []


def watch_driver(session_dir: str) -> subprocess.Popen:
    """Start the watcher of this process (the driver) and its Ray session in `session_dir`."""
    pid = os.getpid()
    watcher = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), str(pid), _start_time(pid), session_dir],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        # Its own session: Ctrl-C or a signal to the command's process group leaves it to clean
        # up after them; holding none of the command's pipes, it delays no reader of its output.
        start_new_session=True, close_fds=True)
    _watchers.append(watcher)
    return watcher


def _start_time(pid: int) -> str:
    """The process's start time (clock ticks since boot): a pid reused later has another.
    ('' when it is gone; a zombie, dead but not yet reaped, counts as gone.)"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # Fields after the command name, which may hold spaces: state is the first.
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return ""
    return "" if fields[0] in ("Z", "X") else fields[19]


def session_processes(session_dir: str, exclude: int) -> list[int]:
    """The processes (other than `exclude`) with a file in `session_dir` open for writing: each
    Ray process writes its logs there (the GCS and the raylet their stdout and stderr too). A
    reader, such as a `tail -f` of a log, is none of them."""
    inside = session_dir.rstrip("/") + "/"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == exclude:
            continue
        try:
            if any(_writes_inside(entry, fd, inside) for fd in os.listdir(f"/proc/{entry}/fd")):
                found.append(int(entry))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def _writes_inside(pid: str, fd: str, inside: str) -> bool:
    if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith(inside):
        return False
    with open(f"/proc/{pid}/fdinfo/{fd}") as f:
        flags = next(int(line.split()[1], 8) for line in f if line.startswith("flags:"))
    return flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)


def main(argv: list[str]) -> int:
    driver, started, session_dir = int(argv[0]), argv[1], argv[2]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while _start_time(driver) == started:
        time.sleep(POLL_S)
    # Twice: a process the raylet started just before it died may open its log a moment later.
    for _ in range(2):
        for pid in session_processes(session_dir, exclude=os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(POLL_S)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
