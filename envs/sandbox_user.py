"""As root, runs without namespaces give the code an unprivileged identity: uid/gid 65534.

Without namespaces a root caller's code would be the host's root with every capability: it could
read `/proc/PID/environ` of the trainer and its Ray workers (HF_TOKEN, WANDB_API_KEY), write its
own pid into the parent cgroup's `cgroup.procs` and so leave the run's memory and task bounds,
signal any process, and raise its own rlimits again. The child becomes uid and gid 65534
("nobody", no supplementary groups) after it has joined its cgroup and before the code runs:
another uid's `environ` needs CAP_SYS_PTRACE, root's cgroup files need write permission, and
signals to root's processes need CAP_KILL, none of which the code has.

One capability may stay: CAP_DAC_READ_SEARCH (read any file, search any directory), kept in the
ambient set so that the programs the code starts keep it too, and only where uid 65534 could not
otherwise read the interpreter or its standard library (a Python under root's 0700 home, as
pyenv installs it). It gives no write access and no access to another uid's `/proc/PID/environ`
(that is a ptrace check), and Landlock, where the kernel has it, still limits reads to the
system's paths. Every other capability leaves the bounding set as well, and no-new-privileges
(set before the code runs) keeps setuid programs from giving any back.
"""

from __future__ import annotations

import os
import stat

UID = GID = 65534  # "nobody" on Debian, Ubuntu, Fedora, Alpine
CAP_DAC_READ_SEARCH = 2


def applies() -> bool:
    """Whether runs change identity: only a root caller may, and only root needs to."""
    return os.getuid() == 0


def readable_by_others(paths: tuple[str, ...]) -> bool:
    """Whether a user other than the owner may reach and read each of `paths` by the mode bits
    (every directory above it searchable by others, the path itself readable; directories also
    searchable). ACLs are not consulted: a false "no" only keeps CAP_DAC_READ_SEARCH."""
    for path in paths:
        path = os.path.realpath(path)
        try:
            mode = os.stat(path).st_mode
            if not mode & stat.S_IROTH or (stat.S_ISDIR(mode) and not mode & stat.S_IXOTH):
                return False
            parent = os.path.dirname(path)
            while True:
                if not os.stat(parent).st_mode & stat.S_IXOTH:
                    return False
                if parent == "/":
                    break
                parent = os.path.dirname(parent)
        except OSError:
            return False
    return True


def args(*, keep_read_search: bool) -> list[str]:
    """The child's argument: USER=<uid>,<gid>,<1 to keep CAP_DAC_READ_SEARCH, else 0>."""
    return [f"USER={UID},{GID},{int(keep_read_search)}"]


# The child's code (standard library only). Order matters: the bounding set can only be cut
# while the child still has CAP_SETPCAP (as root); PR_SET_KEEPCAPS keeps the permitted set
# across setresuid, from which the one capability is made effective, inheritable and ambient.
INSTALL = f"""
def _become_user(spec):
    import ctypes, os
    uid, gid, keep = (int(x) for x in spec.split(","))
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    def check(ok, what):
        if not ok:
            errno = ctypes.get_errno()
            raise OSError(errno, f"sandbox: cannot {{what}}: {{os.strerror(errno)}}")
    kept = {CAP_DAC_READ_SEARCH} if keep else -1
    for cap in range(64):  # PR_CAPBSET_DROP; EINVAL past the kernel's last capability
        if cap != kept and prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
            check(False, f"drop capability {{cap}} from the bounding set")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    check(prctl(8, int(keep), 0, 0, 0) == 0, "set PR_SET_KEEPCAPS")  # PR_SET_KEEPCAPS
    os.setresuid(uid, uid, uid)
    if not keep:
        return
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]
    one = 1 << {CAP_DAC_READ_SEARCH}
    data = (Data * 2)(Data(one, one, one), Data(0, 0, 0))
    check(libc.capset(ctypes.byref(Header(0x20080522, 0)), data) == 0, "set capabilities")
    check(prctl(47, 2, {CAP_DAC_READ_SEARCH}, 0, 0) == 0,  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE
          "keep CAP_DAC_READ_SEARCH for the code's children")
"""
