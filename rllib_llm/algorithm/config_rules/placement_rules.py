"""The rules of where RLVRConfig puts its processes, and of its memory budgets: a placement the
config cannot honour is refused here, before anything is built, never silently changed."""

from __future__ import annotations

from rllib_llm.algorithm.fields import refuse_changed

# The torch engine's settings, each with what vLLM has instead: with rollout_engine='vllm' a
# value changed from its default would be ignored, so it is refused.
TORCH_ENGINE_ONLY = {
    "max_tokens_per_generate_batch": "bounds the torch engine's KV cache; vLLM bounds its own "
                                     "(vllm_gpu_memory_utilization, vllm_kv_cache_memory_bytes)",
    "torch_engine_cuda_graphs": "is the torch engine's; vLLM captures its own CUDA graphs "
                                "(vllm_enforce_eager)",
}


def shares_learner_model(cfg) -> bool:
    """Whether the driver's env runner holds the local learner's own model instead of a copy
    (RLVR.setup: one process, full fine-tuning); the torch engine then samples with it."""
    return cfg.num_env_runners == 0 and cfg.num_learners == 0 and not cfg.lora_rank


def samples_with_learner_model(cfg) -> bool:
    """Whether the driver's sampler samples with the learner's own model, on its device: the
    shared model, and the torch engine (vLLM keeps its own copy)."""
    return shares_learner_model(cfg) and cfg.rollout_engine == "torch"


def check_cuda_ipc_sync(cfg) -> None:
    """weight_sync_backend='cuda_ipc': the learner's own parameters, on a GPU, read in place by
    torch engines on that GPU (exchange/weight_ipc.py)."""
    if cfg.weight_sync_backend != "cuda_ipc" or cfg.in_evaluation:
        return
    no_gpu = [name for name in ("num_gpus_per_learner", "num_gpus_per_env_runner")
              if not getattr(cfg, name)]
    if no_gpu:
        raise ValueError(
            f"RLVRConfig.weight_sync_backend='cuda_ipc' hands the learner's weights on its GPU to "
            f"env runners on the same GPU, and {', '.join(f'{n}=0' for n in no_gpu)}. Give the "
            "learner and the runners shares of one GPU (e.g. 0.5 each), or use "
            "weight_sync_backend='object_store'."
        )
    if cfg.rollout_engine != "torch":
        raise ValueError(
            f"RLVRConfig.weight_sync_backend='cuda_ipc' loads into the torch engine; with "
            f"rollout_engine={cfg.rollout_engine!r} the weights live in vLLM's worker processes. "
            "Use weight_sync_backend='nccl' (or 'object_store')."
        )
    fresh = ("lora_rank > 0: the merged weights" if cfg.lora_rank else
             "ZeRO-3: the gathered weights" if cfg.learner_strategy == "deepspeed"
             and cfg.zero_stage == 3 else None)
    if fresh:
        raise ValueError(
            f"RLVRConfig.weight_sync_backend='cuda_ipc' shares the learner's parameters in "
            f"place; with {fresh} are new tensors at each sync, freed before the runners could "
            "read them. Use weight_sync_backend='object_store'."
        )


def check_placement(cfg) -> None:
    """Raise ValueError for a placement or budget the config's processes cannot honour."""
    if cfg.in_evaluation:
        return
    if samples_with_learner_model(cfg) and cfg.num_gpus_per_env_runner > 0 \
            and cfg.num_gpus_per_learner == 0:
        raise ValueError(
            f"RLVRConfig.num_gpus_per_env_runner={cfg.num_gpus_per_env_runner} with "
            "num_env_runners=0 and num_learners=0: in one process the sampler samples with the "
            "learner's own model, on the learner's device, which is the CPU "
            "(num_gpus_per_learner=0). Set num_gpus_per_learner=1 to sample and train on the "
            "GPU, or num_env_runners >= 1 for a sampler on a GPU of its own."
        )
    if cfg.rollout_engine == "vllm":
        for name, instead in TORCH_ENGINE_ONLY.items():
            refuse_changed(cfg, (name,), f"{instead} and would ignore it. Leave it at its "
                                         "default with rollout_engine='vllm'.")
    sampler_gpus = (cfg.num_gpus_per_learner if samples_with_learner_model(cfg)
                    else cfg.num_gpus_per_env_runner)
    if cfg.torch_engine_cuda_graphs is True and not sampler_gpus:
        raise ValueError(
            "RLVRConfig.torch_engine_cuda_graphs=True needs a sampler on a GPU, and this one "
            "has none (num_gpus_per_env_runner=0, or in one process num_gpus_per_learner=0). "
            "Leave it at 'auto' (on wherever the engine computes on a GPU) or set False."
        )
