"""Stand-ins for what a weight sync (algorithm/weight_sync.py) calls on RLlib's learner group and
env runner group, for the driver-side tests of the syncs (test_cuda_ipc_sync.py,
test_weight_sync_refusal.py, test_weight_sync_faults.py), whose learners and runners are stand-ins
too."""

from __future__ import annotations

import threading
from types import SimpleNamespace


class EnvRunnerGroup:
    """RLlib's EnvRunnerGroup over stand-in runners (objects with a `worker_index`). As RLlib's
    does, tolerating failed runners (its default), it drops a runner's error from the answers;
    each call's keyword arguments are kept in `calls`."""

    def __init__(self, runners: list):
        self.runners, self.local_env_runner, self.calls = runners, None, []

    def healthy_env_runner_ids(self) -> list[int]:
        return [r.worker_index for r in self.runners]

    def num_remote_env_runners(self) -> int:
        return len(self.runners)

    def foreach_env_runner(self, fn, *, remote_worker_ids, local_env_runner, timeout_seconds):
        self.calls.append({"remote_worker_ids": remote_worker_ids,
                           "local_env_runner": local_env_runner,
                           "timeout_seconds": timeout_seconds})
        answers = []
        for runner in self.runners:
            if runner.worker_index not in remote_worker_ids:
                continue
            try:
                answers.append(fn(runner))
            except Exception:  # noqa: BLE001 - logged and dropped, as RLlib does
                pass
        return answers


def learner_group(learner) -> SimpleNamespace:
    """RLlib's LearnerGroup with one stand-in learner, local: `foreach_learner(fn)` answers
    fn(learner) (its keyword arguments, a timeout among them, change nothing for a local one)."""
    return SimpleNamespace(foreach_learner=lambda fn, **_: SimpleNamespace(
        result_or_errors=[SimpleNamespace(ok=True, get=lambda: fn(learner))]))


class BroadcastLearner:
    """A learner's side of a broadcast sync: it sends version 3, or raises `error`, after
    waiting for `hang` to be set (at most 30 s) where given."""

    def __init__(self, error: Exception | None = None, hang: threading.Event | None = None):
        self.error, self.hang = error, hang

    def open_weight_broadcast(self, **_) -> dict:
        return {}

    def join_weight_broadcast(self) -> None:
        pass

    def broadcast_weights(self) -> int:
        if self.hang is not None:
            self.hang.wait(30)
        if self.error is not None:
            raise self.error
        return 3


class BroadcastRunner:
    """Env runner `index`'s side of a broadcast sync: it receives version 3, or raises `error`."""

    def __init__(self, index: int, error: Exception | None = None):
        self.worker_index, self.error = index, error

    def join_weight_broadcast(self, **_) -> None:
        pass

    def receive_weights(self) -> int:
        if self.error is not None:
            raise self.error
        return 3
