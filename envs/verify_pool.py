"""A small pool of worker processes that runs calls under a hard wall-clock limit.

Why processes: math-verify (sympy underneath) can run for minutes or eat memory on hostile input,
and its own timeouts use `signal.alarm`, which works only on a process's main thread, while RLlib
runs environments inside Ray worker threads. A call that overruns is ended the only reliable
way, by killing its process; a fresh worker replaces it, so the caller never crashes or stalls.

How workers start: a fresh interpreter runs `verify_worker.py` as a script (fork+exec, like
multiprocessing's "spawn"; never a bare fork, which can deadlock a child of a threaded Ray
worker on a lock another thread held), and talks over a socket pair with multiprocessing's
`Connection` framing. Not `multiprocessing`'s spawn context itself: its children re-import the
parent's `__main__` script, which is the user's training script when the env runner is local
(re-running an unguarded script in every worker), and it pulled Ray Tune into each worker here
(~3 s and ~220 MB instead of ~1 s and ~56 MB). A worker reports ready after importing
`preload`, and a call's clock starts when it is handed to a ready worker, so the seconds an
interpreter takes to start never count as a timeout.

Workers exit when the pool closes, is garbage-collected, or the interpreter exits, and on their
own when the parent's end of the socket closes while they wait for work.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from rllib_llm.envs import verify_worker
from rllib_llm.envs.validation import check_int, check_positive_seconds
from rllib_llm.envs.verify_worker import ERROR_CHARS, READY


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one call: its return value, or why there is none."""

    value: Any = None
    timed_out: bool = False
    error: str | None = None


class _Worker:
    """One worker process, our end of its socket, and the call it is running (if any)."""

    def __init__(self, preload: tuple[str, ...], start_timeout_s: float):
        ours, theirs = socket.socketpair()
        with theirs:
            # -P: the script's directory (envs/) must not shadow top-level modules in the worker.
            self.process = subprocess.Popen(
                [sys.executable, "-P", verify_worker.__file__, str(theirs.fileno()), *preload],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        self.conn = Connection(ours.detach())
        self.ready = False
        self.job: int | None = None
        self.deadline = time.monotonic() + start_timeout_s

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.conn.close()


def _stop_workers(workers: list[_Worker]) -> None:
    """Ask every worker to exit, then kill what is left (also the garbage-collection finalizer)."""
    for worker in workers:
        try:
            worker.conn.send(None)
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + 1.0
    for worker in workers:
        try:
            worker.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass  # killed below
        worker.kill()
    workers.clear()


class HardTimeoutPool:
    """Run calls in `num_workers` processes, each call limited to `timeout_s` seconds.

    A call is `(fn, args)`: a picklable callable or the name of a function in `verify_worker`.

    Workers start on the first `run` and are reused. A call that overruns is killed with its
    worker (`Outcome.timed_out`); a call that raises, or whose worker dies, gives
    `Outcome.error`; a replacement worker starts at once. Not thread-safe: callers serialise.

    Args:
        num_workers: worker processes, >= 1.
        timeout_s: wall-clock limit per call, > 0, counted from hand-over to a ready worker.
        preload: modules each worker imports before it reports ready.
        start_timeout_s: how long a worker may take to become ready before it counts as broken.
    """

    def __init__(
        self,
        num_workers: int = 1,
        timeout_s: float = 5.0,
        *,
        preload: Sequence[str] = (),
        start_timeout_s: float = 60.0,
    ):
        self.num_workers = check_int("num_workers", num_workers, minimum=1, fix="use e.g. 1")
        self.timeout_s = check_positive_seconds("timeout_s", timeout_s, fix="use e.g. 5.0")
        self.start_timeout_s = check_positive_seconds(
            "start_timeout_s", start_timeout_s, fix="use e.g. 60.0"
        )
        self.preload = tuple(preload)
        self.restarts = 0  # workers replaced after a timeout or a crash
        self._workers: list[_Worker] = []
        # Runs on close(), on garbage collection and at interpreter exit, whichever comes first;
        # it holds the worker list, not the pool, so it does not keep the pool alive.
        self._finalizer = weakref.finalize(self, _stop_workers, self._workers)

    def run(self, calls: Sequence[tuple[Callable[..., Any], tuple]]) -> list[Outcome]:
        """Run `fn(*args)` for every `(fn, args)` in `calls`, overlapping them across workers."""
        if not self._finalizer.alive:
            raise RuntimeError("HardTimeoutPool.run() after close(); create a new pool")
        while len(self._workers) < self.num_workers:
            self._workers.append(self._start_worker())
        outcomes: list[Outcome | None] = [None] * len(calls)
        queue = deque(range(len(calls)))
        while queue or any(w.job is not None for w in self._workers):
            self._hand_out(calls, outcomes, queue)
            self._collect(outcomes, queue)
        return outcomes  # type: ignore[return-value] - every slot is filled by now

    def close(self) -> None:
        """Stop the workers (idempotent); `run` is refused afterwards."""
        self._finalizer()

    # --- internals ------------------------------------------------------------------------------
    def _start_worker(self) -> _Worker:
        return _Worker(self.preload, self.start_timeout_s)

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        self._workers[self._workers.index(worker)] = self._start_worker()
        self.restarts += 1

    def _hand_out(self, calls, outcomes: list, queue: deque) -> None:
        for worker in list(self._workers):
            if not queue or not worker.ready or worker.job is not None:
                continue
            index = queue.popleft()
            try:
                worker.conn.send(calls[index])
            except (BrokenPipeError, ConnectionError):  # died while idle: not this call's fault
                queue.appendleft(index)
                self._replace(worker)
                continue
            except Exception as exc:  # noqa: BLE001 - unpicklable arguments; nothing was sent
                outcomes[index] = Outcome(error=f"{type(exc).__name__}: {exc}"[:ERROR_CHARS])
                continue
            worker.job = index
            worker.deadline = time.monotonic() + self.timeout_s

    def _collect(self, outcomes: list, queue: deque) -> None:
        """Wait for the next reply or deadline, and record what happened."""
        waiting = [w for w in self._workers if w.job is not None or not w.ready]
        if not waiting:
            return
        timeout = max(0.0, min(w.deadline for w in waiting) - time.monotonic())
        readable = wait([w.conn for w in waiting], timeout=timeout)
        now = time.monotonic()
        for worker in waiting:
            if worker.conn in readable:
                self._receive(worker, outcomes, queue)
            elif now >= worker.deadline:
                self._expire(worker, outcomes, queue)

    def _receive(self, worker: _Worker, outcomes: list, queue: deque) -> None:
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            try:
                code = worker.process.wait(timeout=1.0)  # reap it, so the exit code is known
            except subprocess.TimeoutExpired:
                code = None
            self._fail(worker, outcomes, queue, f"worker process died (exit code {code})")
            return
        if not worker.ready:
            worker.ready = message == READY
            return
        ok, value = message
        outcomes[worker.job] = Outcome(value=value) if ok else Outcome(error=value)
        worker.job = None

    def _expire(self, worker: _Worker, outcomes: list, queue: deque) -> None:
        if worker.job is None:
            self._fail(worker, outcomes, queue, "worker did not start in time")
            return
        outcomes[worker.job] = Outcome(timed_out=True)
        worker.job = None
        self._replace(worker)

    def _fail(self, worker: _Worker, outcomes: list, queue: deque, reason: str) -> None:
        if worker.job is not None:
            outcomes[worker.job] = Outcome(error=reason)
            worker.job = None
        elif not any(w.ready for w in self._workers):
            # No worker can start (a broken install, no memory), and a replacement would most
            # likely fail too: the queued calls fail now instead of waiting on endless restarts.
            while queue:
                outcomes[queue.popleft()] = Outcome(error=reason)
        self._replace(worker)
