"""The rules of how the learners train: the weights' dtype, the learning rate, several learners
sharing a batch, LoRA adapters and mixed precision. (DeepSpeed's own settings:
deepspeed_rules.py.)"""

from __future__ import annotations

import importlib.util
from typing import Any

from rllib_llm.algorithm.fields import is_number, refuse_changed


def check_model_dtype(cfg) -> None:
    """Training weights are bfloat16 or float32."""
    if cfg.model_dtype == "float16":
        raise ValueError(
            "RLVRConfig.model_dtype='float16' is not supported for training: float16 weights "
            "and Adam moments without float32 master weights and loss scaling underflow. Use "
            "'bfloat16' (same memory, float32's range) or 'float32'."
        )


def check_lr(lr: Any, name: str = "lr") -> None:
    """lr (or critic_lr): a number > 0, or RLlib's piecewise schedule [[timestep, value], ...] of
    such values with non-decreasing timesteps >= 0 starting at 0."""
    fix = ("use a number > 0 (e.g. 1e-6) or a schedule [[0, 1e-6], [20000, 1e-5]] with "
           "timesteps from 0 upwards and values > 0")
    if is_number(lr):
        if lr > 0:
            return
        raise ValueError(f"RLVRConfig.{name}={lr!r} is invalid: a learning rate <= 0 trains "
                         f"backwards or not at all; {fix}.")
    points = lr if isinstance(lr, (list, tuple)) else None
    ok = bool(points) and all(isinstance(p, (list, tuple)) and len(p) == 2 and is_number(p[0])
                              and is_number(p[1]) for p in points)
    if ok:
        times = [p[0] for p in points]
        ok = times[0] == 0 and all(b >= a for a, b in zip(times, times[1:])) and \
            all(p[1] > 0 for p in points)
    if not ok:
        raise ValueError(f"RLVRConfig.{name}={lr!r} is invalid; {fix}.")


def check_learners(cfg) -> None:
    """Several learners (DDP or DeepSpeed) share every mini-batch's prompt groups equally."""
    learners = cfg.num_learners
    if learners <= 1 or cfg.in_evaluation:
        return
    n = cfg.num_return_sequences_in_group
    groups = (cfg.mini_batch_size or cfg.rollout_batch_size * n) // n
    if groups % learners:
        raise ValueError(
            f"RLVRConfig.num_learners={learners}: each learner trains on an equal share of "
            f"every mini-batch's whole prompt groups, and a mini-batch holds {groups} groups "
            f"(mini_batch_size={cfg.mini_batch_size}, rollout_batch_size="
            f"{cfg.rollout_batch_size}, num_return_sequences_in_group={n}). Make the number "
            f"of groups per mini-batch a multiple of {learners}."
        )
    if cfg.weight_sync_backend != "object_store":
        raise ValueError(
            f"RLVRConfig.weight_sync_backend={cfg.weight_sync_backend!r} with num_learners="
            f"{learners}: a direct sync has one sending learner; several learners sync "
            "through the object store (weight_sync_backend='object_store'), from learner 0."
        )


def check_lora(cfg) -> None:
    """LoRA settings need lora_rank, and peft installed."""
    if not cfg.lora_rank:
        refuse_changed(cfg, ("lora_alpha", "lora_target_modules"),
                       "configure LoRA adapters, but lora_rank=0 trains the full model, so they "
                       "would do nothing. Set lora_rank > 0.")
        return
    if importlib.util.find_spec("peft") is None:
        raise ValueError(f"RLVRConfig.lora_rank={cfg.lora_rank} needs the peft library: "
                         "pip install 'rllib_llm[lora]'.")


def check_autocast(cfg) -> None:
    """Mixed precision casts float32 weights; DeepSpeed has its own bf16; the sampler's follows
    the learners'."""
    if cfg.autocast_dtype is None:
        refuse_changed(cfg, ("sampler_autocast",),
                       "samples under autocast_dtype, but autocast_dtype=None: there is no "
                       "autocast to sample under. Set autocast_dtype='bfloat16' (or 'auto'), "
                       "or leave it off.")
        return
    if cfg.model_dtype != "float32":
        raise ValueError(
            f"RLVRConfig.autocast_dtype={cfg.autocast_dtype!r} runs learners in mixed precision "
            f"over float32 weights, but model_dtype={cfg.model_dtype!r}: set "
            "model_dtype='float32' (or autocast_dtype=None to train in model_dtype).")
    if cfg.learner_strategy == "deepspeed":
        raise ValueError(
            f"RLVRConfig.autocast_dtype={cfg.autocast_dtype!r} is not combined with "
            "learner_strategy='deepspeed': set autocast_dtype=None and model_dtype='bfloat16' "
            "(DeepSpeed's bf16, with float32 master weights).")
