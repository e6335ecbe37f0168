"""The rollout engine an env runner samples with, built from the config's `rollout_engine`:
vLLM with its own copy of the weights, or the torch engine around the runner's own model.

Engines have no registry: a new engine is a branch of `make_engine` (docs/DESIGN.md).
"""

from __future__ import annotations

import torch

from rllib_llm.exchange.devices import announce, device_default
from rllib_llm.exchange.memory_budgets import AUTO, generate_budget
from rllib_llm.exchange.precision import autocast_for_device, precision_note, warn_if_emulated
from rllib_llm.models import DTYPES
from rllib_llm.rollout.decode_graphs import cuda_graph_decode


def make_engine(config, *, tokenizer, model, device: torch.device, worker_index: int):
    """The engine of runner `worker_index` (0: the driver's) on `device`; the torch engine
    samples from `model` (the runner's module's causal LM), vLLM loads the config's model."""
    who = f"env runner {worker_index}" if worker_index else "the driver's env runner"
    if config.rollout_engine == "vllm":
        return _vllm_engine(config, tokenizer, device, worker_index, who)
    from rllib_llm.rollout.torch_engine import TorchRolloutEngine

    # Sized for the device the engine computes on, now that the model is there.
    budget, sized = generate_budget(config.max_tokens_per_generate_batch, device, model,
                                    config.device_memory_share)
    graphs = cuda_graph_decode(config.torch_engine_cuda_graphs, device, model)
    # The learners' mixed precision, where the sampler is to sample under it too ("auto":
    # bf16 where this device computes it natively).
    autocast = autocast_for_device(config.autocast_dtype, device) \
        if config.sampler_autocast else None
    precision = precision_note(config.autocast_dtype, device) if config.sampler_autocast else ""
    notes = [note for note in (sized, graphs.note, precision) if note]
    if notes:
        announce(f"{who}'s torch engine", device, ", ".join(notes))
    if config.sampler_autocast:
        warn_if_emulated(config.autocast_dtype, device, setting="autocast_dtype")
    warn_if_emulated(config.model_dtype, device, setting="model_dtype")
    return TorchRolloutEngine(
        model, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        device=device, max_tokens_per_batch=budget,
        autocast_dtype=None if autocast is None else DTYPES[autocast],
        decode_step="cuda_graph" if graphs.on else "eager",
        graph_fallback=config.torch_engine_cuda_graphs == AUTO,
    )


def _vllm_engine(cfg, tokenizer, device: torch.device, worker_index: int, who: str):
    from rllib_llm.models import resolve_path
    from rllib_llm.rollout.vllm_engine import VLLMRolloutEngine

    # "auto": CUDA graphs on a GPU, eager on a CPU.
    eager = device_default(cfg.vllm_enforce_eager, device, gpu=False, cpu=True)
    if cfg.vllm_enforce_eager == AUTO and device.type == "cuda":
        announce(f"{who}'s vLLM engine", device,
                 f"vllm_enforce_eager={eager} (auto: CUDA graphs)")
    return VLLMRolloutEngine(
        resolve_path(cfg.model_name_or_path),
        eos_token_id=tokenizer.eos_token_id,
        dtype=cfg.model_dtype,
        seed=(cfg.seed or 0) + worker_index,
        gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
        kv_cache_memory_bytes=cfg.vllm_kv_cache_memory_bytes,
        tensor_parallel_size=cfg.vllm_tensor_parallel_size,
        enforce_eager=eager,
        max_num_seqs=cfg.vllm_max_num_seqs,
        enable_sleep_mode=cfg.vllm_enable_sleep_mode,
    )
