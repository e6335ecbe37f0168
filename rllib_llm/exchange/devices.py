"""Where each process computes: placements honoured or refused, and reported.

RLlib picks a process's device from its GPU count (`get_device`), and where no GPU is visible it
either asserts about `local_gpu_idx` (the driver) or quietly returns the CPU (a Ray actor). Here
a process that was given a GPU and sees none is a clear error, and every process says once, at
build time, where it computes (`announce`), and in every iteration's metrics (`IS_GPU`).
"""

from __future__ import annotations

import contextlib
import sys

import torch

from rllib_llm.exchange.memory_budgets import AUTO

# Metric (learner results per module, and env_runners/): 1.0 when the process computes on a GPU,
# else 0.0; over several env runners, the share of them on a GPU.
IS_GPU = "device_is_gpu"


def require_visible_gpu(num_gpus: float, *, setting: str, role: str) -> None:
    """Raise ValueError when a process given `num_gpus` > 0 sees no CUDA device."""
    if num_gpus > 0 and not torch.cuda.is_available():
        raise ValueError(
            f"RLVRConfig.{setting}={num_gpus} gives the {role} a GPU, but its process sees none "
            f"(torch.cuda.is_available() is False: a CPU build of torch {torch.__version__}, "
            "CUDA_VISIBLE_DEVICES empty, or a node without GPUs). Set "
            f"{setting}=0 to compute on the CPU."
        )


def module_device(module: torch.nn.Module) -> torch.device:
    """The device of a module's first parameter (CPU for a module without any)."""
    param = next(module.parameters(), None)
    return torch.device("cpu") if param is None else param.device


def is_gpu(device: torch.device) -> float:
    return float(torch.device(device).type == "cuda")


def mixed_precision(dtype: torch.dtype | None, device: torch.device, *, cache: bool = True):
    """torch.autocast to `dtype` on `device`'s type (a no-op for None): the learners' passes and,
    with sampler_autocast, the torch engine's decode. `cache=False` recasts the weights at every
    use instead of keeping their casts for the context (what a CUDA-graph capture needs)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype, cache_enabled=cache)


def device_default(value, device: torch.device, *, gpu, cpu):
    """`value`, unless it is "auto": then `gpu` on a CUDA device, `cpu` on any other. A setting
    whose best value depends on the hardware is chosen by the device of the process that
    computes with it, never by the driver's."""
    if value != AUTO:
        return value
    return gpu if torch.device(device).type == "cuda" else cpu


def announce(role: str, device: torch.device, detail: str = "") -> None:
    """One line naming where a process computes, once, at build time, on stderr (stdout may be a
    command's data, such as `rllib-llm eval`'s JSON; Ray forwards a remote process's line to the
    driver's console with the process's name)."""
    print(f"rllib_llm: {role} computes on {device}{f' ({detail})' if detail else ''}",
          file=sys.stderr, flush=True)
