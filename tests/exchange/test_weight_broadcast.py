"""Weight sync by broadcast (`exchange/weight_broadcast.py`): layout, buckets, errors, and a real
gloo broadcast from a sender to two receiver processes."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time

import pytest
import torch

from rllib_llm.exchange import weight_broadcast as wb
from rllib_llm.exchange import weight_pieces as wp


def state_dict() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    embed = torch.randn(7, 3, generator=g)
    return {
        "embed.weight": embed,
        "layer.weight": torch.randn(3, 3, generator=g),
        "layer.bias": torch.randn(3, generator=g).to(torch.bfloat16),
        "norm.weight": torch.randn(3, generator=g).to(torch.bfloat16),
        "head.weight": embed,  # tied to the embedding: the same storage
        "big.weight": torch.randn(40, generator=g),
    }


def test_layout_keeps_order_and_sends_a_tied_tensor_once():
    layout = wb.layout_of(state_dict())
    assert [s.name for s in layout] == ["embed.weight", "layer.weight", "layer.bias",
                                        "norm.weight", "big.weight"]
    assert layout[0] == wb.TensorSpec("embed.weight", (7, 3), torch.float32,
                                      aliases=("head.weight",))
    assert layout[0].nbytes == 7 * 3 * 4 and layout[2].nbytes == 3 * 2


def test_buckets_hold_one_dtype_up_to_the_byte_limit():
    layout = wb.layout_of(state_dict())
    bucketed = wb.buckets(layout, bucket_bytes=120)
    # embed (84 B) + layer (36 B) = 120 fit; the bf16 pair shares one; big (160 B, 40 rows of
    # 4 B) is cut into 30 rows (120 B) and the last 10.
    assert [[p.label for p in b] for b in bucketed] == [
        ["embed.weight", "layer.weight"], ["layer.bias", "norm.weight"],
        ["big.weight[0:30]"], ["big.weight[30:40]"]]
    for bytes_ in (1, 16, 64, 120):
        assert all(sum(p.nbytes for p in b) <= max(bytes_, 12)  # 12: embed's row, 3 x 4 B
                   for b in wb.buckets(layout, bucket_bytes=bytes_))
    with pytest.raises(ValueError, match="bucket_bytes=0 must be >= 1"):
        wb.buckets(layout, bucket_bytes=0)


def test_a_split_weight_is_assembled_whole_from_its_pieces():
    weights = state_dict()
    layout = wb.layout_of(weights)
    arrived = [(p, weights[p.name] if p.whole else weights[p.name][p.start:p.stop].clone())
               for p in wp.pieces(layout, bucket_bytes=16)]
    whole = list(wp.whole_weights(arrived))
    assert [p.name for p, _ in whole] == [s.name for s in layout]
    for piece, tensor in whole:
        assert piece.whole and torch.equal(tensor, weights[piece.name]), piece.name


def test_backend_errors_name_the_fix():
    with pytest.raises(ValueError, match="one of \\('nccl', 'gloo'\\)"):
        wb.check_backend("mpi", "cpu")
    with pytest.raises(ValueError, match="moves weights between GPUs.*Use 'gloo'"):
        wb.check_backend("nccl", "cpu")
    with pytest.raises(ValueError, match="world_size=1: a broadcast needs at least one"):
        wb.Sender("gloo", state_dict(), world_size=1, timeout_s=5, bucket_bytes=64)
    with pytest.raises(ValueError, match="rank=2 must be in \\[0, world_size=2\\)"):
        wb.join_group("gloo", host="127.0.0.1", port=1, rank=2, world_size=2, timeout_s=1)


def test_send_before_join_is_an_error():
    sender = wb.Sender("gloo", state_dict(), world_size=2, timeout_s=5, bucket_bytes=64)
    with pytest.raises(RuntimeError, match="before join"):
        sender.send(state_dict(), version=1)


def _receive(address: dict, rank: int, rounds: int, queue, read) -> None:
    receiver = wb.Receiver(rank=rank, device="cpu", **address)
    for _ in range(rounds):
        version, tensors = receiver.receive()
        queue.put((rank, version, {name: t.clone() for name, t in tensors}))
    # The tensors travel as shared memory handed over through this process's socket: it must
    # live until the parent has read them (else "No such file or directory" in the parent).
    read.wait(60)


def test_gloo_broadcast_reaches_every_receiver_exactly_with_its_version():
    weights = state_dict()
    sender = wb.Sender("gloo", weights, world_size=3, timeout_s=60, bucket_bytes=64)
    ctx = mp.get_context("spawn")
    queue, read = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_receive, args=(sender.address(), rank, 2, queue, read))
             for rank in (1, 2)]
    for p in procs:
        p.start()
    sender.join()
    sender.send(weights, version=7)
    updated = {k: v + 1 for k, v in weights.items()}
    sender.send(updated, version=8)
    got = [queue.get(timeout=60) for _ in range(4)]
    read.set()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    by_version = {}
    for rank, version, tensors in got:
        by_version.setdefault(version, []).append(rank)
        expected = weights if version == 7 else updated
        assert set(tensors) == set(weights)  # the tied head travels once, arrives under both
        for name, tensor in tensors.items():
            assert tensor.dtype == expected[name].dtype
            assert torch.equal(tensor, expected[name]), name
    assert {v: sorted(r) for v, r in by_version.items()} == {7: [1, 2], 8: [1, 2]}


def test_a_receiver_whose_sender_never_comes_times_out():
    sender = wb.Sender("gloo", state_dict(), world_size=2, timeout_s=2, bucket_bytes=64)
    start = time.monotonic()
    with pytest.raises(Exception):  # torch's DistBackendError / RuntimeError on timeout
        receiver = wb.Receiver(rank=1, device="cpu", **sender.address())
        receiver.receive()
    assert time.monotonic() - start < 30


def test_a_receiver_that_leaves_mid_stream_breaks_the_send_and_the_others_receive_at_once():
    """Rank 2 drops its group after the first buckets, as a process that died closes its
    sockets: the sender's broadcast fails in one line naming its rank and timeout, it drops the
    group, and rank 1's receive fails with it at once, not after the 20 s timeout. Receivers in
    threads: gloo's groups in one process act as in many."""
    weights = {f"w{i}": torch.full((16, 16), float(i)) for i in range(20)}  # 1 KiB each
    sender = wb.Sender("gloo", weights, world_size=3, timeout_s=20, bucket_bytes=1024)
    left, errors = threading.Event(), {}

    def receive(rank: int) -> None:
        receiver = wb.Receiver(rank=rank, device="cpu", **sender.address())
        try:
            _, tensors = receiver.receive()
            for index, _ in enumerate(tensors):
                if rank == 2 and index == 1:
                    receiver.group = None  # its last reference: the group closes its sockets
                    left.set()
                    return
        except wb.BroadcastBroken as error:
            errors[rank] = (str(error), time.monotonic())

    def after_rank_2_left(payloads):
        for index, payload in enumerate(payloads):
            if index == 3:
                assert left.wait(20)
            yield payload

    threads = [threading.Thread(target=receive, args=(rank,)) for rank in (1, 2)]
    for thread in threads:
        thread.start()
    sender.join()
    sender.in_transit = after_rank_2_left
    with pytest.raises(wb.BroadcastBroken, match="^rank 0 of 3: .+ \\(timeout 20 s\\)$"):
        sender.send(weights, version=1)
    failed_at = time.monotonic()
    assert sender.group is None
    for thread in threads:
        thread.join(timeout=30)
    message, at = errors[1]
    assert message.startswith("rank 1 of 3: ") and message.endswith(" (timeout 20 s)")
    assert at - failed_at < 5
