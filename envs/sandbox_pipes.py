"""The run's pipes: feed the code to stdin, read stdout and stderr within their caps, and notice
the end of the code's main process (a pidfd where the kernel has pidfd_open, polling where not)
while the deadline runs.

`communicate()` is `Popen.communicate` for hostile children: the parent's memory stays bounded
(output past the cap is read and dropped), processes the code leaves behind cannot hold the call
open past a short grace (they keep the pipes), and `kill` is called at the deadline or as soon
as the main process ends.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time

_DRAIN_GRACE_S = 0.5  # after the child ended: how long to wait for pipes its escapees hold
_POLL_S = 0.01  # exit polling where pidfd_open is unavailable (Linux < 5.3)


class Capture:
    """The first `limit` bytes of a stream; the rest is dropped (and remembered as such)."""

    def __init__(self, limit: int):
        self.data, self.limit, self.truncated = bytearray(), limit, False

    def add(self, chunk: bytes) -> None:
        room = self.limit - len(self.data)
        if len(chunk) > room:
            self.truncated = True
        self.data += chunk[:max(room, 0)]

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


def communicate(process: subprocess.Popen, source: bytes, deadline: float,
                 max_output_bytes: int, kill) -> tuple[Capture, Capture, bool]:
    """Feed `source` to stdin and read stdout/stderr until the child has ended and its pipes
    are closed; kill its group when it ends (its leftovers) or at `deadline`.

    Returns (stdout, stderr, timed_out)."""
    stdout, stderr = Capture(max_output_bytes), Capture(max_output_bytes)
    captures = {process.stdout.fileno(): stdout, process.stderr.fileno(): stderr}
    stdin, pending = process.stdin.fileno(), memoryview(source)
    pidfd = _pidfd(process.pid)
    ended = timed_out = False
    with selectors.DefaultSelector() as selector:
        for fd in (stdin, *captures):
            os.set_blocking(fd, False)
        for fd in captures:
            selector.register(fd, selectors.EVENT_READ)
        if pidfd is not None:
            selector.register(pidfd, selectors.EVENT_READ)
        if pending:
            selector.register(stdin, selectors.EVENT_WRITE)
        else:
            process.stdin.close()
        while not ended or any(fd in selector.get_map() for fd in captures):
            now = time.monotonic()
            if now >= deadline:
                if ended:
                    break  # processes that escaped the kill hold the pipes
                timed_out = ending = True
            else:
                poll = pidfd is None and not ended
                ending = False
                for key, _ in selector.select(min(deadline - now, _POLL_S) if poll
                                              else deadline - now):
                    if key.fd == stdin:
                        pending = _feed(selector, process.stdin, pending)
                    elif key.fd == pidfd:
                        ending = True
                    elif chunk := os.read(key.fd, 65536):
                        captures[key.fd].add(chunk)
                    else:
                        selector.unregister(key.fd)
                ending = not ended and (ending or (poll and _has_ended(process.pid)))
            if ending:
                ended = True
                kill()  # the zombie leader keeps the group id from reuse
                deadline = min(deadline, time.monotonic() + _DRAIN_GRACE_S)
                for fd in (pidfd, stdin):
                    if fd is not None and fd in selector.get_map():
                        selector.unregister(fd)
    for pipe in (process.stdin, process.stdout, process.stderr):
        pipe.close()
    if pidfd is not None:
        os.close(pidfd)
    return stdout, stderr, timed_out


def _feed(selector: selectors.BaseSelector, stdin, pending: memoryview) -> memoryview:
    """Write what the pipe takes of `pending`; close stdin once all is written (EOF)."""
    try:
        pending = pending[os.write(stdin.fileno(), pending[:65536]):]
    except BlockingIOError:
        return pending
    except BrokenPipeError:  # the child ended before reading its code
        pending = pending[:0]
    if not pending:
        selector.unregister(stdin.fileno())
        stdin.close()
    return pending


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when `pid` ends (without reaping it); None where the
    kernel lacks pidfd_open (< 5.3): then `_has_ended` is polled."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _has_ended(pid: int) -> bool:
    """Whether the child `pid` has ended, leaving it unreaped (its id stays taken)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
