"""test_fsdp2's clipping test, one gloo rank per process: a module of its own, so that a rank's
process imports torch and `fsdp2` only (the test module imports Ray and RLlib)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

from rllib_llm.learner import fsdp2

# Whole gradients of norms 6.0, 0.5 and 2.0 with elements beyond +-1.
CLIP_GRADS = [torch.full((4, 3), 6.0 / 12 ** 0.5), torch.tensor([[0.3, -0.4]]),
              torch.tensor([-1.2, 1.6, 0.0])]


def clip_on_rank(rank: int, store: str, out: str) -> None:
    """One of two gloo ranks: gradients as FSDP2 holds them (DTensors sharded on dim 0, one
    whose single row leaves rank 1 an empty shard, and one replicated), clipped to 1.0 by each
    rule; rank 0 saves them gathered whole."""
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        mesh = init_device_mesh("cpu", (2,))
        clipped = {}
        for by in ("value", "norm", "global_norm"):
            grads = [distribute_tensor(g.clone(), mesh, [Shard(0)]) for g in CLIP_GRADS[:2]]
            grads.append(distribute_tensor(CLIP_GRADS[2].clone(), mesh, [Replicate()]))
            fsdp2.clip_(grads, fsdp2.grad_norm(grads), 1.0, by=by)
            clipped[by] = [g.full_tensor() for g in grads]
        if rank == 0:
            torch.save(clipped, out)
    finally:
        dist.destroy_process_group()
