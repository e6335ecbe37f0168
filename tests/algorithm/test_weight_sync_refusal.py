"""The driver's side of a broadcast sync (algorithm/weight_sync.py) when a runner refuses a bucket
whose checksum failed: the run stops with the runner's one line; it does not fall back to the
object store as it does for a runner that died. Stand-ins for the learner and runners (the
broadcast itself: tests/exchange/test_weight_checksums.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from sync_standins import BroadcastLearner as Learner
from sync_standins import BroadcastRunner as Runner
from sync_standins import EnvRunnerGroup, learner_group  # (tests/algorithm: on sys.path)

from rllib_llm.algorithm.weight_sync import BroadcastWeightSync
from rllib_llm.exchange.weight_checksums import WeightChecksumError

REFUSAL = ("weight sync of learner version 3: bucket 2 of 9 is corrupt: model.norm.weight (64,) "
           "does not match the checksum its sender computed; refusing it.")


def sync_for(runners: list[Runner]) -> BroadcastWeightSync:
    config = SimpleNamespace(weight_sync_backend="gloo", weight_sync_timeout_s=60,
                             weight_sync_bucket_bytes=64, rollout_engine="torch")
    return BroadcastWeightSync(config, learner_group(Learner()), EnvRunnerGroup(runners))


def test_a_refused_bucket_stops_the_run_with_the_runners_line():
    sync = sync_for([Runner(1), Runner(2, WeightChecksumError(REFUSAL))])
    with pytest.raises(WeightChecksumError) as refused:
        sync.sync()
    assert str(refused.value) == REFUSAL


def test_a_runner_that_fails_otherwise_makes_the_object_store_sync_this_time():
    sync = sync_for([Runner(1), Runner(2, RuntimeError("connection reset"))])
    assert not sync.sync()
    assert sync.members is None  # set up again next time
    assert sync_for([Runner(1), Runner(2)]).sync()
