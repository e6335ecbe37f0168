"""Freed host memory handed back to the operating system after each learner update.

Why: glibc's malloc keeps the pages of freed blocks in the process's heap for reuse, and the
blocks a learner frees on a CPU are large: a micro-batch's activations (about 950 MB for 4,096
tokens of a 6-layer Llama of hidden 384 in float32). After the first large block is freed,
malloc serves blocks of up to 32 MiB from the heap instead of mapping them apart, and each
micro-batch's pattern of allocations leaves the heap a little more fragmented: the resident
memory after an update grew with the number of micro-batches, although nothing held that memory
(benchmarks/memory/host_memory.py: with both token budgets at 4,096, 1.97 GB after iterations of 64
responses, 2.41 GB after 512, 24 KiB per response token; every learner buffer was bounded by
the budgets). `malloc_trim(0)` returns the free pages; after it the same runs settle at the
memory their objects hold: 0.95 GB for 64, 512 and 2,048 responses alike.

The peak inside an update is not changed by this (the fragmentation happens between its
micro-batches, and levels off after a few); trimming after every micro-batch lowered it by a
tenth at about a tenth more time, so it is done once per update, and only when the heap holds
at least `WORTH_TRIMMING` free: a trim hands back pages that the next update faults in again.
Trimming every update cost the tiny CPU shape a fifth of its time
(benchmarks/peers/trl_comparison.py, 8 x 4 x 16 on the embedded model: learn 24 -> 32 ms, sample
9.6 -> 11.4 ms per update), where the heap never holds much free. Elsewhere than glibc (macOS,
musl) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

# Free heap bytes worth handing back: what a trim costs in faults is paid only where it bounds
# more than this (the runs that grew kept about 1 GB free; the tiny shape a few MB).
WORTH_TRIMMING = 256 * 2**20


class _MallInfo2(ctypes.Structure):
    """glibc's `struct mallinfo2` (all arenas); `fordblks` is the free bytes in the heap."""

    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


@functools.cache
def _glibc():
    """glibc's (malloc_trim, mallinfo2), or None where the C library has not both."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        info = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    info.restype = _MallInfo2
    return libc.malloc_trim, info


def free_heap_bytes() -> int | None:
    """Bytes the C heap holds free (resident or not); None without glibc."""
    glibc = _glibc()
    return None if glibc is None else int(glibc[1]().fordblks)


def release_freed_memory(worth: int = WORTH_TRIMMING) -> bool:
    """Return the C heap's free pages to the operating system when it holds at least `worth`
    bytes free; whether it did (False without glibc)."""
    glibc = _glibc()
    if glibc is None or free_heap_bytes() < worth:
        return False
    glibc[0](0)
    return True
