"""A checksum per bucket of a broadcast weight sync (`exchange/weight_checksums.py`): what it
notices, and a real gloo broadcast to a receiver process in which a bucket corrupted or two
buckets swapped in transit (the sender's `in_transit` seam) are refused in one line, while the
group stays in step and the next sync arrives exactly."""

from __future__ import annotations

import multiprocessing as mp

import pytest
import torch

from rllib_llm.exchange import weight_broadcast as wb
from rllib_llm.exchange import weight_checksums as wc


def weights() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"a.weight": torch.randn(4, 4, generator=g), "b.weight": torch.randn(4, 4, generator=g),
            "c.bias": torch.randn(5, generator=g).to(torch.bfloat16),
            "d.weight": torch.randn(8, 4, generator=g)}


@pytest.mark.parametrize("digest", [wc.tensor_digest, wc.word_digest])
def test_a_digest_changes_with_a_flipped_bit_or_two_swapped_elements(digest):
    x = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    flipped = x.clone()
    flipped.view(torch.int32)[123] ^= 1  # the lowest mantissa bit of one element
    swapped = x.clone()
    swapped[[3, 700]] = x[[700, 3]]
    assert digest(x) == digest(x.clone())
    assert len({digest(x), digest(flipped), digest(swapped)}) == 3
    odd = torch.arange(5, dtype=torch.uint8)  # an odd number of bytes: read byte by byte
    assert digest(odd) != digest(odd.flip(0))


def test_word_digest_weighs_each_chunk_by_its_place(monkeypatch):
    """Positions restart in each chunk; the chunk's own index keeps two chunks that trade
    places from cancelling out."""
    monkeypatch.setattr(wc, "CHUNK", 16)
    x = torch.randn(64, generator=torch.Generator().manual_seed(2))  # 128 words: 8 chunks
    traded = torch.cat([x[8:16], x[:8], x[16:]])  # chunks 0 and 1 (8 floats each) traded
    assert wc.word_digest(x) != wc.word_digest(traded)
    assert 0 <= wc.word_digest(x) < wc.MODULUS


def test_check_bucket_names_the_bucket_the_tensor_and_the_version():
    w = weights()
    names = ["a.weight", "b.weight"]
    sent = wc.bucket_checksum(names, [w[n] for n in names])
    wc.check_bucket(sent, names, [w[n] for n in names], bucket=1, num_buckets=3, version=7)
    corrupt = w["b.weight"].clone()
    corrupt[2, 2] += 1e-6
    with pytest.raises(wc.WeightChecksumError, match=(
            "^weight sync of learner version 7: bucket 2 of 3 is corrupt: b.weight \\(4, 4\\) "
            "does not match the checksum its sender computed; refusing it.$")):
        wc.check_bucket(sent, names, [w["a.weight"], corrupt], bucket=1, num_buckets=3,
                        version=7)
    other = wc.bucket_checksum(["c.weight", "b.weight"], [w["a.weight"], w["b.weight"]])
    with pytest.raises(wc.WeightChecksumError, match=(
            "^weight sync of learner version 7: bucket 2 of 3 arrived misordered: its checksum "
            "belongs to another tensor where a.weight was expected; refusing it.$")):
        wc.check_bucket(other, names, [w[n] for n in names], bucket=1, num_buckets=3, version=7)
    with pytest.raises(wc.WeightChecksumError, match=(
            "^weight sync of learner version 7: bucket 2 of 3 came with 1 checksums for its 2 "
            "tensors \\(a.weight ...\\); refusing it.$")):
        wc.check_bucket(sent[:1], names, [w[n] for n in names], bucket=1, num_buckets=3,
                        version=7)


def corrupt_second_bucket(payloads):
    for index, (flat, checksum) in enumerate(payloads):
        if index == 1:
            flat = flat.clone()
            flat[3] += 1.0
        yield flat, checksum


def swap_buckets(index: int):
    """A transit that swaps buckets `index` and `index + 1`."""
    def swap(payloads):
        payloads = list(payloads)
        payloads[index], payloads[index + 1] = payloads[index + 1], payloads[index]
        yield from payloads
    return swap


def _receive(address: dict, rounds: int, queue, read) -> None:
    receiver = wb.Receiver(rank=1, device="cpu", **address)
    for _ in range(rounds):
        version, tensors = receiver.receive()
        got: dict[str, torch.Tensor] = {}
        try:
            for name, tensor in tensors:
                got[name] = tensor.clone()
            queue.put((version, got, None))
        except wc.WeightChecksumError as refusal:
            queue.put((version, got, str(refusal)))
    read.wait(60)  # shared tensors live until the parent has read them


def test_a_corrupt_or_misordered_bucket_is_refused_in_one_line_and_the_next_sync_arrives():
    w = weights()
    # 64 B: a.weight, b.weight (64 B each), c.bias and d.weight's two halves (128 B: rows 0-4
    # and 4-8) travel in five buckets, a and b of one size, d's halves too, so swapping either
    # pair in transit passes the broadcast and only the check sees it.
    sender = wb.Sender("gloo", w, world_size=2, timeout_s=60, bucket_bytes=64)
    assert [[p.label for p in b] for b in wb.buckets(sender.layout, 64)] == [
        ["a.weight"], ["b.weight"], ["c.bias"], ["d.weight[0:4]"], ["d.weight[4:8]"]]
    ctx = mp.get_context("spawn")
    queue, read = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=_receive, args=(sender.address(), 5, queue, read))
    child.start()
    sender.join()
    for version, in_transit in [(1, None), (2, corrupt_second_bucket),
                                (3, swap_buckets(0)), (4, swap_buckets(3)), (5, None)]:
        sender.in_transit = in_transit
        sender.send(w, version=version)  # returns: the refusing receiver read the whole stream
    got = [queue.get(timeout=60) for _ in range(5)]
    read.set()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert [(version, error) for version, _, error in got] == [
        (1, None),
        (2, "weight sync of learner version 2: bucket 2 of 5 is corrupt: b.weight (4, 4) does "
            "not match the checksum its sender computed; refusing it."),
        (3, "weight sync of learner version 3: bucket 1 of 5 arrived misordered: its checksum "
            "belongs to another tensor where a.weight was expected; refusing it."),
        (4, "weight sync of learner version 4: bucket 4 of 5 arrived misordered: its checksum "
            "belongs to another tensor where d.weight[0:4] was expected; refusing it."),
        (5, None)]
    assert list(got[1][1]) == ["a.weight"]  # nothing of the corrupt bucket was handed on
    assert got[2][1] == {}
    assert list(got[3][1]) == ["a.weight", "b.weight", "c.bias"]  # d was never whole
    for _, received, error in (got[0], got[4]):
        assert received.keys() == w.keys()
        for name, tensor in w.items():
            assert torch.equal(received[name], tensor), name
