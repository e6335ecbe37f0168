"""learner_strategy='deepspeed': RLVRLearner on a DeepSpeed ZeRO-2 engine (the deepspeed extra;
the only module that imports DeepSpeed).

Each of RLlib's learner actors is one ZeRO rank of the process group RLlib's learner group
already set up (gloo on CPU, NCCL on GPUs). The optimizer RLlib registered (torch Adam, with
RLlib's learning-rate schedule writing its param groups) becomes the one DeepSpeed partitions:
each rank keeps 1/world of Adam's moments and of the fp32 master weights, and the full weights,
so the module's state — weight sync, evaluation, export — is unchanged. Batches, shares and
normalisers are the DDP learners' (`data_parallel.py`): the update is the one-learner update
(tested). DeepSpeed clips by the global norm (grad_clip) and skips a step whose gradient is not
finite; a non-finite loss skips it before any reduction.

Checkpoints hold what a torch learner's hold — the full weights and, per parameter, torch Adam's
state — so they restore into either kind of learner. Adam's moments are partitioned, so every
rank takes part in gathering them (`gather_optimizer_state`, which `RLVR.get_state` calls on all
learners before RLlib asks the first one for its state); a restore scatters them back and
refreshes the fp32 master weights from the restored ones.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_llm.learner.learner import GRAD_NORM, RLVRLearner

INSTALL_HINT = ("DS_BUILD_OPS=0 pip install --no-build-isolation 'rllib_llm[deepspeed]' "
                "(with torch installed first)")
_ADAM_MOMENTS = ("exp_avg", "exp_avg_sq")


# DeepSpeed's default bucket (5e8 elements) is allocated whole: 2 GiB of fp32 per learner even for
# a tiny model, and measured 30x slower per update on the embedded model. A bucket never needs
# to exceed the trainable weights.
MAX_BUCKET = 500_000_000


def deepspeed_config(cfg, num_trainable: int) -> dict[str, Any]:
    """DeepSpeed's config for an RLVRConfig: ZeRO stage, clipping and precision from its fields,
    buckets no larger than the `num_trainable` weights.

    The batch sizes are nominal: RLVRLearner feeds its own micro-batches and owns the
    accumulation boundary (`managed_gradient_accumulation` off: `step()` is the boundary).
    """
    bucket = max(1, min(MAX_BUCKET, num_trainable))
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "zero_optimization": {"stage": cfg.zero_stage, "reduce_bucket_size": bucket,
                              "allgather_bucket_size": bucket},
        "gradient_clipping": cfg.grad_clip or 0.0,
        "bf16": {"enabled": cfg.model_dtype == "bfloat16", "check_grad_overflow": True},
        "zero_allow_untested_optimizer": True,  # RLlib's torch Adam
        "steps_per_print": 2**31 - 1,
    }


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
        # DeepSpeed places the engine on device LOCAL_RANK: the one RLlib gave this learner.
        device = torch.device(self._device)
        os.environ.setdefault("LOCAL_RANK", str(device.index or 0))
        (self._ds_optimizer_name, optimizer), = self._named_optimizers.items()
        module = self.module[DEFAULT_MODULE_ID]
        trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
        self._engine, *_ = deepspeed.initialize(
            model=module, optimizer=optimizer, config=deepspeed_config(self.config, trainable),
            dist_init_required=False)
        self._gathered: dict[str, Any] | None = None

    def _gradient_sync(self, *, last: bool):
        return contextlib.nullcontext()  # gradients are reduced in `step()`, the boundary

    def _backward(self, loss: torch.Tensor) -> None:
        self._engine.backward(loss, scale_wrt_gas=False)

    def _apply_step(self, step: dict[str, float], total: torch.Tensor) -> dict[str, float]:
        engine = self._engine
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

    # --- checkpoints: torch Adam's per-parameter state, gathered from the partitions -----------
    def _params_in_order(self) -> list[torch.nn.Parameter]:
        """The optimizer's parameters in RLlib's order (the order of a torch Adam state_dict)."""
        optimizer = self._named_optimizers[self._ds_optimizer_name]
        return list(self._optimizer_parameters[optimizer])

    def gather_optimizer_state(self) -> None:
        """Collective (every learner at once): the full per-parameter Adam state, kept by each
        rank for the next `get_state`."""
        from deepspeed.utils import safe_get_full_optimizer_state

        inner = self._engine.optimizer.optimizer  # the torch Adam over the flat partitions
        steps = {float(s["step"]) for s in inner.state.values() if "step" in s}
        state = {}
        for i, param in enumerate(self._params_in_order()):
            moments = {key: safe_get_full_optimizer_state(param, key) for key in _ADAM_MOMENTS}
            if any(m is None for m in moments.values()):
                continue  # no step taken yet
            state[i] = {"step": torch.tensor(max(steps)),
                        **{k: m.detach().cpu().clone() for k, m in moments.items()}}
        group = {k: v for k, v in inner.param_groups[0].items() if k != "params"}
        group["params"] = list(range(len(self._params_in_order())))
        self._gathered = {"state": state, "param_groups": [group]}

    def _get_optimizer_state(self) -> dict[str, Any]:
        if self._gathered is None:
            raise RuntimeError(
                "DeepSpeed learner: Adam's state is partitioned across the learners; call "
                "gather_optimizer_state() on every learner first (RLVR.get_state does)."
            )
        state, self._gathered = self._gathered, None
        return {self._ds_optimizer_name: {"module_id": DEFAULT_MODULE_ID, "state": state}}

    def _set_optimizer_state(self, state: dict[str, Any]) -> None:
        """A torch Adam state_dict (from either kind of learner) into this rank's partition,
        and the fp32 master weights refreshed from the module's (just restored) weights."""
        from deepspeed.utils import safe_set_full_optimizer_state

        saved = state[self._ds_optimizer_name]["state"]
        params = self._params_in_order()
        inner = self._engine.optimizer.optimizer
        for group in inner.param_groups:  # torch Adam creates its state at the first step
            for flat in group["params"]:
                if flat not in inner.state:
                    inner.state[flat] = {"step": torch.tensor(0.0),
                                         **{k: torch.zeros_like(flat) for k in _ADAM_MOMENTS}}
        # Each parameter's view into the partition's state (DeepSpeed links it at the first step).
        self._engine.optimizer._lazy_init_hp_params_optimizer_state()
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
        self._engine.optimizer.refresh_fp32_params()
