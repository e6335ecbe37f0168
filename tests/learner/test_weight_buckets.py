"""weight_buckets: runs of whole weights of at most a set size, in order."""

from __future__ import annotations

import torch

from rllib_llm.learner.weight_buckets import weight_buckets


def test_buckets_hold_at_most_the_set_bytes_in_order_and_a_larger_weight_alone():
    w = torch.zeros(1)
    sized = [("a", w, 4), ("b", w, 4), ("c", w, 10), ("d", w, 1), ("e", w, 0), ("f", w, 8)]
    keys = [[k for k, _ in bucket] for bucket in weight_buckets(sized, bucket_bytes=8)]
    assert keys == [["a", "b"], ["c"], ["d", "e"], ["f"]]
    assert list(weight_buckets([], bucket_bytes=8)) == []
