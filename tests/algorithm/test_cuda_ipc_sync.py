"""The driver's side of the CUDA IPC weight sync (algorithm/weight_sync.py), on the CPU: which
calls it makes, the placement it refuses, and when it falls back to the object store. The
learner and runners here are stand-ins with the methods the sync calls; the IPC itself needs a
GPU (benchmarks/gpu/gpu_check.py runs it and checks the runners' weights)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from sync_standins import EnvRunnerGroup, learner_group  # (tests/algorithm: on sys.path)

from rllib_llm.algorithm.weight_sync import CudaIpcWeightSync
from rllib_llm.exchange.weight_ipc import SharedWeights


class Learner:
    def __init__(self):
        self.version = 0

    def share_weights(self) -> SharedWeights:
        return SharedWeights(self.version, "GPU-0", ())


class Runner:
    def __init__(self, index: int, gpus: list[str], lag: int = 0):
        self.worker_index, self.gpus, self.lag, self.loaded = index, gpus, lag, []

    def gpu_uuids(self) -> list[str]:
        return self.gpus

    def load_shared_weights(self, shared: SharedWeights) -> int:
        self.loaded.append(shared)
        return shared.version - self.lag


def sync_for(learner: Learner, runners: list[Runner]) -> CudaIpcWeightSync:
    config = SimpleNamespace(weight_sync_backend="cuda_ipc", weight_sync_timeout_s=60)
    return CudaIpcWeightSync(config, learner_group(learner), EnvRunnerGroup(runners))


def test_each_sync_hands_every_runner_the_learners_current_handles():
    learner, runners = Learner(), [Runner(1, ["GPU-0"]), Runner(2, ["GPU-1", "GPU-0"])]
    sync = sync_for(learner, runners)
    for version in (3, 4):
        learner.version = version
        assert sync.sync()
    assert [[s.version for s in r.loaded] for r in runners] == [[3, 4], [3, 4]]
    assert sync.members == [1, 2]
    assert all(not call["local_env_runner"] and call["timeout_seconds"] == 60
               for call in sync.env_runner_group.calls)


def test_a_runner_off_the_learners_gpu_stops_the_run_before_any_weights_move():
    runners = [Runner(1, ["GPU-0"]), Runner(2, ["GPU-7"])]
    with pytest.raises(ValueError, match="learner's GPU \\(GPU-0\\).*'nccl'"):
        sync_for(Learner(), runners).sync()
    assert all(not r.loaded for r in runners)


def test_a_runner_reporting_another_version_makes_the_object_store_sync_this_time():
    learner, runners = Learner(), [Runner(1, ["GPU-0"]), Runner(2, ["GPU-0"], lag=1)]
    learner.version = 5
    sync = sync_for(learner, runners)
    assert not sync.sync()
    assert sync.members is None  # set up again next time
