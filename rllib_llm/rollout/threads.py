"""Torch's thread count inside Ray workers.

Measured on a 2-core machine: with torch's default (one thread per core) in every Ray worker, the
env runner and learner processes oversubscribe the cores and run about 10x slower and less
stably than with one thread each.
"""

from __future__ import annotations

import torch


def in_ray_actor() -> bool:
    import ray

    return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None


def limit_torch_threads(num_threads: int = 1) -> None:
    """Use `num_threads` torch threads inside a Ray actor (the driver keeps its own count)."""
    if in_ray_actor():
        torch.set_num_threads(num_threads)
