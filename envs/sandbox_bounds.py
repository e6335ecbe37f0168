"""What one run cannot reach of the host, per isolation mode: files, processes, network, and
whether its cgroup holds (the code could otherwise move itself out of it).

`SandboxReport.bounds()` shows these next to memory, processes, disk and capabilities; the tests
skip a hostile check where the bound it checks is reported as not holding, with this detail as
the reason. Each bound is (name, holds, how or why not).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fallback:
    """What a run without namespaces has on this machine."""

    root: bool  # the caller is root: the code runs as uid 65534 (`sandbox_user`)
    landlock_abi: int  # 0: no Landlock (`sandbox_landlock`)
    filtered: bool  # the seccomp filter, with its parent guard and socket refusals
    keep_read_search: bool  # as root, the code keeps CAP_DAC_READ_SEARCH


def cgroup_holds(namespaces: bool, fallback: Fallback) -> tuple[bool, str]:
    """Whether the code cannot leave its run's cgroup, and why (or how it could)."""
    if namespaces:
        return True, "no cgroup file system inside"
    if fallback.root:
        return True, "uid 65534 may not write root's cgroup.procs"
    if fallback.landlock_abi > 0:
        return True, "Landlock keeps the cgroup file system out of reach"
    return False, ("this user may write its delegated cgroups' cgroup.procs, and without "
                   "Landlock the code can move itself out of the run's cgroup")


def host(namespaces: bool, fallback: Fallback) -> tuple[tuple[str, bool, str], ...]:
    """(name, holds, detail) for the host's files, its processes and the network."""
    if namespaces:
        return (("host files", True, "none but the read-only system; /tmp is the run's own"),
                ("host processes", True, "none visible (own pid namespace): no environ to read, "
                 "nothing to signal"),
                ("network", True, "own network namespace: nothing but its own loopback"))
    return _files(fallback), _processes(fallback), _network(fallback)


def _files(f: Fallback) -> tuple[str, bool, str]:
    if f.landlock_abi > 0:
        return ("host files", True, "Landlock: reads only the system's paths and the Python "
                "installation, writes only the run's own directory; no /proc, /sys, homes or "
                "project tree")
    if f.root:
        reads = ("every file (CAP_DAC_READ_SEARCH, kept to reach the interpreter)"
                 if f.keep_read_search else "what any user may read")
        return ("host files", False, f"no Landlock: as uid 65534 the code reads {reads} and "
                "writes where any user may (world-writable directories)")
    return ("host files", False, "no Landlock: the code reads and writes what this user may")


def _processes(f: Fallback) -> tuple[str, bool, str]:
    if f.landlock_abi >= 6:
        return ("host processes", True, "Landlock: no /proc (no environ, mem or cgroup of any "
                "process), signals only within the run")
    if f.root:
        scoped = "/proc denied by Landlock" if f.landlock_abi else "no Landlock"
        return ("host processes", True, f"uid 65534: root's processes' environ unreadable and "
                f"unsignalable ({scoped}); runs at the same time share uid 65534 and may signal "
                f"each other")
    why = ("Landlock ABI < 6 denies /proc but does not scope signals: the code may kill (not "
           "stop) this user's other processes" if f.landlock_abi else
           "no Landlock: the code may read this user's processes' /proc/PID/environ and kill "
           "(not stop) them")
    return ("host processes", False, why)


def _network(f: Fallback) -> tuple[str, bool, str]:
    tcp = " (and Landlock refuses TCP bind/connect)" if f.landlock_abi >= 4 else ""
    if f.filtered:
        return ("network", True, f"seccomp refuses socket() for unix, IPv4 and IPv6{tcp}: no "
                "loopback services (Ray's GCS, raylet), no unix sockets, no internet")
    if f.landlock_abi >= 4:
        return ("network", False, "Landlock refuses TCP bind/connect; UDP and unix sockets "
                "stay open (no seccomp filter for this architecture)")
    return ("network", False, "the host's network, loopback services and unix sockets")
