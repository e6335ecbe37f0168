"""The pieces of a broadcast weight sync (`exchange/weight_pieces.py`): a weight larger than a
bucket cut into runs of whole rows, and the rows of a weight sharded on dim 0 as FSDP2 shards it
read from the ranks that own them (four gloo ranks in threads of this process)."""

from __future__ import annotations

import datetime
import threading

import pytest
import torch
import torch.distributed as dist

from rllib_llm.exchange import weight_pieces as wp
from rllib_llm.exchange.weight_broadcast import TensorSpec


def test_a_weight_larger_than_a_bucket_travels_in_runs_of_whole_rows():
    """10 rows of 8 bytes in a bucket of 3 rows' bytes (24): rows 0-3, 3-6, 6-9, 9-10, each
    labelled with its rows for its bucket's checksum; a weight that fits travels whole."""
    w = TensorSpec("w", (10, 2), torch.float32)
    small = TensorSpec("b", (2,), torch.float32)
    pieces = wp.pieces([w, small], bucket_bytes=24)
    assert [(p.name, p.start, p.stop) for p in pieces] == [
        ("w", 0, 3), ("w", 3, 6), ("w", 6, 9), ("w", 9, 10), ("b", 0, 2)]
    assert [p.label for p in pieces] == ["w[0:3]", "w[3:6]", "w[6:9]", "w[9:10]", "b"]
    assert [p.shape for p in pieces] == [(3, 2), (3, 2), (3, 2), (1, 2), (2,)]
    assert [p.rows for p in pieces] == [slice(0, 3), slice(3, 6), slice(6, 9), slice(9, 10),
                                        None]
    # A row (8 B) larger than the bucket: one row per piece, each a bucket of its own.
    assert [p.label for p in wp.pieces([w], bucket_bytes=5)] == [f"w[{r}:{r + 1}]"
                                                                 for r in range(10)]


def _gather_on(rank: int, world: int, store, weight: torch.Tensor, ranges, got: dict) -> None:
    """Rank `rank`'s side: its torch.chunk shard of `weight`, every range read in order."""
    group = dist.ProcessGroupGloo(store, rank, world, datetime.timedelta(seconds=60))
    local = weight.chunk(world)[rank] if rank < len(weight.chunk(world)) else weight[:0]
    for start, stop in ranges:
        out = torch.full((stop - start, *weight.shape[1:]), float("nan")) if rank == 0 else None
        wp.gather_rows(out, local.clone(), rows=weight.shape[0], start=start, stop=stop,
                       group=group)
        got[(rank, start, stop)] = out


@pytest.mark.parametrize("rows", [5, 7])
def test_gather_rows_reads_each_range_from_the_ranks_that_own_it(rows):
    """4 ranks: 5 rows split 2, 2, 1, 0 (the last rank holds none); 7 rows 2, 2, 2, 1. Ranges
    within a rank, across ranks, and the whole weight arrive exact on rank 0 only."""
    weight = torch.randn(rows, 3, generator=torch.Generator().manual_seed(rows))
    ranges = [(0, 2), (1, 4), (2, 3), (3, rows), (0, rows)]
    store, got = dist.HashStore(), {}
    threads = [threading.Thread(target=_gather_on, args=(r, 4, store, weight, ranges, got))
               for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(got) == 4 * len(ranges)  # every rank returned from every range
    for start, stop in ranges:
        assert torch.equal(got[(0, start, stop)], weight[start:stop]), (start, stop)
        assert all(got[(r, start, stop)] is None for r in (1, 2, 3))


def test_gather_rows_refuses_a_shard_of_another_split():
    group = dist.ProcessGroupGloo(dist.HashStore(), 0, 1, datetime.timedelta(seconds=5))
    with pytest.raises(ValueError, match="rank 0 of 1 holds 3 rows of a weight of 4 rows; "
                                         "split as torch.chunk splits it, it would hold 4"):
        wp.gather_rows(torch.empty(1, 2), torch.zeros(3, 2), rows=4, start=0, stop=1,
                       group=group)
