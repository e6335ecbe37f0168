"""Freed host memory handed back to the operating system after each learner update.

Why: glibc's malloc keeps the pages of freed blocks in the process's heap for reuse, and the
blocks a learner frees on a CPU are large: a micro-batch's activations (about 950 MB for 4,096
tokens of a 6-layer Llama of hidden 384 in float32). After the first large block is freed,
malloc serves blocks of up to 32 MiB from the heap instead of mapping them apart, and each
micro-batch's pattern of allocations leaves the heap a little more fragmented: the resident
memory after an update grew with the number of micro-batches, although nothing held that memory
(benchmarks/host_memory.py: with both token budgets at 4,096, 1.97 GB after iterations of 64
responses, 2.41 GB after 512, 24 KiB per response token; every learner buffer was bounded by
the budgets). `malloc_trim(0)` returns the free pages; after it the same runs settle at the
memory their objects hold: 0.95 GB for 64, 512 and 2,048 responses alike.

The peak inside an update is not changed by this (the fragmentation happens between its
micro-batches, and levels off after a few); trimming after every micro-batch lowered it by a
tenth at about a tenth more time, so it is done once per update. Elsewhere than glibc (macOS,
musl) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None


def release_freed_memory() -> bool:
    """Return the C heap's free pages to the operating system; False where that is not
    possible (no glibc)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
