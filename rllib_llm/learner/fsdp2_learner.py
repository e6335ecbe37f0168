"""learner_strategy='fsdp2': RLVRLearner on a model sharded by PyTorch's `fully_shard` (FSDP2)
across the learners.

Each of RLlib's learner actors is one rank of the process group RLlib's learner group already
set up (gloo on CPU, NCCL on GPUs); the learners' device mesh is that group. Once RLlib has built
the module on the learner's device, each of its models (the policy, and a frozen reference model,
a distillation teacher, a critic where it holds them; a value head as one unit) is sharded layer
by layer (`fsdp2.shard_model`) before the optimizer is built, so Adam's moments are created on
the shards: each learner holds 1/world of the weights, gradients and optimizer state. With LoRA
the adapters are sharded with the frozen base they sit in, and only they train. Fused kernels,
remove_padding and a value head call a model's trunk and LM head apart, outside its forward
(where FSDP2 gathers the root's weights: embeddings, final norm, LM head): they run inside a
second forward registered on each sharded model (`RLVRModule`'s `in_own_forward`). Batches, shares
and normalisers are the DDP learners' (`data_parallel.py`): every rank runs the same number of
forward passes (equal shares of whole prompt groups, `micro_batches.split`'s `min_count`), as the
all-gathers of each layer's forward need, and FSDP2 averages the gradients as DDP does, so the
update is the one-learner update (tested). The gradient norm is the whole model's, summed from
every rank's shards (`fsdp2.grad_norm`), and clipping scales each rank's shards by it (the
actor's and a critic's each by its own, as the torch learner clips per optimizer); grad_clip_by
'norm' by each tensor's own norm over the shards, 'value' element by element.

State is gathered by every rank together (`RLVRLearnerGroup.get_state` asks them all; the first
rank returns it): weight syncs gather `weight_sync_bucket_bytes` at a time
(`fsdp2.ShardedWeights`), so no rank holds more than a bucket of the model whole besides the
first rank's CPU copy that RLlib's object-store sync sends. A broadcast sync (weight_sync_backend
'gloo' or 'nccl', one learner) makes no such copy: the sender reads each bucket's rows from the
shards (a weight larger than a bucket in pieces of whole rows) and frees the bucket once
broadcast, each with its checksum, so a sync's extra memory is one bucket, not the model nor its
largest weight (`benchmarks/memory/weight_sync_memory.py`).
Checkpoints (`RLVR.save_to_path` to a local path) are sharded: RLlib's files without the
module's weights and Adam's state, and each learner's shards of those written with
torch.distributed.checkpoint beside them (`save_shards`), read back by every learner in
`restore_from_path`. A state asked for in memory
(`get_state`, or a save to another filesystem) is gathered whole instead, in torch Adam's format,
so it restores into a torch learner too.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch
import torch.distributed as dist
from ray.rllib.core import DEFAULT_MODULE_ID
from torch.distributed.device_mesh import init_device_mesh

from rllib_llm.learner import fsdp2, shards
from rllib_llm.learner.adam_kernel import number_lr, use_configured_kernel
from rllib_llm.learner.learner import (
    CRITIC_GRAD_NORM,
    GRAD_NORM,
    RLVRLearner,
)
from rllib_llm.learner.module import (
    CRITIC,
    MODEL,
    REFERENCE,
    TEACHER,
    VALUE_HEAD,
)
from rllib_llm.learner.sharded_hooks import IN_OWN_FORWARD, RELEASE_GATHERED

# The models of an RLVRModule that FSDP2 learners shard layer by layer, each with the second
# forward its trunk and heads run in when called apart (`RLVRModule`'s `in_own_forward`).
SHARDED_MODELS = (MODEL, REFERENCE, TEACHER, CRITIC)


class FSDP2RLVRLearner(RLVRLearner):
    # Adam over DTensors dispatches each op through DTensor: one tensor at a time (torch's
    # choice on a CPU) took 26 ms of a 95 ms update of the embedded model, against 4 ms for DDP's
    # plain tensors; foreach dispatches each op once over all of them (the same update, bitwise).
    ADAM_FOREACH = True

    @staticmethod
    def _set_optimizer_lr(optimizer: torch.optim.Optimizer, lr) -> None:
        """RLlib's lr (each step of a schedule too), as a number for the foreach kernel."""
        number_lr(optimizer, lr)

    def _make_modules_ddp_if_necessary(self) -> None:
        """No DDP wrapper: FSDP2 reduce-scatters the gradients in each backward."""

    def _make_module(self):
        """RLlib's module on this learner's device, its models sharded before `build`
        configures the optimizer on their parameters (the shards, from then on)."""
        multi = super()._make_module()
        module = multi[DEFAULT_MODULE_ID]
        device = torch.device(self._device)
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        reshard = self._reshards_after_forward()
        for name in SHARDED_MODELS:
            if hasattr(module, name):
                model = fsdp2.shard_model(getattr(module, name), mesh,
                                          model_dtype=self.config.model_dtype,
                                          forward_method=IN_OWN_FORWARD,
                                          reshard_after_forward=reshard)
                setattr(model, RELEASE_GATHERED, functools.partial(fsdp2.reshard, model))
        if hasattr(module, VALUE_HEAD):  # a Linear on the policy's trunk: no layers, a forward
            fsdp2.shard_model(module.value_head, mesh, model_dtype=self.config.model_dtype,
                              layers=False)
        module.partitioned = fsdp2.ShardedWeights(
            module, bucket_bytes=self.config.weight_sync_bucket_bytes,
            first=dist.get_rank() == 0)
        return multi

    def _reshards_after_forward(self) -> bool:
        """fsdp_reshard_after_forward for this learner's device ('auto': on a GPU only)."""
        return fsdp2.reshards_after_forward(self.config.fsdp_reshard_after_forward,
                                            torch.device(self._device))

    def _strategy_note(self) -> str:
        """The build line's note: fsdp_reshard_after_forward as settled for this device."""
        return fsdp2.reshard_note(self.config.fsdp_reshard_after_forward,
                                  torch.device(self._device))

    def _update(self, batch: dict[str, Any], **kwargs):
        """The update, then every model back to its shards: the scoring passes before it (old
        and reference log-probs, values) gathered weights that no backward freed, and a frozen
        model has none (`fsdp2.reshard`)."""
        try:
            return super()._update(batch, **kwargs)
        finally:
            fsdp2.reshard(self.module[DEFAULT_MODULE_ID])

    @contextlib.contextmanager
    def _gradient_sync(self, *, last: bool):
        """Where each layer stays whole through its forward and backward
        (fsdp_reshard_after_forward False), the gradients stay whole through a step as well:
        every micro-batch's backward but the last adds to them without communicating (torch's
        `set_requires_gradient_sync(False)`, as DDP's `no_sync`), and the last one's
        reduce-scatters their sum once, summed in DDP's order. Otherwise every micro-batch's
        backward reduce-scatters its own."""
        module = self.module[DEFAULT_MODULE_ID]
        accumulate = not last and not self._reshards_after_forward()
        models = [getattr(module, name) for name in (*SHARDED_MODELS, VALUE_HEAD)
                  if accumulate and hasattr(module, name)]
        for model in models:
            model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            for model in models:
                model.set_requires_gradient_sync(True)

    def _apply_step(self, step: dict[str, float], total: torch.Tensor, *,
                    pretraining: bool) -> dict[str, float]:
        """Clip each optimizer's gradients by their whole norm (the actor's, and with a critic
        the critic's, each summed from every rank's shards, as the torch learner clips per
        optimizer) and step each rank's shards, or skip a non-finite step on every rank alike
        (the loss and the norms are all-reduced). Value pretraining keeps the critic's alone."""
        actor, critic = [], []
        for pid, p in self._params.items():
            if pretraining and pid not in self._critic_refs:
                p.grad = None  # the actor stays frozen, a shared trunk included
            elif p.grad is not None:
                (critic if pid in self._critic_refs else actor).append(p.grad)
        device = torch.device(self._device)  # where NCCL all-reduces the norms
        actor_norm = fsdp2.grad_norm(actor, device)
        critic_norm = fsdp2.grad_norm(critic, device) if self._has_critic else torch.zeros(())
        if not (torch.isfinite(total) and torch.isfinite(actor_norm)
                and torch.isfinite(critic_norm)):
            self._skip_nonfinite_step(float(total), float(actor_norm + critic_norm))
        else:
            self._nonfinite_in_a_row = 0
            clip = dict(by=self.config.grad_clip_by, device=device)
            fsdp2.clip_(actor, actor_norm, self.config.grad_clip, **clip)
            fsdp2.clip_(critic, critic_norm, self.config.grad_clip, **clip)
            for optim in self._optimizer_parameters:
                optim.step()
        if not pretraining:
            step[GRAD_NORM] = float(actor_norm)
        if self._has_critic:
            step[CRITIC_GRAD_NORM] = float(critic_norm)
        return step

    def get_state(self, components=None, *, not_components=None, **kwargs):
        """Collective: every learner at once. The first rank returns the state, gathered from
        all shards; the others return None."""
        state = super().get_state(components, not_components=not_components, **kwargs)
        return state if dist.get_rank() == 0 else None

    def _policy_weights(self) -> dict[str, torch.Tensor]:
        """The policy's sharded weights under their Hugging Face names, as DTensors: what a
        broadcast sync (`open_weight_broadcast`, `broadcast_weights`) reads, each bucket's rows
        from the ranks that own them (`exchange/weight_pieces.py`). With LoRA adapters, the merged
        weights, gathered whole (merging needs each base weight with its adapters)."""
        if self.config.lora_rank:
            return super()._policy_weights()
        return self.module[DEFAULT_MODULE_ID].partitioned.shards(f"{MODEL}.")

    def share_weights(self):
        """Refused: CUDA IPC hands engines the learner's parameters in place, and an FSDP2
        learner's are shards; the whole weights would be fresh tensors, freed before a runner
        could read them."""
        raise ValueError(
            "weight_sync_backend='cuda_ipc' shares the learner's parameters in place, and "
            "learner_strategy='fsdp2' holds them as shards. Use weight_sync_backend='nccl' "
            "(gathered a bucket at a time) or 'object_store'.")

    def optimizer_state_bytes(self) -> int:
        """This rank's shards of the optimizer's state (Adam's moments)."""
        return fsdp2.local_bytes(t for _, optim in
                                 self.get_optimizers_for_module(DEFAULT_MODULE_ID)
                                 for per_param in optim.state.values()
                                 for t in per_param.values()
                                 if isinstance(t, torch.Tensor) and t.dim() > 0)

    def _get_optimizer_state(self) -> dict[str, Any]:
        """torch Adam's state_dict, each moment gathered whole from the shards, one weight at a
        time (collective); the first rank keeps it, so a checkpoint holds what a torch
        learner's holds and restores into either kind of learner."""
        first = dist.get_rank() == 0
        return {name: {"module_id": self._optimizer_name_to_module[name],
                       "state": fsdp2.whole_state(optim.state_dict(), keep=first)}
                for name, optim in self._named_optimizers.items()}

    def _set_optimizer_state(self, state: dict[str, Any]) -> None:
        """A torch Adam state_dict of whole tensors (from either kind of learner), each rank
        taking its shard of every moment."""
        for name, optim in self._named_optimizers.items():
            params = list(self._optimizer_parameters[optim])
            optim.load_state_dict(fsdp2.sharded_optimizer_state(state[name]["state"], params))
            use_configured_kernel(optim, **self._adam_kernel())

    # --- sharded checkpoints (torch.distributed.checkpoint) ---------------------------------------
    def save_shards(self, directory: str) -> None:
        """Collective: every learner writes its shards of the module's weights and of Adam's
        state into `directory` (`shards.save`: a file per learner and the metadata), nothing
        gathered. Every kind of learner reads them back (`RLVRLearner.restore_from_path`)."""
        shards.save(self.module[DEFAULT_MODULE_ID], list(self._named_optimizers.values()),
                    directory, skip=(TEACHER,))  # loaded from teacher_model_name_or_path
