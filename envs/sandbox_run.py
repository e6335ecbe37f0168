"""One sandboxed run (`sandbox.run_python`'s work once the layers are known): the child program
that sets the rlimits, Landlock, the identity and the seccomp filter before the code, bwrap's
options for the namespaces, the confinement of a run without them, the wall-clock kill and the
run directory's removal. What each layer promises is `sandbox`'s docstring; which layers this
machine has is `sandbox_detection`'s.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Literal

from rllib_llm.envs import (
    sandbox_cgroup,
    sandbox_landlock,
    sandbox_pipes,
    sandbox_seccomp,
    sandbox_user,
)

MAX_PROCESSES = 32  # tasks (processes and threads) per run, where RLIMIT_NPROC is enforced
MAX_OPEN_FILES = 64

_CODE_NAME = "<code>"  # the file name tracebacks show for the code
_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What the standard library may read in /etc; the rest (shadow, ssh host keys, ...) stays out.
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "passwd", "group",
              "nsswitch.conf")
# Docker's masked /proc paths (moby's oci defaults); those this kernel has are masked, the rest
# of /proc is read-only, and /sys is not mounted at all (Docker masks /sys/firmware and
# /sys/devices/virtual/powercap in a read-only /sys).
PROC_MASKED = ("/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
                "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
                "/proc/sched_debug", "/proc/scsi")


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


# --- one run --------------------------------------------------------------------------------------
def run(source: bytes, *, interpreter: str, bwrap: str | None, processes: int | None,
         timeout_s: float, memory_mb: int, max_output_bytes: int,
         cgroup: sandbox_cgroup.RunCgroup | None = None,
         seccomp: bytes | None = None,
         confinement: Confinement | None = None) -> SandboxResult:
    """Run `source` once: under `bwrap` when given, else directly (see `sandbox`'s docstring)
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
        """The child's arguments for a run in `scratch` (which `run` gives the code's user)."""
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
    for path in PROC_MASKED:
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
    threading.Thread(target=remove_tree, args=(trash,), name="sandbox-cleanup").start()


def remove_tree(path: str) -> None:
    """Remove a run's directory, also after the code made parts of it unreadable."""
    shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path):
        for root, dirs, _ in os.walk(path):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o700, follow_symlinks=False)
        shutil.rmtree(path, ignore_errors=True)


def process_limit(own_namespace: bool) -> int | None:
    """RLIMIT_NPROC for a run: it counts the tasks of the user in the run's user namespace."""
    if own_namespace:
        return MAX_PROCESSES
    try:  # the 4th field of /proc/loadavg is "running/all tasks on the machine"
        with open("/proc/loadavg") as loadavg:
            tasks = int(loadavg.read().split()[3].split("/")[1])
    except (OSError, IndexError, ValueError):
        return None
    return tasks + MAX_PROCESSES  # >= this user's tasks + MAX_PROCESSES

