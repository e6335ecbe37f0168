"""The sandbox against the policies of Docker, nsjail and flatpak: each of their rules, and
whether it holds for a run here in each isolation mode (`SandboxReport.policies()`; `python -m
rllib_llm.envs.sandbox` prints them).

Read from their sources: Docker's default seccomp profile (moby's `profiles/seccomp/default.json`)
and its default masked and read-only paths; nsjail's command-line defaults; flatpak's
`setup_seccomp` in `common/flatpak-run.c`. What a rule needs to hold here:
- "filter": the seccomp filter (`sandbox_seccomp`), installed in every mode where this
  architecture has one;
- "namespaces": a run under bubblewrap (strict, or auto where bwrap works);
- "always": every mode;
- "never": not provided here (said so, not hidden).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Needs = Literal["filter", "namespaces", "always", "never"]


@dataclass(frozen=True)
class PolicyRule:
    policy: str  # "Docker", "nsjail", "flatpak"
    rule: str  # the rule, as that policy states it
    needs: Needs  # what makes it hold here
    here: str  # what this sandbox does instead or as well


RULES = (
    PolicyRule("Docker", "seccomp: every call its default profile refuses a process without "
               "capabilities (keyring, mount and the new mount API, modules, kexec, reboot, "
               "swap, clock setting, acct, bpf, perf_event_open, userfaultfd, io_uring, "
               "unshare/setns, NUMA, kcmp, pidfd_getfd, ...: 67 names on x86_64), its "
               "personality, clone, clone3 and socket (AF_ALG, AF_VSOCK) rules, and calls newer "
               "than it knows", "filter", "the same refusals with EPERM, clone3 and calls "
               "newer than removexattrat with ENOSYS"),
    PolicyRule("Docker", "ptrace and process_vm_readv/writev allowed (kernels >= 4.8)", "filter",
               "stricter: refused, so the code cannot stop the sandbox's own init or, in "
               "rlimits mode, the trainer"),
    PolicyRule("Docker", "no new privileges", "filter", "PR_SET_NO_NEW_PRIVS before the filter "
               "(no setuid binary gains anything)"),
    PolicyRule("Docker", "read-only /proc/sys, /proc/sysrq-trigger, /proc/irq, /proc/bus, "
               "/proc/fs", "namespaces", "stricter: all of /proc is read-only"),
    PolicyRule("Docker", "masked /proc/asound, acpi, interrupts, kcore, keys, latency_stats, "
               "timer_list, timer_stats, sched_debug, scsi; masked /sys/firmware and "
               "/sys/devices/virtual/powercap", "namespaces", "the /proc ones this kernel has "
               "cannot be opened (files) or are empty (directories); /sys is not mounted"),
    PolicyRule("Docker", "14 default capabilities (CHOWN, DAC_OVERRIDE, FOWNER, SETUID, "
               "NET_RAW, SYS_CHROOT, ...)", "namespaces", "stricter: none, all five sets empty, "
               "no nested user namespace (in rlimits mode: a user's none; root's code runs as uid "
               "65534 with none, or CAP_DAC_READ_SEARCH only where the interpreter needs it)"),
    PolicyRule("Docker", "root in a container is the host's uid 0 (no userns-remap by default)",
               "always", "the same under namespaces: as root the code is the host's uid 0 without "
               "capabilities, so read-only mounts and the filter, not file modes, keep it out; "
               "in rlimits mode stricter: uid 65534"),
    PolicyRule("Docker", "the docker-default AppArmor profile (or SELinux labels)", "never",
               "no LSM profile is loaded; the mounts and the filter cover what it denies to "
               "/proc and /sys"),
    PolicyRule("nsjail", "/proc mounted read-only (--proc_rw off)", "namespaces", "the same"),
    PolicyRule("nsjail", "no capabilities kept (--keep_caps off)", "namespaces", "the same"),
    PolicyRule("nsjail", "rlimits on every run (its defaults: address space 4096 MB, CPU 600 s, "
               "file size 1 MB, 32 open files, no core dumps)", "always",
               "address space and file size memory_mb, CPU timeout_s + 1 s, 64 open files, no "
               "core dumps; a cgroup where one can be made"),
    PolicyRule("nsjail", "no seccomp policy unless one is given (Kafel)", "filter",
               "stricter: the filter above"),
    PolicyRule("flatpak", "seccomp: syslog, uselib, acct, modify_ldt, quotactl, add_key, keyctl, "
               "request_key, the NUMA calls, unshare, setns, mount, umount2, pivot_root, chroot, "
               "clone with CLONE_NEWUSER, ioctl TIOCSTI and TIOCLINUX (32-bit compare), the new "
               "mount API, clone3 (ENOSYS), perf_event_open, ptrace, personality", "filter",
               "all refused"),
    PolicyRule("flatpak", "socket families other than unix, inet, inet6 and netlink refused",
               "never", "AF_ALG and AF_VSOCK are refused; under namespaces the network namespace "
               "has nothing but its own loopback; in rlimits mode unix, inet and inet6 are "
               "refused as well (socketpair stays), netlink and the rest allowed"),
)


def holds(rule: PolicyRule, *, namespaces: bool, filtered: bool) -> bool:
    """Whether `rule` holds for a run that gets namespaces or not, and the filter or not."""
    return {"filter": filtered, "namespaces": namespaces, "always": True,
            "never": False}[rule.needs]
