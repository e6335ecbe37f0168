"""A broadcast weight sync from FSDP2's sharded weights (`fsdp2.ShardedWeights.shards` into
`exchange/weight_broadcast.Sender`, what the FSDP2 learner's `broadcast_weights` sends): a torch
engine gets the learner's exact weights, and the sender never holds the model whole: its peak
extra memory is a bucket, where a sync from a whole state dict holds the model."""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import threading
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from rllib_llm.exchange import weight_broadcast as wb
from rllib_llm.learner import fsdp2

MIB = 2**20


def _mesh(store: Path):
    """A device mesh of this process alone (a gloo world of one, rendezvous at `store`)."""
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    return init_device_mesh("cpu", (1,))


def sharded(model: torch.nn.Module, store: Path) -> torch.nn.Module:
    """`model` sharded by FSDP2 over a world of one (this process), each child module and the
    root, as the FSDP2 learner shards decoder layers and root."""
    from torch.distributed.fsdp import fully_shard

    mesh = _mesh(store)
    for layer in model.children():
        fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def test_an_fsdp2_broadcast_sync_loads_the_learners_exact_weights_into_a_torch_engine(tmp_path):
    """The embedded model (2 MiB in float32, its LM head tied), sharded and moved away from the
    checkpoint the engine starts from, sent in 64 KiB buckets (about 30) to a torch engine
    receiving in another thread of this process."""
    from rllib_llm.models import load_model
    from rllib_llm.rollout.torch_engine import TorchRolloutEngine

    engine = TorchRolloutEngine(load_model("embedded"), eos_token_id=0, pad_token_id=0)
    model = load_model("embedded")
    fsdp2.shard_model(model, _mesh(tmp_path / "store"), model_dtype="float32")
    try:
        with torch.no_grad():
            for p in model.parameters():
                fsdp2.local_part(p).add_(0.01)
        weights = fsdp2.ShardedWeights(model, bucket_bytes=2**16, first=True)
        sender = wb.Sender("gloo", weights.shards(""), world_size=2, timeout_s=60,
                           bucket_bytes=2**16)
        joining = threading.Thread(target=sender.join)
        joining.start()
        engine.join_weight_broadcast(first_rank=1, **sender.address())
        joining.join()
        sending = threading.Thread(target=sender.send, args=(weights.shards(""), 5))
        sending.start()
        version = engine.receive_weights()
        sending.join()
        expected = weights.state_dict(lambda key: True)
    finally:
        dist.destroy_process_group()
    assert version == engine.weight_version == 5
    got = engine.model.state_dict()
    assert got.keys() == expected.keys()
    assert any(not torch.equal(v, load_model("embedded").state_dict()[k])
               for k, v in expected.items())  # the weights moved: the sync carried them
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name


def rss_mib(field: str) -> float:
    """VmRSS, or VmHWM: the peak since `reset_peak`, of this process (Linux), MiB."""
    status = Path("/proc/self/status").read_text()
    return int(re.search(rf"{field}:\s+(\d+)", status).group(1)) / 1024


def reset_peak() -> float:
    Path("/proc/self/clear_refs").write_text("5")
    return rss_mib("VmRSS")


def _send_and_measure(address_box, results, store: str) -> None:
    """The sending side in a process of its own, whose allocator returns every block of 64 KiB
    or more to the system when it is freed (MALLOC_MMAP_THRESHOLD_), so its peak RSS counts
    the bytes a sync holds at once: 48 MiB of sharded float32 weights (a 16 MiB embedding and
    eight 4 MiB layers) in 4 MiB buckets, sent streamed from the shards and then from a whole
    state dict (the learner's sync before)."""
    stack = sharded(torch.nn.Sequential(torch.nn.Embedding(4096, 1024),
                                        *[torch.nn.Linear(1024, 1024, bias=False)
                                          for _ in range(8)]), Path(store))
    weights = fsdp2.ShardedWeights(stack, bucket_bytes=4 * MIB, first=True)
    sender = wb.Sender("gloo", weights.shards(""), world_size=2, timeout_s=60,
                       bucket_bytes=4 * MIB)
    address_box.put(sender.address())
    sender.join()
    sender.send(weights.shards(""), version=0)  # gloo's first broadcast sets up its buffers
    peaks = {}
    before = reset_peak()
    sender.send(weights.shards(""), version=1)
    peaks["streamed"] = rss_mib("VmHWM") - before
    before = reset_peak()
    whole = weights.state_dict(lambda key: True)
    sender.send(whole, version=2)
    peaks["from a whole state dict"] = rss_mib("VmHWM") - before
    del whole
    dist.destroy_process_group()
    results.put(peaks)


def test_the_fsdp2_sender_holds_a_bucket_not_the_model(tmp_path):
    ctx = mp.get_context("spawn")
    address_box, results = ctx.Queue(), ctx.Queue()
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(2**16)  # the child's allocator: see above
    try:
        child = ctx.Process(target=_send_and_measure,
                            args=(address_box, results, str(tmp_path / "store")))
        child.start()
    finally:
        del os.environ["MALLOC_MMAP_THRESHOLD_"]
    receiver = wb.Receiver(rank=1, device="cpu", **address_box.get(timeout=120))
    counts = []
    for _ in range(3):
        _, tensors = receiver.receive()
        counts.append(sum(1 for _ in tensors))
    peaks = results.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0
    assert counts == [9, 9, 9]
    print(f"sender's peak extra MiB (model 48, embedding 16, bucket 4): {peaks}")
    # A bucket (4 MiB) and slack, not the embedding (16 MiB): it travels in 4 pieces of 1024
    # rows, each read from the shards into its bucket.
    assert peaks["streamed"] <= 6, peaks
    assert peaks["from a whole state dict"] >= 48, peaks


@pytest.mark.slow  # a learner actor and an env runner: outside test-fast
@pytest.mark.usefixtures("ray_session")  # tests/conftest.py
def test_an_fsdp2_learner_broadcasts_its_shards_to_the_env_runners():
    """learner_strategy='fsdp2' with weight_sync_backend='gloo' end to end: two updates, each
    synced by broadcast from the learner's shards; the runner's engine holds the learner's
    weights and version."""
    from ray.rllib.core import DEFAULT_MODULE_ID

    from rllib_llm.recipes.embedded import embedded_config

    algo = (embedded_config("topr", rollout_batch_size=2, num_return_sequences_in_group=2,
                            response_length=4, learner_strategy="fsdp2")
            .learners(num_learners=1)
            .env_runners(num_env_runners=1, weight_sync_backend="gloo",
                         weight_sync_bucket_bytes=2**16, weight_sync_timeout_s=120)
            .build_algo())
    try:
        for _ in range(2):
            algo.train()
        members = algo.direct_sync.members
        learner = {k: torch.as_tensor(v) for k, v in
                   algo.learner_group.get_weights()[DEFAULT_MODULE_ID].items()}
        ((version, runner),) = algo.env_runner_group.foreach_env_runner(
            lambda r: (r.engine.weight_version,
                       {k: v.clone() for k, v in r.engine.model.state_dict().items()}),
            local_env_runner=False)
    finally:
        algo.stop()
    assert members == [1]  # the group was built and every sync went over it
    assert version == 2
    for name, tensor in runner.items():
        assert torch.equal(tensor, learner[f"model.{name}"]), name


def test_an_fsdp2_learner_refuses_cuda_ipc_in_one_line():
    """Its parameters are shards: there is nothing whole to hand engines in place."""
    from rllib_llm.learner.fsdp2_learner import FSDP2RLVRLearner

    with pytest.raises(ValueError, match=(
            "^weight_sync_backend='cuda_ipc' shares the learner's parameters in place, and "
            "learner_strategy='fsdp2' holds them as shards. Use weight_sync_backend='nccl' "
            "\\(gathered a bucket at a time\\) or 'object_store'.$")):
        FSDP2RLVRLearner.share_weights(None)  # refused before it reads the learner
