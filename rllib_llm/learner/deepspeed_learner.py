"""learner_strategy='deepspeed': RLVRLearner on a DeepSpeed ZeRO-2 or ZeRO-3 engine (the
deepspeed extra; the only module that imports DeepSpeed).

Each of RLlib's learner actors is one ZeRO rank of the process group RLlib's learner group
already set up (gloo on CPU, NCCL on GPUs). The optimizer RLlib registered (torch Adam, with
RLlib's learning-rate schedule writing its param groups) becomes the one DeepSpeed partitions:
each rank keeps 1/world of Adam's moments and of the fp32 master weights. Under ZeRO-2 each
rank keeps the full weights; under ZeRO-3 it keeps 1/world of them too (the reference model's
included), and DeepSpeed's hooks gather a layer's weights for each forward and backward. Batches,
shares and normalisers are the DDP learners' (`data_parallel.py`): every rank runs the same
number of forward passes (equal shares of whole prompt groups), as ZeRO-3's gathers need, and
the update is the one-learner update (tested). DeepSpeed clips by the global norm (grad_clip)
and skips a step whose gradient is not finite; a non-finite loss skips it before any reduction.
`offload_optimizer` and `offload_param` are DeepSpeed's CPU offload.

State is gathered by every rank together (`RLVRLearnerGroup.get_state` asks them all; the first
rank returns it). Checkpoints hold what a torch learner's hold — the full weights and, per
parameter, torch Adam's state — so they restore into either kind of learner; a restore scatters
them back into the partitions and refreshes the fp32 master weights. Under ZeRO-3 the weights of
a sync or checkpoint are gathered `weight_sync_bucket_bytes` at a time (`PartitionedWeights`):
the whole model exists once, as the first rank's CPU copy, never whole on any rank's device.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist
from ray.rllib.core import COMPONENT_OPTIMIZER, COMPONENT_RL_MODULE, DEFAULT_MODULE_ID

from rllib_llm.learner.adam_kernel import use_configured_kernel
from rllib_llm.learner.deepspeed_config import deepspeed_config
from rllib_llm.learner.learner import (
    GRAD_NORM,
    RLVRLearner,
    tensor_state_bytes,
)
from rllib_llm.learner.module import RUN_IN_FORWARD
from rllib_llm.learner.weight_buckets import weight_buckets

INSTALL_HINT = ("DS_BUILD_OPS=0 pip install --no-build-isolation 'rllib_llm[deepspeed]' "
                "(with torch installed first)")
_ADAM_MOMENTS = ("exp_avg", "exp_avg_sq")


class PartitionedWeights:
    """A ZeRO-3 module's weights as a state dict (`RLVRModule.partitioned`).

    Collective: every rank calls `state_dict` and `load` at once. Weights are gathered
    `bucket_bytes` at a time, so a rank's device never holds the whole model; the first rank
    keeps a CPU copy of each bucket (tied weights stay one tensor), the others keep nothing.
    """

    def __init__(self, module: torch.nn.Module, *, bucket_bytes: int, first: bool) -> None:
        self.module, self.bucket_bytes, self.first = module, bucket_bytes, first

    def state_dict(self, include: Callable[[str], bool]) -> dict[str, torch.Tensor]:
        """The keys of `module.state_dict()` that `include` accepts, whole, on the first rank
        ({} on the others)."""
        import deepspeed

        out: dict[str, torch.Tensor] = {}
        copies: dict[int, torch.Tensor] = {}
        for bucket in self.buckets(include):
            params = [p for _, p in bucket if hasattr(p, "ds_id")]
            with deepspeed.zero.GatheredParameters(_unique(params), modifier_rank=None):
                if self.first:
                    for key, value in bucket:
                        if id(value) not in copies:
                            copies[id(value)] = value.detach().to("cpu", copy=True)
                        out[key] = copies[id(value)]
        return out

    def load(self, tensors: Mapping[str, torch.Tensor]) -> tuple[list[str], list[str]]:
        """Overwrite the weights with `tensors` (the same on every rank): each bucket is
        gathered, written on the first rank and partitioned again from it. Returns
        (missing keys, unexpected keys), as `load_state_dict(strict=False)` does."""
        import deepspeed

        names = set(self.module.state_dict(keep_vars=True))
        for bucket in self.buckets(lambda key: key in tensors):
            params = [p for _, p in bucket if hasattr(p, "ds_id")]
            with deepspeed.zero.GatheredParameters(_unique(params), modifier_rank=0), \
                    torch.no_grad():
                for key, value in bucket:
                    if self.first or not hasattr(value, "ds_id"):  # buffers: on every rank
                        value.data.copy_(tensors[key])
        return sorted(names - set(tensors)), sorted(set(tensors) - names)

    def buckets(self, include: Callable[[str], bool]):
        """The gathers of `state_dict` and `load`: [(key, parameter or buffer)] runs of at most
        `bucket_bytes` of weights (their full, unpartitioned size), in order, of the keys that
        `include` accepts (a larger weight is a bucket of its own). Local: gathers nothing."""
        yield from weight_buckets(
            ((key, value, getattr(value, "ds_numel", value.numel()) * value.element_size())
             for key, value in self.module.state_dict(keep_vars=True).items() if include(key)),
            self.bucket_bytes)


def _skip_shared_memory_all_reduce() -> None:
    """Keep DeepSpeed from compiling its shared-memory all-reduce when it starts its process group.

    On a CPU, DeepSpeed's communication backend JIT-compiles a C++ op (`deepspeed_shm_comm`) as it
    starts, whenever the op is marked compatible: 60-140 s on 2 cores the first time on each
    machine (measured in `make test`), and a C++ compiler required. Only `inference_all_reduce`
    (tensor-parallel inference) uses it; ZeRO's reductions here go through torch.distributed
    (gloo or NCCL), so marking it incompatible changes no update. DeepSpeed caches the probed
    table in `deepspeed.ops`, and edits to it persist (deepspeed/ops/__init__.py)."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def _unique(params: list[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
    return list({id(p): p for p in params}.values())


class DeepSpeedRLVRLearner(RLVRLearner):
    def _make_modules_ddp_if_necessary(self) -> None:
        """No DDP wrapper: the DeepSpeed engine reduces the gradients."""

    def build(self) -> None:
        super().build()
        try:
            import deepspeed
        except ImportError as e:
            raise ImportError(f"learner_strategy='deepspeed' needs DeepSpeed: {INSTALL_HINT}") \
                from e
        _skip_shared_memory_all_reduce()
        # DeepSpeed places the engine on device LOCAL_RANK: the one RLlib gave this learner.
        device = torch.device(self._device)
        os.environ.setdefault("LOCAL_RANK", str(device.index or 0))
        (self._ds_optimizer_name, optimizer), = self._named_optimizers.items()
        module = self.module[DEFAULT_MODULE_ID]
        trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
        self._engine, *_ = deepspeed.initialize(
            model=module, optimizer=optimizer, config=deepspeed_config(self.config, trainable),
            dist_init_required=False)
        self._first = dist.get_rank() == 0
        # Every forward runs inside the engine's, where DeepSpeed's per-forward work starts.
        module.forward_via = lambda fn: self._engine({}, **{RUN_IN_FORWARD: fn})
        if self.config.zero_stage == 3:
            module.partitioned = PartitionedWeights(
                module, bucket_bytes=self.config.weight_sync_bucket_bytes, first=self._first)

    @property
    def deepspeed_engine(self):
        """The DeepSpeed engine around the module: it runs the forwards and backwards and
        steps its ZeRO optimizer (`.optimizer`), which keeps this rank's partition of the fp32
        master weights and of Adam's state."""
        return self._engine

    def _forward_train(self, micro: dict[str, torch.Tensor]) -> dict[str, Any]:
        return {DEFAULT_MODULE_ID: self._engine(micro)}  # the module's forward_train

    def _gradient_sync(self, *, last: bool):
        return contextlib.nullcontext()  # gradients are reduced in `step()`, the boundary

    def _backward(self, loss: torch.Tensor) -> None:
        self._engine.backward(loss, scale_wrt_gas=False)

    def _apply_step(self, step: dict[str, float], total: torch.Tensor, *,
                    pretraining: bool) -> dict[str, float]:
        engine = self._engine  # (no critic here: pretraining is always False)
        if not torch.isfinite(total):  # the same on every rank: the loss is all-reduced
            engine.zero_grad()
            self._count_nonfinite_step(float(total), float("nan"))
            return step
        engine.step()
        norm = engine.get_global_grad_norm()
        norm = float("nan") if norm is None else float(norm)
        if getattr(engine.optimizer, "overflow", False):  # DeepSpeed skipped it
            self._count_nonfinite_step(float(total), norm)
        else:
            self._nonfinite_in_a_row = 0
        step[GRAD_NORM] = norm
        return step

    # --- state: gathered by every rank together (RLVRLearnerGroup.get_state) -----------------
    def get_state(self, components=None, *, not_components=None, **kwargs):
        """Collective: every learner at once. The first rank returns the state, gathered from
        all partitions; the others return None."""
        state = super().get_state(components, not_components=not_components, **kwargs)
        return state if self._first else None

    def set_state(self, state: dict[str, Any]) -> None:
        """Collective under ZeRO-3. Restored weights become the fp32 master weights (otherwise
        the next step would update the old ones), once, after the weights and Adam's state are
        in (a checkpoint restore sets the module first, then the rest)."""
        super().set_state(state)
        if COMPONENT_RL_MODULE in state or COMPONENT_OPTIMIZER in state:
            self._engine.optimizer.refresh_fp32_params()

    def optimizer_state_bytes(self) -> int:
        """This rank's partition of the optimizer's state (DeepSpeed's wrapped optimizer)."""
        return tensor_state_bytes([self._engine.optimizer.optimizer.state])

    def _params_in_order(self) -> list[torch.nn.Parameter]:
        """The optimizer's parameters in RLlib's order (the order of a torch Adam state_dict)."""
        optimizer = self._named_optimizers[self._ds_optimizer_name]
        return list(self._optimizer_parameters[optimizer])

    def _get_optimizer_state(self) -> dict[str, Any]:
        """torch Adam's per-parameter state, gathered from the partitions (collective)."""
        from deepspeed.utils import safe_get_full_optimizer_state

        inner = self._engine.optimizer.optimizer  # the torch Adam over the flat partitions
        steps = {float(s["step"]) for s in inner.state.values() if "step" in s}
        state, params = {}, self._params_in_order()
        for i, param in enumerate(params):
            moments = {key: safe_get_full_optimizer_state(param, key) for key in _ADAM_MOMENTS}
            if any(m is None for m in moments.values()) or not self._first:
                continue  # no step taken yet, or another rank keeps it
            state[i] = {"step": torch.tensor(max(steps)),
                        **{k: m.detach().cpu().clone() for k, m in moments.items()}}
        group = {k: v for k, v in inner.param_groups[0].items() if k != "params"}
        group["params"] = list(range(len(params)))
        return {self._ds_optimizer_name: {"module_id": DEFAULT_MODULE_ID,
                                          "state": {"state": state, "param_groups": [group]}}}

    def _set_optimizer_state(self, state: dict[str, Any]) -> None:
        """A torch Adam state_dict (from either kind of learner) into this rank's partition
        (`set_state` then refreshes the fp32 master weights)."""
        from deepspeed.utils import safe_set_full_optimizer_state

        saved = state[self._ds_optimizer_name]["state"]
        params = self._params_in_order()
        zero = self._engine.optimizer
        inner = zero.optimizer
        # ZeRO-3 lists its flat partitions in the param groups only during a step.
        flats = zero.fp32_partitioned_groups_flat if self.config.zero_stage == 3 else \
            [flat for group in inner.param_groups for flat in group["params"]]
        for flat in flats:  # torch Adam creates its state at the first step
            if flat not in inner.state:
                inner.state[flat] = {"step": torch.tensor(0.0),
                                     **{k: torch.zeros_like(flat) for k in _ADAM_MOMENTS}}
        if self.config.zero_stage == 2:
            # Each parameter's view into the partition's state (linked at the first step).
            zero._lazy_init_hp_params_optimizer_state()
        for i, param in enumerate(params):
            entry = saved["state"].get(i, saved["state"].get(str(i)))
            if entry is None:
                continue
            for key in _ADAM_MOMENTS:
                safe_set_full_optimizer_state(param, torch.as_tensor(entry[key]), key)
        steps = [e["step"] for e in saved["state"].values()]
        for flat_state in inner.state.values():
            if steps and "step" in flat_state:
                flat_state["step"] = torch.as_tensor(steps[0]).clone().to(
                    flat_state["step"].dtype)
        for group, saved_group in zip(inner.param_groups, saved["param_groups"]):
            group.update({k: v for k, v in saved_group.items() if k != "params"})
        use_configured_kernel(inner, bool(self.config.fused_optimizer))
