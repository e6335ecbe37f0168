"""Sharded checkpoints of a learner's module weights and Adam's state, written and read with
torch.distributed.checkpoint (DCP), as torchtitan and verl checkpoint FSDP2.

FSDP2 learners `save` them: each learner writes its own shards (a `.distcp` file each, plus the
metadata saying which slice of which weight each holds), nothing gathered. Any learner `load`s
them: DCP reads into whatever the reader's state dict holds, so FSDP2 learners of another count
each take their slices of the saved shards (the DTensors of their own mesh), and a torch learner
in one process takes every weight whole. The state dicts are torch's own
(`torch.distributed.checkpoint.state_dict`): weights and Adam's state keyed by parameter name,
the same for a sharded and a plain module, so they match across strategies.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


def save(module: torch.nn.Module, optimizers: list[torch.optim.Optimizer],
         directory: str, *, skip: tuple[str, ...] = ()) -> None:
    """Write `module`'s weights and `optimizers`' state into `directory` (collective across the
    process group when there is one: every rank writes its shards), but for the submodules
    named in `skip` (a frozen model loaded from elsewhere: RLVRModule's teacher)."""
    weights, adam = get_state_dict(module, optimizers)
    dcp.save({"model": _without(weights, skip), "optim": adam}, checkpoint_id=directory)


def load(module: torch.nn.Module, optimizers: list[torch.optim.Optimizer],
         directory: str, *, skip: tuple[str, ...] = ()) -> None:
    """Overwrite `module`'s weights and `optimizers`' state with those `save` wrote in
    `directory` by any number of ranks (collective when a process group is set up: every rank
    reads its part; without one, this process reads them all); the submodules named in `skip`
    keep theirs."""
    weights, adam = get_state_dict(module, optimizers)
    state = {"model": _without(weights, skip), "optim": adam}
    dcp.load(state, checkpoint_id=directory, no_dist=not dist.is_initialized())
    # The skipped weights are the module's own tensors: setting them changes nothing.
    set_state_dict(module, optimizers, model_state_dict={**weights, **state["model"]},
                   optim_state_dict=state["optim"])


def _without(weights: dict, skip: tuple[str, ...]) -> dict:
    return {k: v for k, v in weights.items() if k.split(".", 1)[0] not in skip}
