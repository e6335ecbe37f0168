"""Weight sync by CUDA IPC: an engine on the learner's GPU reads the learner's weights in place.

When the learner and an env runner's engine share one GPU (a local learner and a runner at a
fraction of the same GPU: the one-GPU layout), the object-store sync copies every weight from
the GPU to host memory, pickles it, and copies it back to the same GPU in the runner. Instead
the learner hands each runner CUDA IPC handles to its weight tensors (a few hundred bytes each,
through the Ray call that asks for the sync) and the runner copies device to device, casting to
its own dtype. This is the mechanism of Ray Direct Transport's CUDA_IPC transport and of verl's
and OpenRLHF's colocated sync (torch's own `reduce_tensor`); RDT itself cannot carry it here:
its CUDA_IPC objects come from an actor with Ray-assigned GPUs (`ray.get_gpu_ids()`), and a local
learner lives in the driver, while RLlib's remote learners are Ray Train workers that RLlib
creates without `enable_tensor_transport`.

Nothing is copied on the learner's side: the handles point at the weights themselves, which
must stay unchanged until every runner has copied them (the driver waits for every runner before
the next update) and alive (they are the learner's parameters: a LoRA learner's merged weights
or ZeRO-3's gathered ones would be fresh tensors, freed on return, so those are refused).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from rllib_llm.exchange.weight_broadcast import layout_of

# The position of the device index in `rebuild_cuda_tensor`'s arguments (what `reduce_tensor`
# returns for a CUDA tensor; torch/multiprocessing/reductions.py), rewritten per receiver: each
# process numbers only the GPUs it sees.
_DEVICE_ARG = 6


@dataclass(frozen=True)
class SharedTensor:
    """One storage of the learner's weights: the names it is delivered under (a tied head's
    aliases too) and the arguments `rebuild_cuda_tensor` opens it with."""

    names: tuple[str, ...]
    handle: tuple


@dataclass(frozen=True)
class SharedWeights:
    """One version of the learner's weights, as CUDA IPC handles on the GPU named by
    `device_uuid` (the same physical GPU has another index in each process)."""

    version: int
    device_uuid: str
    tensors: tuple[SharedTensor, ...]


def device_uuid(device: torch.device | int) -> str:
    """The GPU's UUID, the name of a physical GPU that every process agrees on."""
    return str(torch.cuda.get_device_properties(device).uuid)


def visible_uuids() -> list[str]:
    """UUIDs of the GPUs this process sees, by its own device index."""
    if not torch.cuda.is_available():
        return []
    return [device_uuid(i) for i in range(torch.cuda.device_count())]


def index_of(uuid: str, visible: list[str]) -> int:
    """This process's index of the GPU `uuid`; a clear error where it cannot see that GPU."""
    if uuid in visible:
        return visible.index(uuid)
    raise ValueError(
        f"weight_sync_backend='cuda_ipc' needs each engine on the learner's GPU ({uuid}), and "
        f"this env runner sees {visible or 'no GPU'}. Place the learner and the runners on one "
        "GPU (e.g. num_gpus_per_learner=0.5, num_gpus_per_env_runner=0.5 on a one-GPU node), "
        "or use weight_sync_backend='nccl' for engines on GPUs of their own."
    )


def share(state_dict: dict[str, torch.Tensor], version: int) -> SharedWeights:
    """CUDA IPC handles to `state_dict`'s tensors, each storage once. They must outlive every
    receiver's copy: pass tensors that live on (a model's own state dict).

    Raises ValueError unless every tensor is on one CUDA device.
    """
    from torch.multiprocessing.reductions import rebuild_cuda_tensor, reduce_tensor

    devices = {t.device for t in state_dict.values()}
    if len(devices) != 1 or next(iter(devices)).type != "cuda":
        raise ValueError(
            f"weight_sync_backend='cuda_ipc' shares weights that live on one GPU; the learner's "
            f"are on {sorted(map(str, devices))}. Give the learner a GPU "
            "(num_gpus_per_learner > 0), or use weight_sync_backend='object_store'."
        )
    device = next(iter(devices))
    tensors = []
    for spec in layout_of(state_dict):
        tensor = state_dict[spec.name].detach()  # a plain tensor, not a Parameter, rebuilt
        rebuild, handle = reduce_tensor(tensor)
        if rebuild is not rebuild_cuda_tensor:  # a sparse or nested tensor: not a weight here
            raise ValueError(f"cuda_ipc: {spec.name} is not a dense CUDA tensor")
        tensors.append(SharedTensor((spec.name, *spec.aliases), handle))
    return SharedWeights(int(version), device_uuid(device), tuple(tensors))


def open_shared(shared: SharedWeights) -> Iterator[tuple[str, torch.Tensor]]:
    """The learner's tensors as `(name, tensor)` pairs, read in place on this process's index
    of the learner's GPU. Use them before the learner's next update (they are its weights)."""
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    index = index_of(shared.device_uuid, visible_uuids())
    for entry in shared.tensors:
        args = list(entry.handle)
        args[_DEVICE_ARG] = index
        tensor = rebuild_cuda_tensor(*args)  # waits on the learner's last write (its event)
        for name in entry.names:
            yield name, tensor
