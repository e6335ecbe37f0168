"""Landlock for runs without namespaces: what the code may read, write, connect to and signal.

Landlock (Linux >= 5.13, no privilege needed) lets a process give up access for itself and
everything it forks, for good. Without namespaces (isolation="rlimits", and "auto" where bwrap
cannot run) the code shares the trainer's file system, network and pid namespace; the user's
report showed it reading HF_TOKEN from `/proc/PID/environ` of the trainer and its Ray workers,
connecting to Ray's GCS and raylet ports and listing Ray's sockets. Under this ruleset:
- **files**: reading and executing only beneath the system's read-only paths (`/usr`, `/lib*`,
  `/bin`, `/sbin`, the Python installation) and a few `/etc` files the standard library reads;
  reading and writing only the run's own directory and `/dev/null`, `/dev/zero`,
  `/dev/urandom`. Nothing of `/proc` (no other process's `environ`, `mem` or `cgroup`), `/sys`,
  cgroupfs, the home directories or the project tree;
- **TCP** (ABI >= 4): no bind and no connect, to loopback services or anywhere;
- **scopes** (ABI >= 6): no connecting to abstract unix sockets and no signals to processes
  outside the run's own Landlock domain (the trainer, its Ray workers, other runs).

The host's `/dev/shm` is left out on purpose (shared by every process of the machine, Ray's
object store among them): `multiprocessing`'s locks and pools, which put POSIX semaphores there,
fail with PermissionError in this mode; under namespaces `/dev/shm` is the run's own.

What Landlock does not cover, even at ABI 7: UDP and other socket families, and connecting to a
*pathname* unix socket (the kernel checks write permission on the socket file, not Landlock) --
the seccomp filter refuses `socket()` for the unix and internet families in this mode, and as
root the code runs as uid 65534 (`sandbox_user`), which may not write root's socket files.

The rights a kernel lacks are dropped from the ruleset, as the kernel documentation's example
does (best effort): `ruleset(abi, ...)` is what a kernel of that ABI enforces. The parent finds the
ABI once (`abi()`), builds the ruleset (`ruleset()`), and the child installs it before the code
runs (`INSTALL`: the ruleset is built while the child can still open every path, and enforced
after it has become its unprivileged user; then the seccomp filter).
"""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass

# The syscall numbers are the same on x86_64 and aarch64 (the generic table).
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0  # flag: return the ABI version instead of a ruleset

# File-system rights (<linux/landlock.h>), each with the first ABI that has it.
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_CHAR, FS_MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
FS_MAKE_REG, FS_MAKE_SOCK, FS_MAKE_FIFO, FS_MAKE_BLOCK = 1 << 8, 1 << 9, 1 << 10, 1 << 11
FS_MAKE_SYM, FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 12, 1 << 13, 1 << 14, 1 << 15
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1,
              5: (1 << 16) - 1}
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI >= 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI >= 6
_RULE_PATH_BENEATH = 1
# Only these rights may be given on a file (not a directory); others make add_rule fail.
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
DEVICE = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE  # open("/dev/null", "w") truncates
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


def abi() -> int:
    """The Landlock ABI version of this kernel; 0 where it has none (< 5.13, or not enabled
    with `lsm=...landlock`), or where a seccomp filter (a container's) refuses the call."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return 0
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                           ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


@dataclass(frozen=True)
class Ruleset:
    """What one run may do: the ruleset attribute and its path rules, for the child."""

    abi: int
    handled_fs: int  # rights the ruleset restricts (granted only where a rule says)
    handled_net: int
    scoped: int
    rules: tuple[tuple[int, str], ...]  # (rights, path) beneath which they are granted

    def attr(self) -> bytes:
        """struct landlock_ruleset_attr, as long as this ABI knows it (an older kernel refuses a
        longer one with fields it does not know)."""
        fields = (self.handled_fs, self.handled_net, self.scoped)
        size = 1 if self.abi < 4 else 2 if self.abi < 6 else 3
        return struct.pack(f"<{size}Q", *fields[:size])

    def args(self) -> list[str]:
        """The child's arguments: LANDLOCK=<attr hex>, then LANDLOCK_RULE=<rights>,<path>."""
        return [f"LANDLOCK={self.attr().hex()}",
                *(f"LANDLOCK_RULE={rights},{path}" for rights, path in self.rules)]


def ruleset(abi_version: int, *, read: tuple[str, ...], write: tuple[str, ...]) -> Ruleset:
    """The ruleset of one run for a kernel of `abi_version` (>= 1): `read` (directories or
    files) readable and executable, `write` directories fully usable, the harmless devices
    read-write; every other path, TCP bind/connect, abstract unix sockets and signals out of the
    run's domain refused as far as this ABI can. Paths that do not exist are left out."""
    handled_fs = _FS_BY_ABI[min(abi_version, 5)]
    rules = [(READ, path) for path in read if os.path.exists(path)]
    rules += [(handled_fs, path) for path in write if os.path.isdir(path)]
    rules += [(DEVICE, path) for path in DEVICES if os.path.exists(path)]
    rules = [(_for_path(rights & handled_fs, path), path) for rights, path in rules]
    return Ruleset(abi=abi_version, handled_fs=handled_fs,
                   handled_net=NET_BIND_TCP | NET_CONNECT_TCP if abi_version >= 4 else 0,
                   scoped=SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi_version >= 6 else 0,
                   rules=tuple(rules))


def _for_path(rights: int, path: str) -> int:
    """The rights a rule may carry on `path`: a file takes file rights only."""
    return rights if os.path.isdir(path) else rights & _FILE_RIGHTS


def describe(abi_version: int) -> str:
    """What Landlock restricts on a kernel of this ABI (for the report)."""
    if abi_version <= 0:
        return ("no Landlock here (Linux < 5.13, not enabled in lsm=, or a container's "
                "seccomp profile refuses its calls): without namespaces the code may read what "
                "its user may read, /proc included")
    parts = ["files: read/execute only the system's paths and the Python installation, "
             "read-write only the run's directory and /dev/null and kin; no /proc, /sys, "
             "homes or project tree"]
    parts.append("TCP bind and connect refused" if abi_version >= 4 else
                 "TCP not restricted (needs ABI >= 4)")
    parts.append("abstract unix sockets and signals scoped to the run" if abi_version >= 6 else
                 "abstract unix sockets and signals not scoped (needs ABI >= 6)")
    return f"ABI {abi_version}, rlimits mode: " + "; ".join(parts)


# The child's code (standard library only, run before the code). `_landlock_ruleset` opens the
# paths (O_PATH) while the child is still the caller's user; `_landlock_restrict` enforces the
# ruleset after the child has given up its identity. Any failure ends the child: no run.
INSTALL = f"""
def _landlock_ruleset(attr_hex, rules):
    import ctypes, os, struct
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    def fail(what):
        errno = ctypes.get_errno()
        raise OSError(errno, f"sandbox: cannot {{what}}: {{os.strerror(errno)}}")
    attr = ctypes.create_string_buffer(bytes.fromhex(attr_hex))
    fd = libc.syscall(ctypes.c_long({SYS_CREATE_RULESET}), attr, ctypes.c_size_t(len(attr.raw)),
                      ctypes.c_uint32(0))
    if fd < 0:
        fail("create the Landlock ruleset")
    for rule in rules:
        rights, path = rule.split(",", 1)
        parent = os.open(path, os.O_PATH | os.O_CLOEXEC)
        beneath = ctypes.create_string_buffer(struct.pack("<Qi", int(rights), parent))
        if libc.syscall(ctypes.c_long({SYS_ADD_RULE}), ctypes.c_int(fd),
                        ctypes.c_int({_RULE_PATH_BENEATH}), beneath, ctypes.c_uint32(0)) != 0:
            fail(f"add the Landlock rule for {{path}}")
        os.close(parent)
    return fd

def _landlock_restrict(fd):
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    if (prctl(38, 1, 0, 0, 0) != 0  # PR_SET_NO_NEW_PRIVS: needed without CAP_SYS_ADMIN
            or libc.syscall(ctypes.c_long({SYS_RESTRICT_SELF}), ctypes.c_int(fd),
                            ctypes.c_uint32(0)) != 0):
        errno = ctypes.get_errno()
        raise OSError(errno, "sandbox: cannot enforce the Landlock ruleset: "
                      + os.strerror(errno))
    os.close(fd)
"""
