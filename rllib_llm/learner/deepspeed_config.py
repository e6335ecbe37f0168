"""The DeepSpeed settings of RLVRConfig: their checks, and the DeepSpeed config a DeepSpeed
learner builds from them and its `deepspeed_config` extras (no DeepSpeed import here: the config
validates with it)."""

from __future__ import annotations

import importlib.util
from typing import Any

from rllib_llm import core

# Settings only a DeepSpeed learner reads.
DEEPSPEED_FIELDS = ("zero_stage", "offload_optimizer", "offload_param", "deepspeed_config")

# DeepSpeed's default bucket (5e8 elements) is allocated whole: 2 GiB of fp32 per learner even for
# a tiny model, and measured 30x slower per update on the embedded model. A bucket never needs
# to exceed the trainable weights.
MAX_BUCKET = 500_000_000

# What RLVRConfig's fields set (dotted paths): `deepspeed_config` may not set them too.
OWNED = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
         "managed_gradient_accumulation", "gradient_clipping", "bf16", "fp16",
         "zero_optimization.stage", "zero_optimization.offload_optimizer",
         "zero_optimization.offload_param")


def check_deepspeed_settings(cfg) -> None:
    """Raise ValueError when an RLVRConfig's DeepSpeed settings would be ignored (a torch
    learner), or ask for what the DeepSpeed learner does not (yet) do."""
    # (Imported here: the config module imports this one, and the fields load with it.)
    from rllib_llm.algorithm.fields import changed_fields

    if cfg.learner_strategy != "deepspeed":
        changed = changed_fields(cfg, DEEPSPEED_FIELDS)
        if changed:
            raise ValueError(
                f"RLVRConfig: {', '.join(changed)} configure DeepSpeed's ZeRO, but "
                f"learner_strategy={cfg.learner_strategy!r} would ignore them; set "
                "learner_strategy='deepspeed' (and num_learners >= 1)."
            )
        return
    if cfg.in_evaluation:
        return
    why = None
    if cfg.num_learners < 1:
        why = ("needs num_learners >= 1: each learner actor is one ZeRO rank of the process "
               "group RLlib sets up for remote learners")
    elif core.adv_estimator_info(cfg.adv_estimator).needs_critic:
        why = (f"does not train a critic (adv_estimator={cfg.adv_estimator!r}) yet: its two "
               "optimizers are not partitioned; use learner_strategy='torch'")
    elif cfg.grad_clip_by != "global_norm":
        why = f"clips by the global norm only, not grad_clip_by={cfg.grad_clip_by!r}"
    elif cfg.offload_param and cfg.zero_stage != 3:
        why = (f"offloads the weights (offload_param=True) only with zero_stage=3, where "
               f"they are partitioned; zero_stage={cfg.zero_stage} keeps them whole")
    elif owned := owned_deepspeed_keys(cfg.deepspeed_config):
        why = (f"sets {', '.join(owned)} from RLVRConfig fields, not from deepspeed_config "
               "(zero_stage, offload_optimizer, offload_param, grad_clip, model_dtype, "
               "micro_batch_size)")
    elif cfg.zero_stage == 3 and cfg.lora_rank:
        why = ("does not train LoRA adapters on ZeRO-3's partitioned weights: merging them "
               "for the env runners would gather every layer; use zero_stage=2")
    elif importlib.util.find_spec("deepspeed") is None:
        why = ("needs DeepSpeed: DS_BUILD_OPS=0 pip install --no-build-isolation "
               "'rllib_llm[deepspeed]'")
    if why:
        raise ValueError(f"RLVRConfig.learner_strategy='deepspeed' {why}.")


def owned_deepspeed_keys(extra: dict[str, Any]) -> list[str]:
    """The keys of `extra` (dotted) that RLVRConfig's own fields set."""
    zero = extra.get("zero_optimization")
    keys = set(extra) | {f"zero_optimization.{k}" for k in (zero if isinstance(zero, dict)
                                                             else {})}
    return sorted(keys & set(OWNED))


def deepspeed_config(cfg, num_trainable: int) -> dict[str, Any]:
    """DeepSpeed's config for an RLVRConfig: ZeRO stage, offload, clipping and precision from its
    fields, buckets no larger than the `num_trainable` weights, then `cfg.deepspeed_config`
    merged in.

    The batch sizes are nominal: RLVRLearner feeds its own micro-batches and owns the
    accumulation boundary (`managed_gradient_accumulation` off: `step()` is the boundary).
    """
    bucket = max(1, min(MAX_BUCKET, num_trainable))
    zero: dict[str, Any] = {"stage": cfg.zero_stage, "reduce_bucket_size": bucket,
                            "allgather_bucket_size": bucket}
    if cfg.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    if cfg.offload_param:
        zero["offload_param"] = {"device": "cpu"}
    built = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "zero_optimization": zero,
        "gradient_clipping": cfg.grad_clip or 0.0,
        "bf16": {"enabled": cfg.model_dtype == "bfloat16", "check_grad_overflow": True},
        "zero_allow_untested_optimizer": True,  # RLlib's torch Adam
        # Offload runs that torch Adam on the CPU partition (DeepSpeed's compiled CPUAdam is
        # not built with DS_BUILD_OPS=0).
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 2**31 - 1,
    }
    return _merged(built, cfg.deepspeed_config)


def _merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out
