"""One cgroup per sandbox run: the memory and the tasks of all its processes counted together.

Per-process rlimits cannot bound a run as a whole: 8 forked children each get the full address
space, and the kernel never applies RLIMIT_NPROC to root. A cgroup counts every process of the
run (bwrap, the code, whatever it forks, setsid or not) and the pages it puts in its tmpfs
mounts, against one `memory` limit and one `pids` limit; the kernel's OOM killer and fork's
EAGAIN enforce them, and the cgroup's process list is the one place to kill the whole run from.

The run joins its cgroup before anything of it starts: the command is prefixed with a tiny shell
that writes its own pid into each controller's `cgroup.procs` and then execs the real command
(`join_command`), so no process of the run is ever outside (a `preexec_fn` would do the same but
is not thread-safe).

Where runs can be placed (`detect()`, once per process):
- cgroup v2 (one hierarchy with the `memory` and `pids` controllers): under the caller's own
  cgroup when its `cgroup.subtree_control` can enable both (a cgroup without processes of its
  own), else beside it, under its parent (v2 forbids controllers below a cgroup that holds
  processes);
- cgroup v1: under the caller's own cgroup in the `memory` and in the `pids` hierarchy.
Either needs write access there: root outside a container, a privileged container, or a user
with a delegated subtree. Elsewhere `detect()` says why not, and the sandbox reports the run-wide
bound as missing (each process keeps its own rlimits).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

_CONTROLLERS = ("memory", "pids")
_BASE = f"rllib_llm_sandbox.{os.getpid()}"  # this process's runs, under the placement found
# The shell that joins the cgroups and then becomes the run's command: each argument before
# "--" is a cgroup.procs file. Exit status 125 (with a message) when joining fails.
_JOIN = ('while [ "$1" != -- ]; do echo $$ > "$1" || { echo "sandbox: cannot join the cgroup '
         '$1" >&2; exit 125; }; shift; done; shift; unset PWD; exec "$@"')
_REMOVE_TRIES = 500  # x 1 ms: killed processes take a moment to leave the cgroup


@dataclass(frozen=True)
class Placement:
    """Where this process's runs get their cgroups: one directory per controller."""

    version: int  # 1 or 2
    bases: tuple[str, ...]  # v2: one directory; v1: the memory one, then the pids one


@dataclass
class RunCgroup:
    """The cgroup(s) of one run: its limits, how to join, whether it ran out of memory."""

    version: int
    paths: tuple[str, ...]

    def join_command(self, command: list[str]) -> list[str]:
        """`command`, run by a process that has joined this cgroup first."""
        procs = [os.path.join(path, "cgroup.procs") for path in self.paths]
        return ["/bin/sh", "-c", _JOIN, "sh", *procs, "--", *command]

    def out_of_memory(self) -> bool:
        """Whether the kernel's OOM killer killed a process of the run (the run as a whole went
        over its memory limit)."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        for line in _read(os.path.join(self.paths[0], name)).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value) > 0
        return False

    def kill(self) -> None:
        """SIGKILL every process in the run (also those that left its process group)."""
        if self.version == 2 and _write(os.path.join(self.paths[0], "cgroup.kill"), "1"):
            return
        for _ in range(3):  # a fork racing the kill: its child shows up in a second pass
            pids = [int(p) for p in _read(os.path.join(self.paths[-1], "cgroup.procs")).split()]
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if not pids:
                return

    def remove(self) -> None:
        """Kill what is left and remove the cgroup(s) once the processes have left."""
        self.kill()
        for path in self.paths:
            for _ in range(_REMOVE_TRIES):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY: processes still exiting
                    time.sleep(0.001)
                    self.kill()


def detect() -> tuple[Placement | None, str]:
    """Where runs can get a cgroup on this machine, or None and why not."""
    try:
        own = _own_cgroups()
        mounts = _cgroup_mounts()
    except OSError as e:
        return None, f"cannot read this process's cgroups: {e}"
    reasons = []
    for version in (2, 1):
        try:
            placement = _place_v2(own, mounts) if version == 2 else _place_v1(own, mounts)
        except (OSError, LookupError) as e:
            reasons.append(f"v{version}: {e}")
            continue
        return placement, ""
    return None, "; ".join(reasons)


def create(placement: Placement, run_name: str, *, memory_bytes: int,
           max_tasks: int) -> RunCgroup:
    """A new cgroup for one run, with its limits set (OSError when that fails)."""
    paths = tuple(os.path.join(base, run_name) for base in placement.bases)
    made = []
    try:
        for path in paths:
            os.mkdir(path)
            made.append(path)
        if placement.version == 2:
            _set(paths[0], "memory.max", memory_bytes)
            _set(paths[0], "memory.swap.max", 0, optional=True)
            _set(paths[0], "pids.max", max_tasks)
        else:
            _set(paths[0], "memory.limit_in_bytes", memory_bytes)
            _set(paths[0], "memory.memsw.limit_in_bytes", memory_bytes, optional=True)
            _set(paths[1], "pids.max", max_tasks)
    except OSError:
        for path in reversed(made):
            _rmdir(path)
        raise
    return RunCgroup(placement.version, paths)


# --- placement ------------------------------------------------------------------------------------
def _own_cgroups() -> dict[str, str]:
    """controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    own = {}
    for line in _read("/proc/self/cgroup").splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            own[name] = path
    return own


def _cgroup_mounts() -> dict[str, str]:
    """controller (or "" for the v2 hierarchy) -> mount point, from /proc/self/mountinfo."""
    mounts: dict[str, str] = {}
    for line in _read("/proc/self/mountinfo").splitlines():
        fields = line.split()
        dash = fields.index("-")
        point, fstype, options = fields[4], fields[dash + 1], fields[dash + 3].split(",")
        root = fields[3]
        if root != "/":  # a bind mount of a sub-tree: paths in /proc/self/cgroup don't map
            continue
        if fstype == "cgroup2":
            mounts.setdefault("", point)
        elif fstype == "cgroup":
            for name in _CONTROLLERS:
                if name in options:
                    mounts.setdefault(name, point)
    return mounts


def _place_v2(own: dict[str, str], mounts: dict[str, str]) -> Placement:
    if "" not in mounts or "" not in own:
        raise LookupError("no cgroup2 hierarchy")
    root = mounts[""]
    available = _read(os.path.join(root, "cgroup.controllers")).split()
    missing = [c for c in _CONTROLLERS if c not in available]
    if missing:
        raise LookupError(f"the cgroup2 hierarchy at {root} lacks the {missing} controllers")
    own_dir = os.path.normpath(root + own[""])
    candidates = [own_dir] + ([os.path.dirname(own_dir)] if own_dir != root else [])
    errors = []
    for parent in candidates:
        base = os.path.join(parent, _BASE)
        try:
            _enable(parent)
            os.makedirs(base, exist_ok=True)
            _enable(base)
        except OSError as e:
            errors.append(f"{parent}: {e.strerror or e}")
            _rmdir(base)
            continue
        return Placement(2, (base,))
    raise OSError("; ".join(errors))


def _place_v1(own: dict[str, str], mounts: dict[str, str]) -> Placement:
    bases = []
    for name in _CONTROLLERS:
        if name not in mounts or name not in own:
            raise LookupError(f"no cgroup v1 {name} hierarchy")
        base = os.path.normpath(f"{mounts[name]}{own[name]}/{_BASE}")
        try:
            os.makedirs(base, exist_ok=True)
        except OSError as e:
            for made in bases:
                _rmdir(made)
            raise OSError(f"cannot create {base}: {e.strerror or e}") from None
        bases.append(base)
    if _read(os.path.join(bases[0], "memory.use_hierarchy")).strip() == "0":
        _write(os.path.join(bases[0], "memory.use_hierarchy"), "1")
    return Placement(1, tuple(bases))


def _enable(path: str) -> None:
    """Enable the memory and pids controllers for the children of v2 cgroup `path`."""
    enabled = _read(os.path.join(path, "cgroup.subtree_control")).split()
    wanted = " ".join(f"+{c}" for c in _CONTROLLERS if c not in enabled)
    if wanted:
        with open(os.path.join(path, "cgroup.subtree_control"), "w") as f:
            f.write(wanted)


# --- files ----------------------------------------------------------------------------------------
def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _write(path: str, value: str) -> bool:
    try:
        with open(path, "w") as f:
            f.write(value)
        return True
    except OSError:
        return False


def _set(path: str, name: str, value: int, *, optional: bool = False) -> None:
    file = os.path.join(path, name)
    if optional and not os.path.exists(file):
        return
    with open(file, "w") as f:
        f.write(str(value))


def _rmdir(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


def remove_placement(placement: Placement) -> None:
    """Remove this process's directories (at exit): runs left behind first, then the bases."""
    for base in placement.bases:
        try:
            leftovers = [e.path for e in os.scandir(base) if e.is_dir()]
        except OSError:
            continue
        for path in leftovers:
            _rmdir(path)
        _rmdir(base)
