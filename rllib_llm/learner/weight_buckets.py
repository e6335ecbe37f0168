"""Weights in buckets of a set size: what a sharded learner gathers whole at one time.

A weight sync or a checkpoint of sharded weights (ZeRO-3's partitions, FSDP2's shards) gathers a
bucket of whole weights, copies it out and frees it before the next, so the peak extra memory is
one bucket, not the model (`weight_sync_bucket_bytes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch


def weight_buckets(sized: Iterable[tuple[str, torch.Tensor, int]],
                   bucket_bytes: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """(key, weight, its whole size in bytes) in order -> runs of [(key, weight)] of at most
    `bucket_bytes` together; a weight larger than that is a bucket of its own."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for key, value, nbytes in sized:
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((key, value))
        size += nbytes
    if bucket:
        yield bucket
