"""Torch's intra-op thread count in the processes that sample and learn.

Measured on a 2-core machine: with torch's default (one thread per core) the learner and the
sampler oversubscribe the cores and an iteration of the embedded demo takes 1.3 s; with one
thread each it takes 0.1 s, and stays stable when other work shares the machine.
"""

from __future__ import annotations

import torch


def set_torch_threads(num_threads: int | None) -> None:
    """Use `num_threads` torch threads in this process; None leaves torch's default."""
    if num_threads is not None:
        torch.set_num_threads(num_threads)
