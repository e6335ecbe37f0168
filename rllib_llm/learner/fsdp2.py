"""FSDP2's pieces for the learner (`fsdp2_learner.py`): sharding a causal LM with torch's
`fully_shard`, its gradient norm over the shards, and its weights as a state dict gathered a
bucket at a time. Torch only: no Ray, so each piece is tested on plain processes.

`fully_shard` (torch.distributed.fsdp) turns every parameter of a module into a DTensor sharded
on dim 0 across a device mesh: each rank stores 1/world of each weight, its gradient and (since
the optimizer is built on the sharded parameters) Adam's moments. A sharded module all-gathers
its weights at the start of its forward and frees them at the end (and again for its backward),
so wrapping each decoder layer on its own bounds the weights held whole at one time to one layer
plus the root's (embeddings, final norm, LM head), as verl, torchtitan and TRL wrap them.
Gradients are reduce-scattered after each backward and averaged over ranks, as DDP's are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp import (
    FSDPModule,
    MixedPrecisionPolicy,
    fully_shard,
    register_fsdp_forward_method,
)
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from rllib_llm.learner.weight_buckets import weight_buckets
from rllib_llm.models import DTYPES

EMPTY = torch.empty(0)  # what a rank that keeps no copy holds for a weight it gathered


def mixed_precision(model_dtype: str) -> MixedPrecisionPolicy:
    """FSDP2's precision for `model_dtype`: float32 computes and reduces in float32 (nothing is
    cast); a 16-bit dtype computes in it over float32 sharded weights (the master copy Adam
    updates) and reduces gradients in float32 (verl's and torchtitan's default)."""
    if model_dtype == "float32":
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=DTYPES[model_dtype], reduce_dtype=torch.float32)


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated blocks: the modules whose class Hugging Face lists in
    `_no_split_modules` (what its own FSDP auto-wrap policy wraps) of the model or of a model
    it holds (a critic's trunk), outermost first."""
    names = {name for m in model.modules() for name in getattr(m, "_no_split_modules", None) or ()}
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"learner_strategy='fsdp2': {type(model).__name__} names no decoder layer class in "
            "_no_split_modules, so there is nothing to shard layer by layer; use "
            "learner_strategy='torch' or 'deepspeed'.")
    return layers


def shard_model(model: torch.nn.Module, mesh, *, model_dtype: str,
                forward_method: str | None = None, layers: bool = True,
                reshard_after_forward: bool = True) -> torch.nn.Module:
    """`fully_shard` each decoder layer (where `layers`), then the root (whatever the layers
    leave: embeddings, final norm, LM head, tied or not) over `mesh`; in place. The weights
    become float32 shards (the master weights a 16-bit `model_dtype` computes from:
    `mixed_precision`).

    `reshard_after_forward` (the config's fsdp_reshard_after_forward): whether each layer frees
    its gathered weights after its forward, to gather them again for its backward. The root
    keeps torch's choice either way: whole from its forward to its backward, which begins with
    it. A forward without a backward (scoring, a frozen model) leaves whatever was kept whole:
    `reshard` frees it.

    `forward_method`: the name under which the root gets a second forward, `fn -> fn()`
    registered with torch's `register_fsdp_forward_method`, for callers that run the trunk and
    the LM head apart (fused kernels, remove_padding, a value head on the trunk's states): FSDP2
    gathers the root's weights in a forward of the root only, and inside this one `fn` finds
    them whole, with their gradients reduce-scattered after its backward as after `forward`'s.
    """
    model.float()
    policy = mixed_precision(model_dtype)
    for layer in decoder_layers(model) if layers else ():
        fully_shard(layer, mesh=mesh, mp_policy=policy,
                    reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    if forward_method is not None:
        setattr(model, forward_method, _call)
        register_fsdp_forward_method(model, forward_method)
    return model


def reshards_after_forward(setting: bool | str, device: torch.device) -> bool:
    """fsdp_reshard_after_forward for a learner on `device`: 'auto' = on a GPU only. On a CPU
    each collective of gloo wakes both processes (about 2 ms on 2 busy cores), which a layer's
    second all-gather doubles, and host memory holds the whole model anyway."""
    return device.type != "cpu" if setting == "auto" else bool(setting)


def reshard_note(setting: bool | str, device: torch.device) -> str:
    """fsdp_reshard_after_forward as settled for a learner on `device`, for its build line."""
    auto = " (auto)" if setting == "auto" else ""
    return f"fsdp_reshard_after_forward={reshards_after_forward(setting, device)}{auto}"


def _call(fn: Callable[[], Any]) -> Any:
    return fn()


def reshard(model: torch.nn.Module) -> None:
    """Free every gathered weight of a sharded `model`, back to this rank's shards (nothing is
    communicated). FSDP2 frees a layer kept whole after its forward (and always the root) in
    the backward that follows; a no-grad forward (old and reference log-probs, values, a
    frozen reference or teacher) has none, and would leave them whole until the next."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def local_part(tensor: torch.Tensor) -> torch.Tensor:
    """What this rank stores of `tensor`: a DTensor's local shard, else the tensor."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def local_bytes(tensors) -> int:
    """Bytes this rank stores of `tensors` (each tensor counted once)."""
    seen = {id(t): local_part(t) for t in tensors if t is not None}
    return sum(t.numel() * t.element_size() for t in seen.values())


def _is_sharded(tensor: torch.Tensor) -> bool:
    return isinstance(tensor, DTensor) and any(isinstance(p, Shard) for p in tensor.placements)


def grad_norm(grads: list[torch.Tensor], device: torch.device | None = None) -> torch.Tensor:
    """The global L2 norm (float64) of the whole model's gradients from each rank's shards
    (collective: every rank calls it, with its list empty where no gradient was computed): each
    rank's sum of squares, all-reduced on `device` (default: the first gradient's). A gradient
    that is not sharded is the same on every rank and counted once."""
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    squares = torch.zeros((), dtype=torch.float64)
    for g in grads:
        if _is_sharded(g) or rank == 0:
            squares += local_part(g).detach().double().pow(2).sum().cpu()
    if world > 1:
        if device is None:
            device = local_part(grads[0]).device if grads else torch.device("cpu")
        squares = squares.to(device if dist.get_backend() == "nccl" else "cpu")
        dist.all_reduce(squares, op=dist.ReduceOp.SUM)
    return squares.cpu().sqrt()


def tensor_norms(grads: list[torch.Tensor], device: torch.device | None = None) -> torch.Tensor:
    """Each gradient's own L2 norm (n,) float64 over the shards (collective, as `grad_norm`):
    every rank's sums of squares of its shards, all-reduced in one vector."""
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    squares = torch.tensor([float(local_part(g).detach().double().pow(2).sum())
                            if _is_sharded(g) or rank == 0 else 0.0 for g in grads],
                           dtype=torch.float64)
    if world > 1:
        squares = squares.to(device if device is not None and dist.get_backend() == "nccl"
                             else "cpu")
        dist.all_reduce(squares, op=dist.ReduceOp.SUM)
    return squares.cpu().sqrt()


def clip_(grads: list[torch.Tensor], norm: torch.Tensor, max_norm: float | None, *,
          by: str = "global_norm", device: torch.device | None = None) -> None:
    """Clip the gradients (each rank its shards) by RLlib's rule `by` (`clip_gradients`), as it
    would clip the whole tensors: 'global_norm' scales them all so their global `norm` is at most
    `max_norm` (coefficient max_norm / max(norm + 1e-6, max_norm)); 'norm' scales each whose own
    norm (`tensor_norms`, collective) is over `max_norm` to it; 'value' clamps each element to
    [-max_norm, max_norm]. None = no clipping."""
    if max_norm is None:
        return
    if by == "value":
        for g in grads:
            local_part(g).detach().clamp_(-max_norm, max_norm)
    elif by == "norm":
        for g, own in zip(grads, tensor_norms(grads, device).tolist()):
            if own > max_norm:
                local_part(g).detach().mul_(max_norm / own)
    else:
        coefficient = min(max_norm / max(float(norm) + 1e-6, max_norm), 1.0)
        for g in grads:
            local_part(g).detach().mul_(coefficient)


class ShardedWeights:
    """A sharded module's weights as a state dict (`RLVRModule.partitioned`).

    Collective: every rank calls `state_dict` and `load` at once, with the same keys. Weights
    are gathered `bucket_bytes` at a time (`full_tensor()` per weight of the bucket), copied to
    the CPU on the first rank and dropped on the others before the next bucket, so no rank's
    device ever holds more of the model whole than a bucket (a larger weight is a bucket of its
    own). Tied weights stay one tensor.
    """

    def __init__(self, module: torch.nn.Module, *, bucket_bytes: int, first: bool) -> None:
        self.module, self.bucket_bytes, self.first = module, bucket_bytes, first

    def state_dict(self, include: Callable[[str], bool]) -> dict[str, torch.Tensor]:
        """The keys of `module.state_dict()` that `include` accepts, whole, on the first rank
        ({} on the others)."""
        out: dict[str, torch.Tensor] = {}
        copies: dict[int, torch.Tensor] = {}  # a tied weight is gathered where first met
        for bucket in self.buckets(include):
            for key, value in gathered(bucket, copies):
                if self.first:
                    out[key] = value
            if not self.first:
                copies = {k: EMPTY for k in copies}  # keep which were met, drop the tensors
        return out

    def load(self, tensors: Mapping[str, torch.Tensor]) -> tuple[list[str], list[str]]:
        """Overwrite the weights with `tensors` (whole, the same on every rank): each rank copies
        its own shard of each; nothing is communicated. Returns (missing keys, unexpected keys),
        as `load_state_dict(strict=False)` does."""
        own = self.module.state_dict(keep_vars=True)
        with torch.no_grad():
            for key, value in tensors.items():
                if key in own:
                    load_into(own[key], torch.as_tensor(value))
        return sorted(set(own) - set(tensors)), sorted(set(tensors) - set(own))

    def shards(self, prefix: str) -> dict[str, torch.Tensor]:
        """The weights whose keys start with `prefix`, the prefix cut, as this rank holds them:
        DTensors (a tied weight one DTensor under both keys), nothing gathered. A broadcast
        weight sync reads each bucket's rows of them from the ranks that own those rows
        (`exchange/weight_pieces.copy_rows`, a weight larger than a bucket in pieces of whole
        rows), so no rank holds a weight whole, let alone the model."""
        return {k[len(prefix):]: v for k, v in self.module.state_dict(keep_vars=True).items()
                if k.startswith(prefix)}

    def buckets(self, include: Callable[[str], bool]) -> Iterator[list[tuple[str, torch.Tensor]]]:
        """[(key, parameter or buffer)] runs of at most `bucket_bytes` of whole weights, in the
        state dict's order (a larger weight is a bucket of its own)."""
        yield from weight_buckets(_sized((k, v) for k, v in
                                         self.module.state_dict(keep_vars=True).items()
                                         if include(k)), self.bucket_bytes)


def _sized(items) -> Iterator[tuple[str, torch.Tensor, int]]:
    """(key, weight, whole bytes); a weight seen before under another key (tied) counts 0."""
    seen: set[int] = set()
    for key, value in items:
        yield key, value, 0 if id(value) in seen else value.numel() * value.element_size()
        seen.add(id(value))


def gathered(bucket: list[tuple[str, torch.Tensor]],
             copies: dict[int, torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """The bucket's weights whole, as CPU tensors (collective for sharded ones): each gathered
    once, however many keys name it; `copies` ({id: CPU copy}) holds those gathered for
    earlier buckets and takes this bucket's."""
    out = []
    for key, value in bucket:
        if id(value) not in copies:
            whole = value.full_tensor() if isinstance(value, DTensor) else value
            copies[id(value)] = whole.detach().to("cpu", copy=True)
        out.append((key, copies[id(value)]))
    return out


def load_into(target: torch.Tensor, whole: torch.Tensor) -> None:
    """Copy `whole` into `target`: into this rank's shard of a DTensor (cut locally, as
    `distribute_tensor` cuts it, without communication), else into the tensor."""
    if isinstance(target, DTensor):
        part = distribute_tensor(whole.to(target.device, target.dtype), target.device_mesh,
                                 target.placements, src_data_rank=None)
        target.to_local().copy_(part.to_local())
    else:
        target.copy_(whole)



def whole_state(tree, *, keep: bool):
    """A copy of a (nested) optimizer state with every DTensor whole on the CPU (collective:
    every rank walks the same state in the same order, one weight's state gathered at a time);
    with `keep` False (every rank but the first) the gathered tensors are dropped (None)."""
    if isinstance(tree, DTensor):
        whole = tree.full_tensor().detach().to("cpu", copy=True)
        return whole if keep else None
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu().clone()
    if isinstance(tree, dict):
        return {k: whole_state(v, keep=keep) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(whole_state(v, keep=keep) for v in tree)
    return tree


def sharded_optimizer_state(saved: Mapping, params: list[torch.Tensor]) -> dict:
    """A torch optimizer's state_dict of whole tensors (a torch learner's, or `whole_state`'s)
    cut for this rank: each per-parameter tensor shaped like its sharded parameter becomes this
    rank's shard of it (cut locally, as `load_into` cuts weights); scalars (Adam's step) stay."""
    state = {}
    for index, entry in saved["state"].items():
        param = params[int(index)]
        state[int(index)] = {key: _shard_like(param, value) for key, value in entry.items()}
    return {"state": state, "param_groups": saved["param_groups"]}


def _shard_like(param: torch.Tensor, value):
    value = torch.as_tensor(value)
    if not isinstance(param, DTensor) or tuple(value.shape) != tuple(param.shape):
        return value
    return distribute_tensor(value.to(param.device), param.device_mesh, param.placements,
                             src_data_rank=None)
