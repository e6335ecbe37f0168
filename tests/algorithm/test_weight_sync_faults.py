"""The driver's side of a broadcast sync (algorithm/weight_sync.py) when a process dies or hangs
inside it: each ends within weight_sync_timeout_s in one line naming what died and the setting.
A dead runner that RLlib tolerates is a warning and an object-store sync this time; one it does
not tolerate, a dead learner, or a learner that never finishes stop the run. Stand-ins for the
learner and runners (a real runner killed inside a gloo broadcast: test_weight_sync.py)."""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace

import pytest
from ray.exceptions import RayActorError
from sync_standins import BroadcastLearner as Learner
from sync_standins import BroadcastRunner as Runner
from sync_standins import EnvRunnerGroup, learner_group  # (tests/algorithm: on sys.path)

from rllib_llm.algorithm.weight_sync import BroadcastWeightSync, WeightSyncError
from rllib_llm.exchange.weight_broadcast import BroadcastBroken

# What the learner's send raises when a runner's process is gone (gloo, measured).
RESET = BroadcastBroken("rank 0 of 3: Read error [127.0.0.1]:4998: Connection reset by peer "
                        "(timeout 5 s)")
# ... and what a surviving runner's receive raises once the learner has dropped the group.
CLOSED = BroadcastBroken("rank 1 of 3: Connection closed by peer [127.0.0.1]:15594 (timeout 5 s)")


class Died(RayActorError):
    """What Ray raises on the driver for a call to a runner whose process died."""


class EnvRunnerGroupWithDeaths(EnvRunnerGroup):
    """The stand-in group, where a runner whose call raised `Died` is taken out of service, as
    RLlib's is, and the error raised unless `tolerate` (RLlib's ignore_env_runner_failures or
    restart_failed_env_runners)."""

    def __init__(self, runners: list, *, tolerate: bool):
        super().__init__(runners)
        self.tolerate, self.dead = tolerate, set()

    def healthy_env_runner_ids(self) -> list[int]:
        return [i for i in super().healthy_env_runner_ids() if i not in self.dead]

    def foreach_env_runner(self, fn, **kwargs):
        deaths = []

        def call(runner):
            try:
                return fn(runner)
            except Died as death:
                self.dead.add(runner.worker_index)
                deaths.append(death)
                raise

        answers = super().foreach_env_runner(call, **kwargs)
        if deaths and not self.tolerate:
            raise deaths[0]
        return answers


def sync_for(learner, runners, *, tolerate: bool = True, timeout_s: float = 5):
    config = SimpleNamespace(weight_sync_backend="gloo", weight_sync_timeout_s=timeout_s,
                             weight_sync_bucket_bytes=64, rollout_engine="torch")
    return BroadcastWeightSync(config, learner_group(learner),
                               EnvRunnerGroupWithDeaths(runners, tolerate=tolerate))


def test_a_runner_that_died_mid_broadcast_is_one_warning_line_and_the_group_is_built_again(
        caplog):
    sync = sync_for(Learner(RESET), [Runner(1, Died()), Runner(2, CLOSED)])
    with caplog.at_level(logging.WARNING, logger="rllib_llm.algorithm.weight_sync"):
        assert not sync.sync()
    assert sync.members is None  # the next sync builds a new group
    [record] = caplog.records
    line = record.getMessage()
    assert "\n" not in line
    assert line.startswith("weight_sync_backend='gloo': env runner(s) [1] died during it after ")
    assert line.endswith(" s (weight_sync_timeout_s=5): rank 0 of 3: Read error "
                         "[127.0.0.1]:4998: Connection reset by peer (timeout 5 s); syncing "
                         "through the object store this time, and building the group again "
                         "with the runners then healthy.")
    # The survivor answered (its broken broadcast is an answer, not an error RLlib would take
    # it out of service for); with the dead runner back, a sync builds the group and runs.
    sync.env_runner_group.dead.clear()
    sync.env_runner_group.runners = [Runner(1), Runner(2)]
    sync.learner_group = learner_group(Learner())
    assert sync.sync() and sync.members == [1, 2]


def test_a_runner_that_died_where_failed_runners_are_not_tolerated_stops_the_run():
    sync = sync_for(Learner(RESET), [Runner(1), Runner(2, Died())], tolerate=False)
    with pytest.raises(WeightSyncError) as stopped:
        sync.sync()
    assert str(stopped.value) == (
        "weight_sync_backend='gloo': env runner(s) [2] died during the weight sync "
        "(weight_sync_timeout_s=5) and failed env runners are not tolerated: set "
        "config.fault_tolerance(restart_failed_env_runners=True) to carry on with them restored "
        "(The actor experienced an error before finishing this task.)")
    assert sync.members is None


def test_a_learner_that_died_mid_broadcast_stops_the_run_in_one_line():
    sync = sync_for(Learner(), [Runner(1, CLOSED), Runner(2, CLOSED)])
    sync.learner_group = SimpleNamespace(foreach_learner=lambda fn, **_: SimpleNamespace(
        result_or_errors=[SimpleNamespace(ok=False, get=lambda: Died())]))
    with pytest.raises(WeightSyncError, match=(
            "^weight_sync_backend='gloo': the learner died \\(weight_sync_timeout_s=5\\): The "
            "actor experienced an error before finishing this task.; the run cannot go on "
            "without it: resume the run from its last checkpoint$")):
        sync.sync()


def test_a_learner_whose_send_never_ends_stops_the_run_after_twice_the_timeout():
    hang = threading.Event()
    sync = sync_for(Learner(hang=hang), [Runner(1), Runner(2)], timeout_s=0.2)
    start = time.monotonic()
    with pytest.raises(WeightSyncError, match="the learner did not finish its part of the weight "
                                              "sync within 2 x weight_sync_timeout_s=0.2"):
        sync.sync()
    assert time.monotonic() - start < 2
    hang.set()  # the thread left behind ends
