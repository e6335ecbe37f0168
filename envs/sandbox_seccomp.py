"""The seccomp filter every sandboxed run gets: Docker's default refusals, and a parent guard.

The child installs it (`PR_SET_NO_NEW_PRIVS`, then `SECCOMP_SET_MODE_FILTER`; inherited by
everything it forks) before the code runs, in every isolation mode. Refused calls fail with
EPERM, as in Docker, unless said otherwise.

**Docker's default profile** (moby's `profiles/seccomp/default.json`) is an allowlist; for a
process without capabilities, as the code is under namespaces, what it refuses on x86_64 and
arm64 is `DOCKER_REFUSED` below (computed from that profile against the kernel's syscall tables),
plus four argument rules kept here as they are there:
- `personality` only with 0, 8, 0x20000, 0x20008 or 0xffffffff (no turning ASLR off with
  ADDR_NO_RANDOMIZE, no READ_IMPLIES_EXEC);
- `clone` without any namespace flag (0x7E020000);
- `clone3` answers ENOSYS, so that the C library falls back to `clone`, whose flags a classic BPF
  filter can read (clone3's are behind a pointer);
- `socket` refuses AF_ALG (38: the kernel's crypto API) and AF_VSOCK (40: sockets to the
  hypervisor, which no network namespace isolates).
Calls newer than the newest one Docker's profile allows (`removexattrat`, 466) answer ENOSYS, as
a call that profile does not know is refused there too.

Beyond Docker:
- `ptrace`, `process_vm_readv` and `process_vm_writev` are refused in every mode (Docker allows
  them on kernels >= 4.8): under namespaces the code could attach to the sandbox's own init
  (pid 1) and stop it, which kept a finished run alive until its whole `timeout_s`;
- `modify_ldt` (x86 only) is refused, as flatpak does: 16-bit code has no place here, and the
  call is a historic source of information leaks;
- `ioctl` TIOCSTI and TIOCLINUX are refused (flatpak's rule: no typing into a terminal). The
  kernel reads an ioctl's request as 32 bits, so that is what the filter compares (flatpak's
  CVE-2019-10063 was a 64-bit compare).

**The parent guard**, added in rlimits mode only: there the code runs as the calling user, in the
calling user's pid namespace, and could send the trainer SIGSTOP, so `run_python`'s timeout
would never fire. It refuses:
- `pidfd_open`, `pidfd_send_signal` and `tkill`, always;
- the stop signals (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU) sent to anyone, by `kill`, `tgkill`,
  `rt_sigqueueinfo` or `rt_tgsigqueueinfo`: a pid can name any thread of the trainer (the signal
  then stops its whole process), and threads come and go, so no list of the trainer's ids could
  keep them out;
- any signal sent to the trainer's pid, its process group or every process (-1);
- `socket()` for the unix, IPv4 and IPv6 families: the code shares the host's network and file
  system, so these would reach Ray's GCS and raylet ports, its pathname unix sockets (which
  Landlock does not cover) and the internet. `socketpair()` stays allowed: it reaches no one.
Other signals pass: the code may signal itself, its children and its process group. What the
guard alone does not stop (Landlock and, as root, uid 65534 do: `sandbox_landlock`,
`sandbox_user`): writing the trainer's memory through `/proc/PID/mem` and the user's files, as
any process of the user may, and killing (not stopping) the trainer by naming one of its
threads' ids.

Any call of another ABI (x32, or 32-bit calls through `int 0x80` on x86_64; arm32 on arm64), whose
numbers this filter does not check, is refused. Known architectures only (x86_64, aarch64);
elsewhere `program()` gives None and the sandbox's report says the layer is missing.
"""

from __future__ import annotations

import platform
import struct

# Every call Docker's default profile refuses a process without capabilities, by name; the
# numbers are in _NUMBERS. (Not every name exists on both architectures.)
DOCKER_REFUSED = (
    "_sysctl", "acct", "add_key", "afs_syscall", "bpf", "chroot", "clock_settime",
    "create_module", "delete_module", "fanotify_init", "finit_module", "fsconfig", "fsmount",
    "fsopen", "fspick", "get_kernel_syms", "get_mempolicy", "getpmsg", "init_module",
    "io_uring_enter", "io_uring_register", "io_uring_setup", "ioperm", "iopl", "kcmp",
    "kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie", "mbind", "migrate_pages",
    "mount", "mount_setattr", "move_mount", "move_pages", "nfsservctl", "open_by_handle_at",
    "open_tree", "perf_event_open", "pidfd_getfd", "pivot_root", "process_madvise", "putpmsg",
    "query_module", "quotactl", "quotactl_fd", "reboot", "request_key", "security",
    "set_mempolicy", "set_mempolicy_home_node", "setdomainname", "sethostname", "setns",
    "settimeofday", "swapoff", "swapon", "sysfs", "syslog", "tuxcall", "umount2", "unshare",
    "uselib", "userfaultfd", "ustat", "vhangup", "vserver",
)
# Refused in every mode beyond Docker's profile (see the module docstring).
BEYOND_DOCKER = ("ptrace", "process_vm_readv", "process_vm_writev", "modify_ldt")
_GUARD_REFUSED = ("pidfd_open", "pidfd_send_signal", "tkill")  # refused in rlimits mode
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)  # what Docker lets personality() set
CLONE_NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
SOCKET_FAMILIES_REFUSED = (38, 40)  # AF_ALG, AF_VSOCK
# Refused in rlimits mode too: without a network namespace these reach the host's services
# (Ray's GCS and raylet ports, its pathname unix sockets, which Landlock does not cover).
# socketpair() stays: asyncio and multiprocessing pipes need it, and it reaches no one.
GUARD_SOCKET_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6
TERMINAL_IOCTLS = (0x5412, 0x541C)  # TIOCSTI, TIOCLINUX
FIRST_UNKNOWN = 467  # one past removexattrat, the newest call Docker's profile allows

# (x86_64, aarch64) numbers from <asm/unistd_64.h> and <asm-generic/unistd.h>; None: no such call.
_NUMBERS = {
    "_sysctl": (156, None), "acct": (163, 89), "add_key": (248, 217),
    "afs_syscall": (183, None), "bpf": (321, 280), "chroot": (161, 51),
    "clock_settime": (227, 112), "create_module": (174, None), "delete_module": (176, 106),
    "fanotify_init": (300, 262), "finit_module": (313, 273), "fsconfig": (431, 431),
    "fsmount": (432, 432), "fsopen": (430, 430), "fspick": (433, 433),
    "get_kernel_syms": (177, None), "get_mempolicy": (239, 236), "getpmsg": (181, None),
    "init_module": (175, 105), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "io_uring_setup": (425, 425), "ioperm": (173, None), "iopl": (172, None),
    "kcmp": (312, 272), "kexec_file_load": (320, 294), "kexec_load": (246, 104),
    "keyctl": (250, 219), "lookup_dcookie": (212, 18), "mbind": (237, 235),
    "migrate_pages": (256, 238), "mount": (165, 40), "mount_setattr": (442, 442),
    "move_mount": (429, 429), "move_pages": (279, 239), "nfsservctl": (180, 42),
    "open_by_handle_at": (304, 265), "open_tree": (428, 428), "perf_event_open": (298, 241),
    "pidfd_getfd": (438, 438), "pivot_root": (155, 41), "process_madvise": (440, 440),
    "putpmsg": (182, None), "query_module": (178, None), "quotactl": (179, 60),
    "quotactl_fd": (443, 443), "reboot": (169, 142), "request_key": (249, 218),
    "security": (185, None), "set_mempolicy": (238, 237), "set_mempolicy_home_node": (450, 450),
    "setdomainname": (171, 162), "sethostname": (170, 161), "setns": (308, 268),
    "settimeofday": (164, 170), "swapoff": (168, 225), "swapon": (167, 224),
    "sysfs": (139, None), "syslog": (103, 116), "tuxcall": (184, None), "umount2": (166, 39),
    "unshare": (272, 97), "uselib": (134, None), "userfaultfd": (323, 282),
    "ustat": (136, None), "vhangup": (153, 58), "vserver": (236, None),
    "modify_ldt": (154, None), "ptrace": (101, 117), "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "clone": (56, 220), "clone3": (435, 435), "personality": (135, 92), "socket": (41, 198),
    "socketpair": (53, 199),
    "ioctl": (16, 29), "kill": (62, 129), "tkill": (200, 130), "tgkill": (234, 131),
    "rt_sigqueueinfo": (129, 138), "rt_tgsigqueueinfo": (297, 240),
    "pidfd_send_signal": (424, 424), "pidfd_open": (434, 434),
}
# <linux/audit.h>: AUDIT_ARCH_X86_64, AUDIT_ARCH_AARCH64; and the column of _NUMBERS.
_ARCHES = {"x86_64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1)}
_X32_BIT = 0x40000000

# Classic BPF (<linux/filter.h>, <linux/seccomp.h>).
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JA, _JEQ, _JGE, _JSET = 0x05, 0x15, 0x35, 0x45  # BPF_JMP | BPF_{JA,JEQ,JGE,JSET} | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
_EPERM = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
_ENOSYS = 0x00050000 | 38  # SECCOMP_RET_ERRNO | ENOSYS
# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian:
# the low 32 bits of args[i], which hold a pid_t, an int or an ioctl request, are at 16 + 8 i).
_NR, _ARCH, _ARG0, _ARG1, _ARG2 = 0, 4, 16, 24, 32
_STOP_SIGNALS = (19, 20, 21, 22)  # SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU (x86_64 and arm64 alike)


def supported() -> bool:
    """Whether this machine's architecture has a filter."""
    return platform.machine() in _ARCHES


def number(name: str) -> int | None:
    """The number of the call `name` on this machine (None: no such call here, or an unknown
    architecture)."""
    if not supported():
        return None
    return _NUMBERS[name][_ARCHES[platform.machine()][1]]


def program(guard: tuple[int, int] | None = None) -> bytes | None:
    """The filter (struct sock_filter[] bytes): Docker's refusals and the rules above, and with
    `guard=(trainer_pid, trainer_pgid)` the parent guard for that process and its group; None on
    an unknown architecture."""
    if not supported():
        return None
    arch = _ARCHES[platform.machine()][0]
    nr = number  # every name below but the refused ones exists on both architectures
    code: list = []  # (op, jt, jf, k), (op, k, label), "label", "label:NAME": see _assemble
    load = [(_LD_W_ABS, 0, 0, offset) for offset in (_NR, _ARCH, _ARG0, _ARG1, _ARG2)]
    ld_nr, ld_arch, ld_arg0, ld_arg1, ld_arg2 = load
    code += [ld_arch, (-_JEQ, arch, "deny"), ld_nr]  # a negative op jumps when NOT equal
    code += [(_JGE, _X32_BIT, "deny"), (_JGE, FIRST_UNKNOWN, "enosys"),
             (_JEQ, nr("clone3"), "enosys")]
    refused = [*DOCKER_REFUSED, *BEYOND_DOCKER, *(_GUARD_REFUSED if guard else ())]
    code += [(_JEQ, n, "deny") for n in map(number, refused) if n is not None]
    for name in ("personality", "clone", "socket", "ioctl"):
        code.append((_JEQ, nr(name), f"check_{name}"))
    if guard:
        code += [(_JEQ, nr(name), "check_pid") for name in ("kill", "rt_sigqueueinfo")]
        code += [(_JEQ, nr(name), "check_tgid") for name in ("tgkill", "rt_tgsigqueueinfo")]
    code += ["allow", "label:check_personality", ld_arg0]
    code += [(_JEQ, value, "allow") for value in PERSONALITIES] + ["deny"]
    code += ["label:check_clone", ld_arg0, (_JSET, CLONE_NAMESPACE_FLAGS, "deny"), "allow"]
    code += ["label:check_socket", ld_arg0]
    families = SOCKET_FAMILIES_REFUSED + (GUARD_SOCKET_FAMILIES if guard else ())
    code += [(_JEQ, family, "deny") for family in families] + ["allow"]
    code += ["label:check_ioctl", ld_arg1]
    code += [(_JEQ, request, "deny") for request in TERMINAL_IOCTLS] + ["allow"]
    if guard:
        trainer_pid, trainer_pgid = guard
        code += ["label:check_pid", ld_arg0, (_JEQ, trainer_pid, "deny"),
                 (_JEQ, 0xFFFFFFFF, "deny"),  # -1: every process the user may signal
                 (_JEQ, -trainer_pgid & 0xFFFFFFFF, "deny"), ld_arg1, "check_signal"]
        code += ["label:check_tgid", ld_arg0, (_JEQ, trainer_pid, "deny"), ld_arg2]
        code += ["label:check_signal"]  # the accumulator holds the signal
        code += [(_JEQ, signal_number, "deny") for signal_number in _STOP_SIGNALS] + ["allow"]
    code += ["label:allow", (_RET, 0, 0, _ALLOW), "label:deny", (_RET, 0, 0, _EPERM),
             "label:enosys", (_RET, 0, 0, _ENOSYS)]
    return _assemble(code)


def _assemble(code: list) -> bytes:
    """Resolve labels: an entry (op, value, label) jumps to the label when the test holds (or,
    for a negative op, when it fails); a bare "label" string is an unconditional jump there."""
    labels, index = {}, 0
    for entry in code:
        if isinstance(entry, str) and entry.startswith("label:"):
            labels[entry[6:]] = index
        else:
            index += 1
    out, index = [], 0
    for entry in code:
        if isinstance(entry, str):
            if entry.startswith("label:"):
                continue
            offset = labels[entry] - index - 1
            out.append(struct.pack("<HBBI", _JA, 0, 0, offset))
        elif len(entry) == 3:
            op, value, target = entry
            offset = labels[target] - index - 1
            if not 0 <= offset < 256:
                raise ValueError("seccomp filter: jump too far")
            jt, jf = (0, offset) if op < 0 else (offset, 0)
            out.append(struct.pack("<HBBI", abs(op), jt, jf, value & 0xFFFFFFFF))
        else:
            out.append(struct.pack("<HBBI", *entry))
        index += 1
    return b"".join(out)


# The child's code that installs a filter given as hex (it runs before the code, in `-I -S`
# Python, with the standard library only). Any failure ends the child: no filter, no run.
INSTALL = """
def _install_seccomp(hex_program):
    import ctypes
    program = bytes.fromhex(hex_program)
    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    buffer = ctypes.create_string_buffer(program)
    fprog = Fprog(len(program) // 8, ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                      ctypes.c_ulong]
    if prctl(38, 1, None, 0, 0) != 0 or prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:
        import os
        raise OSError(ctypes.get_errno(), "sandbox: cannot install the seccomp filter: "
                      + os.strerror(ctypes.get_errno()))
"""
