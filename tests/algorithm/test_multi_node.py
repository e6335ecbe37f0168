"""Across Ray nodes: a local two-node cluster (`ray.cluster_utils.Cluster`, each node with its own
CPUs), one FSDP2 learner and one env runner on each node, takes the update one learner takes on
the same batch, trains; its checkpoint (each learner's shards) restores into a single learner in
the driver.

FSDP2 rather than DDP: the two run on the same process group across the nodes (RLlib's), and
FSDP2 adds what crosses them besides the gradients' all-reduce (each layer's all-gather,
reduce-scatter, a checkpoint written by both nodes), so one run covers both
(tests/learner/test_data_parallel.py and tests/learner/test_fsdp2.py test each on one node). The
nodes share this machine's filesystem, as sharded checkpoints need: each learner writes its own
shards into the checkpoint's directory."""

from __future__ import annotations

import shutil
import tempfile

import pytest
import ray
import torch
from ray.cluster_utils import Cluster
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_llm.recipes.embedded import embedded_config

# One slot of each per node: RLlib's custom resources put one learner and one runner on each.
SLOTS = {"learner_slot": 1, "runner_slot": 1}
SETTINGS = dict(rollout_batch_size=4, num_return_sequences_in_group=4, response_length=6,
                lr=1e-3)


@pytest.fixture
def two_nodes(monkeypatch):
    # The cluster writes its address where a bare ray.init() looks for a running cluster (under
    # RAY_TMPDIR): a private one keeps other tests' ray.init() off this cluster. Short, because
    # Ray's sockets live under it (a Unix socket path has at most 107 bytes).
    private = tempfile.mkdtemp(prefix="rlc", dir="/tmp")
    monkeypatch.setenv("RAY_TMPDIR", private)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": SLOTS})
    cluster.add_node(num_cpus=2, resources=SLOTS)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield [node["NodeID"] for node in ray.nodes() if node["Alive"]]
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(private, ignore_errors=True)


def test_learners_and_env_runners_on_two_nodes_train_and_restore_into_one_learner(
        two_nodes, tmp_path):
    assert len(two_nodes) == 2
    # (Functions sent to the actors are lambdas: this test module is not on the nodes' path.)
    algo = (embedded_config("topr", seed=0, learner_strategy="fsdp2", **SETTINGS)
            .env_runners(num_env_runners=2, custom_resources_per_env_runner={"runner_slot": 1})
            .learners(num_learners=2, custom_resources_per_learner={"learner_slot": 1})
            .build_algo())
    reference = embedded_config("topr", seed=0, **SETTINGS).learners(num_learners=0).build_algo()
    try:
        # What the README promises: the two nodes' update is one learner's on the same batch
        # (the episodes the runners of both nodes sampled), within the tolerance of
        # tests/learner/test_data_parallel.py (FSDP2's is 2.4e-7 after 4 steps on one node:
        # tests/learner/test_fsdp2.py).
        episodes = [e for batch in algo.env_runner_group.foreach_env_runner(
            lambda runner: runner.sample(), local_env_runner=False) for e in batch]
        before = {k: torch.as_tensor(v).clone()
                  for k, v in reference.learner_group.get_weights()[DEFAULT_MODULE_ID].items()}
        for trainer in (algo, reference):
            trainer.update_learners(episodes)
        one = reference.learner_group.get_weights()[DEFAULT_MODULE_ID]
        two = algo.learner_group.get_weights()[DEFAULT_MODULE_ID]
        moved = max(float((torch.as_tensor(one[k]) - before[k]).abs().max()) for k in one)
        assert moved > 5e-4  # one Adam step at lr 1e-3
        for k in one:
            assert torch.allclose(torch.as_tensor(two[k]), torch.as_tensor(one[k]),
                                  atol=2e-5), k
        results = [algo.train() for _ in range(2)]
        runner_nodes = algo.env_runner_group.foreach_env_runner(
            lambda runner: ray.get_runtime_context().get_node_id(), local_env_runner=False)
        learner_nodes = [r.get() for r in algo.learner_group.foreach_learner(
            lambda learner: ray.get_runtime_context().get_node_id()).result_or_errors]
        # Each runner sampled with the learners' latest weights (version 3 after three updates).
        versions = algo.env_runner_group.foreach_env_runner(
            lambda runner: runner.engine.weight_version, local_env_runner=False)
        weights = {k: torch.as_tensor(v).clone()
                   for k, v in algo.learner_group.get_weights()[DEFAULT_MODULE_ID].items()}
        algo.save_to_path(tmp_path / "checkpoint")
    finally:
        algo.stop()
        reference.stop()
    assert sorted(runner_nodes) == sorted(learner_nodes) == sorted(two_nodes)
    assert versions == [3, 3]  # the comparison's update, then two iterations
    for result in results:
        learner = result["learners"][DEFAULT_MODULE_ID]
        assert learner["num_optimizer_steps"] == 1
        assert learner["num_module_steps_trained"] == 16  # 4 prompts x 4 responses, once

    # The checkpoint of two FSDP2 learners, a file of shards from each node, restores into one
    # torch learner in the driver (torch.distributed.checkpoint reads the shards whole).
    assert len(list((tmp_path / "checkpoint" / "learner_group" / "learner" / "fsdp2_shards")
                    .glob("*.distcp"))) == 2
    single = embedded_config("topr", seed=0, **SETTINGS).learners(num_learners=0).build_algo()
    try:
        single.restore_from_path(tmp_path / "checkpoint")
        restored = single.learner_group.get_weights()[DEFAULT_MODULE_ID]
        assert single.learner_group.foreach_learner(
            lambda learner: learner.weight_version()).result_or_errors[0].get() == 3
    finally:
        single.stop()
    for k, v in weights.items():
        assert torch.equal(torch.as_tensor(restored[k]), v), k
