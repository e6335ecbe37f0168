"""Broadcast weight sync end to end (`weight_sync_backend="gloo"`, the CPU twin of 'nccl'):
remote runners get the learner's exact weights and version, a runner killed inside a broadcast
ends the sync in one line and is restored and the group rebuilt, evaluation runs on the
broadcast's runners, and bad settings fail clearly."""

from __future__ import annotations

import functools
import logging
import os
import time

import pytest
import ray
import torch

from rllib_llm.exchange import weight_broadcast
from rllib_llm.recipes.embedded import embedded_config

TINY = dict(rollout_batch_size=2, num_return_sequences_in_group=2, response_length=4)


pytestmark = pytest.mark.usefixtures("ray_session")  # tests/conftest.py


def broadcast_config(**overrides):
    return (embedded_config("topr", **TINY, **overrides)
            .env_runners(num_env_runners=2, weight_sync_backend="gloo",
                         weight_sync_bucket_bytes=64 * 1024, weight_sync_timeout_s=60))


def learner_weights(algo) -> dict[str, torch.Tensor]:
    model = algo.learner_group.local_learner.module["default_policy"].model
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def runner_weights(algo) -> list[tuple[int, dict[str, torch.Tensor]]]:
    return algo.env_runner_group.foreach_env_runner(
        lambda r: (r.engine.weight_version,
                   {k: v.clone() for k, v in r.module.model.state_dict().items()}),
        local_env_runner=False)


def assert_runners_hold(algo, version: int) -> None:
    expected = learner_weights(algo)
    got = runner_weights(algo)
    assert len(got) == 2
    for runner_version, weights in got:
        assert runner_version == version
        for name, tensor in expected.items():
            assert torch.equal(weights[name], tensor), name


def test_runners_receive_the_learners_exact_weights_and_version():
    algo = broadcast_config().build_algo()
    results = [algo.train() for _ in range(3)]
    assert_runners_hold(algo, version=3)
    assert algo.direct_sync.members == [1, 2]  # the group was built and kept
    # Episodes were sampled by the version before each update (0, 1, 2).
    assert [r["env_runners"]["weight_version"] for r in results] == [0, 1, 2]
    assert all(r["timers"]["weight_sync"] > 0 for r in results)
    # Evaluation shares the problems out over the remote runners, which the broadcast keeps
    # current; the driver's runner, outside the group, is left behind.
    eval_config = algo.evaluation_config.copy(copy_frozen=False)
    eval_config.eval_num_problems = 4
    shards = algo.score_held_out(eval_config)
    assert sorted(s.prompt_indices for s in shards) == [[0, 2], [1, 3]]
    assert algo.env_runner_group.local_env_runner.engine.weight_version == 0
    algo.stop()


def test_a_runner_killed_inside_a_broadcast_ends_the_sync_in_one_line_and_rejoins_restored(
        env_runner_actor, monkeypatch, caplog):
    """Runner 1's process is killed once the learner has sent the first of the stream's ~140
    buckets: the learner's send fails, it drops the group, runner 2's receive fails with it,
    and the sync ends well inside weight_sync_timeout_s with one warning naming runner 1. RLlib
    tolerates the dead runner and restarts it; runner 2 stays in service and gets the weights
    through the object store; once runner 1 is back, with the learner's current weights, the
    next sync builds a new group with both and broadcasts over it."""
    timeout_s = 5
    algo = (broadcast_config()
            .env_runners(weight_sync_bucket_bytes=16 * 1024, weight_sync_timeout_s=timeout_s)
            .fault_tolerance(restart_failed_env_runners=True).build_algo())
    actor = env_runner_actor(algo, 1)
    [pid] = algo.env_runner_group.foreach_env_runner(
        lambda runner: os.getpid(), remote_worker_ids=[1], local_env_runner=False)
    killed_at = []

    def kill_runner_1_after_the_first_bucket(payloads):
        for index, payload in enumerate(payloads):
            if index == 1 and not killed_at:
                ray.kill(actor, no_restart=False)
                while _running(pid):
                    time.sleep(0.01)
                killed_at.append(time.monotonic())
            yield payload

    monkeypatch.setattr(weight_broadcast, "Sender", functools.partial(
        weight_broadcast.Sender, in_transit=kill_runner_1_after_the_first_bucket))
    with caplog.at_level(logging.WARNING, logger="rllib_llm.algorithm.weight_sync"):
        algo.train()  # its sync sets the group up, and runner 1 dies inside the broadcast
    assert killed_at and time.monotonic() - killed_at[0] < timeout_s
    [line] = [r.getMessage() for r in caplog.records if r.name.endswith("weight_sync")]
    assert "\n" not in line
    assert line.startswith("weight_sync_backend='gloo': env runner(s) [1] died during it after ")
    assert f"(weight_sync_timeout_s={timeout_s}): rank 0 of 3: " in line
    assert algo.direct_sync.members is None
    assert 2 in algo.env_runner_group.healthy_env_runner_ids()
    [(version, weights)] = algo.env_runner_group.foreach_env_runner(
        lambda r: (r.engine.weight_version, r.module.model.state_dict()),
        remote_worker_ids=[2], local_env_runner=False)
    assert version == algo.learner_version() == 1
    for name, tensor in learner_weights(algo).items():
        assert torch.equal(weights[name], tensor), name

    deadline = time.monotonic() + 120
    while algo.env_runner_group.num_healthy_remote_workers() < 2 and time.monotonic() < deadline:
        algo.train()  # samples with the survivor; the sync goes through the object store
        time.sleep(0.5)
    assert algo.env_runner_group.num_healthy_remote_workers() == 2
    algo.train()  # restored: the next sync builds a new group and broadcasts over it
    assert_runners_hold(algo, version=algo.learner_version())
    assert algo.direct_sync.members == [1, 2]
    algo.stop()


def _running(pid: int) -> bool:
    """Whether process `pid` still runs (not gone, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:  # gone (ENOENT), or going while it is read (ESRCH)
        return False


def test_broadcast_settings_are_validated():
    with pytest.raises(ValueError, match="weight_sync_backend='gloo' sends to remote env "
                                         "runners, but num_env_runners=0"):
        embedded_config("topr", **TINY).env_runners(weight_sync_backend="gloo").validate()
    with pytest.raises(ValueError, match="weight_sync_backend='mpi' is invalid: it must be one "
                                         "of \\['cuda_ipc', 'gloo', 'nccl', 'object_store'\\]"):
        embedded_config("topr", **TINY).env_runners(weight_sync_backend="mpi").validate()
    with pytest.raises(ValueError, match="weight_sync_bucket_bytes=0 is invalid"):
        broadcast_config().env_runners(weight_sync_bucket_bytes=0).validate()


def test_cuda_ipc_is_refused_where_it_could_not_share_the_learners_parameters():
    def ipc(**training):
        return broadcast_config(**training).env_runners(weight_sync_backend="cuda_ipc")

    def on_one_gpu(config):
        return config.learners(num_gpus_per_learner=0.5).env_runners(num_gpus_per_env_runner=0.5)

    with pytest.raises(ValueError, match="'cuda_ipc' hands the learner's weights on its GPU to "
                                         "env runners on the same GPU, and num_gpus_per_learner"
                                         "=0, num_gpus_per_env_runner=0"):
        ipc().validate()
    with pytest.raises(ValueError, match="num_gpus_per_env_runner=0\\. Give"):
        ipc().learners(num_gpus_per_learner=0.5).validate()
    with pytest.raises(ValueError, match="rollout_engine='vllm'.*Use weight_sync_backend='nccl'"):
        on_one_gpu(ipc()).env_runners(rollout_engine="vllm").validate()
    with pytest.raises(ValueError, match="lora_rank > 0: the merged weights are new tensors"):
        on_one_gpu(ipc(lora_rank=4)).validate()
    with pytest.raises(ValueError, match="ZeRO-3: the gathered weights are new tensors"):
        on_one_gpu(ipc(learner_strategy="deepspeed", zero_stage=3)).learners(
            num_learners=1).validate()
    on_one_gpu(ipc()).validate()  # a learner and a torch-engine runner sharing one GPU


def test_nccl_without_gpus_fails_at_the_first_sync_and_says_to_use_gloo():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    algo = broadcast_config().env_runners(weight_sync_backend="nccl").build_algo()
    with pytest.raises(ValueError, match="'nccl' moves weights between GPUs.*Use 'gloo'"):
        algo.train()
    algo.stop()
