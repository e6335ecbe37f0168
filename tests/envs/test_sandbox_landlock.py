"""The Landlock ruleset of runs without namespaces (`envs/sandbox_landlock.py`) and the choice of
the code's identity as root (`envs/sandbox_user.py`): hand-computed values per ABI. What the
rules do to hostile code is tested in test_sandbox.py (the `rlimits_` tests)."""

from __future__ import annotations

import os
import struct

import pytest
from rllib_llm.envs import sandbox_landlock as landlock
from rllib_llm.envs import sandbox_user


@pytest.mark.parametrize(("abi", "fs", "net", "scoped", "size"), [
    (1, 0x1FFF, 0, 0, 8),  # EXECUTE .. MAKE_SYM
    (2, 0x3FFF, 0, 0, 8),  # + REFER
    (3, 0x7FFF, 0, 0, 8),  # + TRUNCATE
    (4, 0x7FFF, 0b11, 0, 16),  # + TCP bind/connect
    (5, 0xFFFF, 0b11, 0, 16),  # + IOCTL_DEV
    (6, 0xFFFF, 0b11, 0b11, 24),  # + abstract unix socket and signal scopes
    (7, 0xFFFF, 0b11, 0b11, 24),  # audit flags only: the same rights
])
def test_the_ruleset_drops_what_the_abi_lacks(tmp_path, abi, fs, net, scoped, size):
    """Best effort, as in the kernel documentation: a kernel refuses rights it does not know,
    and a ruleset_attr longer than it knows unless the extra fields are zero."""
    ruleset = landlock.ruleset(abi, read=("/usr",), write=(str(tmp_path),))
    assert (ruleset.handled_fs, ruleset.handled_net, ruleset.scoped) == (fs, net, scoped)
    attr = ruleset.attr()
    assert len(attr) == size
    assert struct.unpack(f"<{size // 8}Q", attr) == (fs, net, scoped)[:size // 8]
    rules = dict((path, rights) for rights, path in ruleset.rules)
    assert rules["/usr"] == landlock.FS_EXECUTE | landlock.FS_READ_FILE | landlock.FS_READ_DIR
    assert rules[str(tmp_path)] == fs  # the run's directory: everything this ABI restricts


def test_files_get_file_rights_only_and_missing_paths_are_left_out(tmp_path):
    """A rule on a file with a directory right (READ_DIR) makes add_rule fail with EINVAL."""
    ruleset = landlock.ruleset(3, read=("/etc/passwd", str(tmp_path / "missing")), write=())
    rules = dict((path, rights) for rights, path in ruleset.rules)
    assert rules["/etc/passwd"] == landlock.FS_EXECUTE | landlock.FS_READ_FILE
    assert str(tmp_path / "missing") not in rules
    assert rules["/dev/null"] == landlock.FS_READ_FILE | landlock.FS_WRITE_FILE | \
        landlock.FS_TRUNCATE
    # ABI 1 has no TRUNCATE: the device rule loses it with the rest.
    assert dict((p, r) for r, p in landlock.ruleset(1, read=(), write=()).rules)["/dev/null"] == \
        landlock.FS_READ_FILE | landlock.FS_WRITE_FILE


def test_the_child_arguments_carry_the_attr_and_each_rule(tmp_path):
    ruleset = landlock.ruleset(6, read=("/usr",), write=(str(tmp_path),))
    args = ruleset.args()
    assert args[0] == "LANDLOCK=" + ruleset.attr().hex()
    assert args[1] == f"LANDLOCK_RULE={landlock.READ},/usr"
    assert args[2] == f"LANDLOCK_RULE={0xFFFF},{tmp_path}"


def test_the_report_line_says_what_each_abi_restricts():
    assert "no Landlock" in landlock.describe(0)
    assert "TCP not restricted (needs ABI >= 4)" in landlock.describe(3)
    assert "not scoped (needs ABI >= 6)" in landlock.describe(5)
    full = landlock.describe(7)
    assert "TCP bind and connect refused" in full and "scoped to the run" in full


def test_abi_is_this_kernels():
    """0 or a version; where the kernel has Landlock, /sys/kernel/security/lsm lists it."""
    version = landlock.abi()
    assert version >= 0
    try:
        with open("/sys/kernel/security/lsm") as lsm:
            listed = "landlock" in lsm.read().split(",")
    except OSError:
        pytest.skip("no /sys/kernel/security/lsm to compare with")
    assert (version > 0) == listed


def test_readable_by_others_follows_every_directory_above(tmp_path):
    """CAP_DAC_READ_SEARCH is kept only where uid 65534 could not reach the interpreter."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "python").write_text("")
    os.chmod(shared, 0o755)
    os.chmod(shared / "python", 0o755)
    os.chmod(tmp_path, 0o755)
    above = [str(p) for p in tmp_path.parents if p != p.parent]
    reachable = all(os.stat(p).st_mode & 0o001 for p in above)
    assert sandbox_user.readable_by_others((str(shared / "python"),)) == reachable
    os.chmod(tmp_path, 0o700)  # like root's home
    assert not sandbox_user.readable_by_others((str(shared / "python"),))
    assert sandbox_user.readable_by_others(("/usr/bin",))
    assert not sandbox_user.readable_by_others((str(tmp_path / "missing"),))
