"""The pieces a broadcast weight sync sends (`weight_broadcast.py`): whole weights, and weights
larger than a bucket cut into runs of whole rows (dim-0 slices), so every bucket, and with it a
sync's extra memory on either side, is at most `bucket_bytes`.

A weight of R rows whose bytes exceed a bucket travels as pieces of floor(bucket_bytes / row
bytes) rows, the last one shorter: 10 rows in a bucket of 3 rows' bytes are rows 0-3, 3-6, 6-9
and 9-10. A row larger than a bucket is a piece of its own (one row: the bucket is then that
row), since a row is the smallest part a receiver copies into its weight in place; at the
default 256 MiB no model's row comes near it. Each piece has a label, the weight's name with its
row range (`embed.weight[0:3]`), that its bucket's checksum carries, so a piece that arrives in
another piece's place is refused like a misordered weight.

The sender reads each piece's rows where the weight lives (`copy_rows`): a slice of a plain
tensor, and of an FSDP2 weight (a DTensor sharded on dim 0) only the rows of the piece, each
from the rank that owns them (`gather_rows`), so no rank ever holds the weight whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch.distributed.tensor import DTensor, Shard

if TYPE_CHECKING:
    from rllib_llm.exchange.weight_broadcast import TensorSpec


@dataclass(frozen=True)
class Piece:
    """Rows [start, stop) of the weight `spec` (a 0-dim weight: its one element, rows 0-1)."""

    spec: TensorSpec
    start: int
    stop: int

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def whole(self) -> bool:
        return (self.start, self.stop) == (0, num_rows(self.spec.shape))

    @property
    def rows(self) -> slice | None:
        """The rows this piece fills in its weight; None when it is the whole weight."""
        return None if self.whole else slice(self.start, self.stop)

    @property
    def label(self) -> str:
        """What its bucket's checksum names it by: the weight's name, with the rows if split."""
        return self.name if self.whole else f"{self.name}[{self.start}:{self.stop}]"

    @property
    def shape(self) -> tuple[int, ...]:
        return self.spec.shape if self.whole else (self.stop - self.start, *self.spec.shape[1:])

    @property
    def numel(self) -> int:
        return int(torch.Size(self.shape).numel())

    @property
    def nbytes(self) -> int:
        return self.numel * self.spec.dtype.itemsize


def num_rows(shape: tuple[int, ...]) -> int:
    """Rows of a weight of `shape`: its dim 0 (a 0-dim weight: one)."""
    return shape[0] if shape else 1


def pieces(layout: list[TensorSpec], bucket_bytes: int) -> list[Piece]:
    """Each weight of `layout`, in order, whole where it fits a bucket, else cut into runs of
    at most `bucket_bytes` of whole rows (at least one row each: see the module's docstring)."""
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes={bucket_bytes} must be >= 1")
    out: list[Piece] = []
    for spec in layout:
        rows = num_rows(spec.shape)
        if spec.nbytes <= bucket_bytes or rows <= 1:
            out.append(Piece(spec, 0, rows))
            continue
        per_piece = max(1, bucket_bytes // (spec.nbytes // rows))
        out.extend(Piece(spec, start, min(start + per_piece, rows))
                   for start in range(0, rows, per_piece))
    return out


def buckets(layout: list[TensorSpec], bucket_bytes: int) -> list[list[Piece]]:
    """`layout`'s pieces packed in order into runs of one dtype of at most `bucket_bytes` (a
    piece of one row larger than a bucket alone)."""
    out: list[list[Piece]] = []
    size = 0
    for piece in pieces(layout, bucket_bytes):
        if out and out[-1][0].spec.dtype == piece.spec.dtype and \
                size + piece.nbytes <= bucket_bytes:
            out[-1].append(piece)
            size += piece.nbytes
        else:
            out.append([piece])
            size = piece.nbytes
    return out


def copy_rows(out: torch.Tensor | None, tensor: torch.Tensor, piece: Piece) -> None:
    """Copy `piece`'s rows of `tensor` into `out` (shaped `piece.shape`).

    A DTensor sharded on dim 0 over a 1-D mesh (FSDP2's parameters) is read collectively:
    every rank of its mesh calls this for the same pieces in the same order, the mesh's first
    rank (the sender) with `out`, the others with None, and each rank sends the piece's rows
    it owns (`gather_rows`). A DTensor of another layout is gathered whole while it is copied
    (not FSDP2's: FSDP2 shards every parameter on dim 0).
    """
    if isinstance(tensor, DTensor):
        mesh = tensor.device_mesh
        if mesh.ndim == 1 and tuple(tensor.placements) == (Shard(0),):
            gather_rows(out, tensor.to_local(), rows=tensor.shape[0], start=piece.start,
                        stop=piece.stop, group=mesh.get_group())
            return
        tensor = tensor.full_tensor()
    if out is not None:
        out.copy_(tensor.detach() if piece.whole else tensor.detach()[piece.start:piece.stop])


def gather_rows(out: torch.Tensor | None, local: torch.Tensor, *, rows: int, start: int,
                stop: int, group) -> None:
    """Rows [start, stop) of a weight of `rows` rows split on dim 0 over `group`'s ranks as
    torch.chunk splits it (FSDP2's `Shard(0)`: ceil(rows / world) rows per rank, the last ranks
    fewer or none; `local` is this rank's unpadded shard), written into `out` (stop - start,
    ...) on the group's rank 0. Collective: every rank calls it; each rank owning some of the
    rows sends exactly those to rank 0, which receives them straight into their place in
    `out` (through a buffer on the shards' device when `out` is elsewhere: a GPU's shards
    sent over gloo from host memory), so no rank holds more than the rows asked for.
    """
    rank, world = group.rank(), group.size()
    per_rank = -(-rows // world)  # torch.chunk's split size
    expected = max(0, min(rows, (rank + 1) * per_rank) - rank * per_rank)
    if local.shape[0] != expected:
        raise ValueError(f"rank {rank} of {world} holds {local.shape[0]} rows of a weight of "
                         f"{rows} rows; split as torch.chunk splits it, it would hold "
                         f"{expected}")
    for owner in range(world):
        lo, hi = max(start, owner * per_rank), min(stop, (owner + 1) * per_rank, rows)
        if lo >= hi or rank not in (owner, 0):
            continue
        if rank == owner:
            mine = local.detach()[lo - owner * per_rank:hi - owner * per_rank]
            if rank == 0:
                out[lo - start:hi - start].copy_(mine)
            else:
                group.send([mine.contiguous()], 0, 0).wait()
            continue
        _receive_into(out[lo - start:hi - start], group, owner, device=local.device)


def _receive_into(target: torch.Tensor, group, src: int, *, device: torch.device) -> None:
    """Receive rank `src`'s rows into `target` (contiguous: a run of rows of a bucket)."""
    if target.device == device:
        group.recv([target], src, 0).wait()
        return
    staged = torch.empty(target.shape, dtype=target.dtype, device=device)
    group.recv([staged], src, 0).wait()
    target.copy_(staged)


def whole_weights(arrived: Iterable[tuple[Piece, torch.Tensor]]
                  ) -> Iterator[tuple[Piece, torch.Tensor]]:
    """The weights whole from a stream of pieces in layout order: a whole piece as it came, a
    split weight assembled into a tensor of its own from its pieces (consecutive in the
    stream) and handed on after its last row, as a whole piece. Holds one weight at a time."""
    assembling: torch.Tensor | None = None
    for piece, tensor in arrived:
        if piece.whole:
            yield piece, tensor
            continue
        if piece.start == 0:
            assembling = torch.empty(piece.spec.shape, dtype=tensor.dtype, device=tensor.device)
        assembling[piece.start:piece.stop].copy_(tensor)
        if piece.stop == piece.spec.shape[0]:
            yield Piece(piece.spec, 0, piece.stop), assembling
            assembling = None
