"""The DeepSpeed config a DeepSpeed learner builds from RLVRConfig's fields and its
`deepspeed_config` extras (no DeepSpeed import here: the config's checks read `OWNED`)."""

from __future__ import annotations

from typing import Any

# DeepSpeed's default bucket (5e8 elements) is allocated whole: 2 GiB of fp32 per learner even for
# a tiny model, and measured 30x slower per update on the embedded model. A bucket never needs
# to exceed the trainable weights.
MAX_BUCKET = 500_000_000

# What RLVRConfig's fields set (dotted paths): `deepspeed_config` may not set them too.
OWNED = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
         "managed_gradient_accumulation", "gradient_clipping", "bf16", "fp16",
         "zero_optimization.stage", "zero_optimization.offload_optimizer",
         "zero_optimization.offload_param")


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
