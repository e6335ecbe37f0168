"""The seccomp filter that keeps code in the rlimits sandbox from tracing or stopping the trainer.

Without namespaces the code runs as the calling user, in the calling user's pid namespace: it
could `ptrace(PTRACE_ATTACH, getppid())` (which stops the trainer, so `run_python`'s timeout
never fires) or send it SIGSTOP. The child installs this filter (`PR_SET_NO_NEW_PRIVS`, then
`SECCOMP_SET_MODE_FILTER`; inherited by everything it forks) before the code runs. It answers
EPERM to:
- `ptrace`, `process_vm_readv`/`process_vm_writev`, `pidfd_open`, `pidfd_getfd`,
  `pidfd_send_signal` and `tkill`, always;
- the stop signals (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU) sent to anyone, by `kill`, `tgkill`,
  `rt_sigqueueinfo` or `rt_tgsigqueueinfo`: a pid can name any thread of the trainer (the
  signal then stops its whole process), and threads come and go, so no list of the trainer's
  ids could keep them out;
- any signal sent to the trainer's pid, its process group or every process (-1).
Other signals pass: the code may signal itself (`os.kill(os.getpid(), ...)`, `raise()`), its
children and its process group.
- any system call of another ABI (x32, or 32-bit calls through `int 0x80` on x86_64), whose
  numbers this filter does not check.
Known architectures only (x86_64, aarch64); elsewhere `parent_guard()` gives None and the
sandbox's report says the layer is missing. What it does not stop: the code may still write the
trainer's memory through `/proc/PID/mem` and the user's files, as any process of the user may;
and it may still kill (not stop) the trainer by naming one of its threads' ids. That is why
untrusted code belongs under namespaces.
"""

from __future__ import annotations

import platform
import struct

# <linux/audit.h> and the per-architecture syscall tables (unistd_64.h; asm-generic for arm64).
_ARCHES = {
    "x86_64": (0xC000003E, {"ptrace": 101, "kill": 62, "tkill": 200, "tgkill": 234,
                            "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
                            "process_vm_readv": 310, "process_vm_writev": 311,
                            "pidfd_send_signal": 424, "pidfd_open": 434, "pidfd_getfd": 438}),
    "aarch64": (0xC00000B7, {"ptrace": 117, "kill": 129, "tkill": 130, "tgkill": 131,
                             "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240,
                             "process_vm_readv": 270, "process_vm_writev": 271,
                             "pidfd_send_signal": 424, "pidfd_open": 434, "pidfd_getfd": 438}),
}
_ALWAYS_DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_open", "pidfd_getfd",
                  "pidfd_send_signal", "tkill")
_X32_BIT = 0x40000000

# Classic BPF (<linux/filter.h>, <linux/seccomp.h>).
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JA, _JEQ, _JGE = 0x05, 0x15, 0x35  # BPF_JMP | BPF_{JA,JEQ,JGE} | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
_EPERM = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian:
# the low 32 bits of args[i], which hold a pid_t or an int, are at 16 + 8 i).
_NR, _ARCH, _ARG0, _ARG1, _ARG2 = 0, 4, 16, 24, 32
_STOP_SIGNALS = (19, 20, 21, 22)  # SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU (x86_64 and arm64 alike)


def supported() -> bool:
    """Whether this machine's architecture has a filter."""
    return platform.machine() in _ARCHES


def parent_guard(trainer_pid: int, trainer_pgid: int) -> bytes | None:
    """The filter program (struct sock_filter[] bytes) guarding `trainer_pid` (the process that
    runs the sandbox) and its process group `trainer_pgid`; None on an unknown architecture."""
    if not supported():
        return None
    arch, nr = _ARCHES[platform.machine()]
    program: list = []  # (op, jt, jf, k), (op, k, label), "label", "label:NAME": see _assemble

    def jump_if(op: int, value: int, target: str) -> None:
        program.append((op, value, target))

    program.append((_LD_W_ABS, 0, 0, _ARCH))
    jump_if(-_JEQ, arch, "deny")  # negative op: jump when NOT equal
    program.append((_LD_W_ABS, 0, 0, _NR))
    jump_if(_JGE, _X32_BIT, "deny")
    for name in _ALWAYS_DENIED:
        jump_if(_JEQ, nr[name], "deny")
    for name in ("kill", "rt_sigqueueinfo"):  # (pid, sig, ...)
        jump_if(_JEQ, nr[name], "check_pid")
    for name in ("tgkill", "rt_tgsigqueueinfo"):  # (tgid, tid, sig, ...)
        jump_if(_JEQ, nr[name], "check_tgid")
    program.append("allow")
    program.append("label:check_pid")
    program.append((_LD_W_ABS, 0, 0, _ARG0))
    jump_if(_JEQ, trainer_pid, "deny")
    jump_if(_JEQ, 0xFFFFFFFF, "deny")  # -1: every process the user may signal
    jump_if(_JEQ, -trainer_pgid & 0xFFFFFFFF, "deny")
    program.append((_LD_W_ABS, 0, 0, _ARG1))
    program.append("check_signal")
    program.append("label:check_tgid")
    program.append((_LD_W_ABS, 0, 0, _ARG0))
    jump_if(_JEQ, trainer_pid, "deny")
    program.append((_LD_W_ABS, 0, 0, _ARG2))
    program.append("label:check_signal")  # the accumulator holds the signal
    for signal_number in _STOP_SIGNALS:
        jump_if(_JEQ, signal_number, "deny")
    program.append("allow")
    program.append("label:allow")
    program.append((_RET, 0, 0, _ALLOW))
    program.append("label:deny")
    program.append((_RET, 0, 0, _EPERM))
    return _assemble(program)


def _assemble(program: list) -> bytes:
    """Resolve labels: an entry (op, value, label) jumps to the label when the test holds (or,
    for a negative op, when it fails); a bare "label" string is an unconditional jump there."""
    labels, index = {}, 0
    for entry in program:
        if isinstance(entry, str) and entry.startswith("label:"):
            labels[entry[6:]] = index
        else:
            index += 1
    out, index = [], 0
    for entry in program:
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
