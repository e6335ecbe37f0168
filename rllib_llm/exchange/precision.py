"""Which low precision a device computes natively, and what `autocast_dtype="auto"` means there.

bfloat16 halves a matmul's time on a GPU and on a CPU with AVX-512 BF16 or AMX, but a CPU with
only AVX2 has no bf16 instructions: torch then emulates the multiply-adds, about 70x slower than
float32 (a 512 x 576 x 1536 matmul on one thread of an AVX2-only EPYC: 11.7 ms in float32,
837 ms in bfloat16), and rounds differently. Which dtype is fast is a property of the device the
process computes on, like the memory budgets, so "auto" is settled there, and an explicit bf16
where it is emulated warns once with the slowdown measured on that CPU.

oneDNN (torch's CPU matmuls in bf16) honours `ONEDNN_MAX_CPU_ISA`, and torch's own kernels
`ATEN_CPU_CAPABILITY`: with both at AVX2 a CPU that has bf16 instructions computes as one
without them, and `native_bf16` says False (tests/project/test_without_native_bf16.py).
"""

from __future__ import annotations

import functools
import time
import warnings

import torch

from rllib_llm.exchange.memory_budgets import AUTO


def native_bf16(device: torch.device) -> bool:
    """Whether `device` computes bfloat16 matmuls in hardware: a CUDA device that supports bf16,
    or a CPU whose bf16 matmuls oneDNN runs on AVX-512 BF16 or AMX instructions."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    has_instructions = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    # False where ONEDNN_MAX_CPU_ISA caps oneDNN below AVX-512: torch then takes its own
    # (emulated) bf16 path whatever the CPU has.
    return has_instructions and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def autocast_for_device(value: str | None, device: torch.device) -> str | None:
    """The autocast dtype a process on `device` computes under: `value` as it is, unless it is
    "auto": then "bfloat16" where the device computes it natively, else None (float32)."""
    if value != AUTO:
        return value
    return "bfloat16" if native_bf16(device) else None


def precision_note(value: str | None, device: torch.device) -> str:
    """What "auto" chose, for the device line a process prints at build ("" when not auto)."""
    if value != AUTO:
        return ""
    chosen = autocast_for_device(value, device)
    why = "native bf16" if chosen else "no native bf16: float32"
    return f"autocast_dtype={chosen} (auto: {why})"


def warn_if_emulated(dtype: str | None, device: torch.device, *, setting: str) -> None:
    """Warn, once per setting and process, where `setting` asks for bfloat16 (or float16) on a
    CPU that emulates it, with the slowdown measured here."""
    device = torch.device(device)
    if dtype not in ("bfloat16", "float16") or device.type != "cpu" or native_bf16(device):
        return
    _warn_once(setting, dtype)


def forget_emulation_warnings() -> None:
    """Forget which settings `warn_if_emulated` has warned about in this process: each warns
    (and measures) again the next time (a test of the warning starts from here)."""
    _warn_once.cache_clear()


@functools.cache  # once per (setting, dtype) in a process: the warning, and its measurement
def _warn_once(setting: str, dtype: str) -> None:
    slowdown = emulated_slowdown(getattr(torch, dtype))
    fix = ("Set autocast_dtype='auto' to use it only where the device computes it natively, or "
           "None" if setting == "autocast_dtype" else
           f"Set {setting}='float32' (with autocast_dtype='auto' for mixed precision only where "
           "the device computes bf16 natively)")
    warnings.warn(
        f"RLVRConfig.{setting}={dtype!r} on a CPU without native {dtype} (no AVX-512 BF16 or AMX "
        f"that oneDNN uses): its matmuls are emulated, {slowdown:.0f}x slower than float32 on "
        f"this CPU (measured now). {fix}.", RuntimeWarning, stacklevel=3)


def emulated_slowdown(dtype: torch.dtype, size: int = 256) -> float:
    """How many times slower one `size`^3 matmul runs in `dtype` than in float32 on this CPU
    (best of five each, on one thread: a thread of a multi-threaded matmul that waits for a core
    another process holds would time the machine's load, not the kernels; a few hundred
    milliseconds where it is emulated)."""
    a = torch.randn(size, size)
    low = a.to(dtype)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _best_time(lambda: low @ low) / _best_time(lambda: a @ a)
    finally:
        torch.set_num_threads(threads)


def _best_time(matmul, repeats: int = 5) -> float:
    matmul()  # the first call may pick a kernel
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        matmul()
        times.append(time.perf_counter() - start)
    return max(min(times), 1e-9)
