"""Weight sync by collective broadcast: the learner (rank 0) sends, every engine process receives.

RLlib's default sync (`weight_sync_backend="object_store"`) ships a state dict through Ray's
object store: the learner copies its weights to host memory and serialises them, and each env
runner fetches and deserialises its own copy. With engines on GPUs that is two trips through
host memory, and across nodes the weights cross the network once per runner. A broadcast moves
them straight from the learner's device to every engine's device: NCCL between GPUs (what verl,
OpenRLHF and TRL do), gloo over TCP between CPU processes, which runs the same code in the tests.

The group is built from a `TCPStore` the learner hosts and never touches torch.distributed's
default group, so it lives beside the learner's own (DDP) group and vLLM's tensor-parallel one.

Protocol, per sync: a header (the weight version, int64) and then the weights in buckets: flat
buffers of one dtype, at most `bucket_bytes` each, packed with the pieces of a `layout` both
sides agreed on when the group was built (`weight_pieces.py`: each weight whole, or, where it is
larger than a bucket, in runs of whole rows of at most a bucket), each bucket followed by its
checksum (`weight_checksums.py`: per piece, its label's CRC-32 and a digest of its bytes; the
label names a piece's rows, so a misordered piece is refused too). Receivers get the weights as
a stream, bucket by bucket, each checked before it is handed on, to load as they arrive: whole
`(name, tensor)` pairs (`receive`) or `(name, rows, tensor)` pieces (`receive_pieces`); the
version comes with the weights, so a runner can never label new weights with an old version or
vice versa. A bucket that fails its check raises `WeightChecksumError` in one line (the bucket,
the piece, the version) once the receiver has read the rest of the stream, so the sender's call
ends and the group stays in step.

Memory: the sender fills each bucket's buffer a piece at a time and frees it before the next,
so a sync holds one bucket beyond the weights themselves (a single row larger than a bucket is
a bucket of its own). An FSDP2 learner passes its sharded weights (DTensors): each piece's rows
are read from the ranks that own them straight into the bucket (`weight_pieces.gather_rows`),
so no rank holds a weight whole: SmolLM2-135M in 8 MiB buckets held 7.9 MiB against 522 MiB
sent from a whole state dict (and 108 MiB, its embedding, when a weight travelled whole;
`benchmarks/memory/weight_sync_memory.py`). A receiver holds the bucket arriving and the one its
engine last read (the torch engine: 16 MiB at 8 MiB): the torch engine copies each piece into
its weight's rows in place (`receive_pieces`); an engine that loads whole tensors (vLLM) also
holds a weight larger than a bucket while it is assembled (`receive`).
"""

from __future__ import annotations

import datetime
import os
import re
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from rllib_llm.exchange.weight_checksums import WeightChecksumError, bucket_checksum, check_bucket
from rllib_llm.exchange.weight_pieces import Piece, buckets, copy_rows, whole_weights

BACKENDS = ("nccl", "gloo")

# One bucket as it travels: the flat buffer (sum of numels,) and its checksum (tensors, 2) int64.
Payload = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of the layout: its Hugging Face name, shape, dtype, and the names of tensors
    tied to it (sharing its storage), which travel once but are delivered under each name."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    aliases: tuple[str, ...] = ()

    @property
    def numel(self) -> int:
        return int(torch.Size(self.shape).numel())

    @property
    def nbytes(self) -> int:
        return self.numel * torch.empty((), dtype=self.dtype).element_size()


def layout_of(state_dict: dict[str, torch.Tensor]) -> list[TensorSpec]:
    """The layout of a model's state dict, in its order, each storage once (the shapes and
    dtypes only: a sharded model's DTensors give the whole weights' without gathering them).

    A tied LM head shares the embedding's storage: it is sent once, under the first name (the
    embedding's), and receivers get it under both names. vLLM needs both: its in-place reload
    restores any parameter it was not given, a tied head included (measured: dropping the
    alias left log-probs 0.06-0.12 nats off the learner's).
    """
    first_name: dict[tuple[int, int], str] = {}
    specs: dict[str, TensorSpec] = {}
    for name, tensor in state_dict.items():
        # A DTensor (FSDP2's sharded parameter) is tied by being the same parameter.
        key = (id(tensor), -1) if isinstance(tensor, DTensor) else \
            (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        if key in first_name:
            owner = specs[first_name[key]]
            specs[owner.name] = replace(owner, aliases=(*owner.aliases, name))
            continue
        first_name[key] = name
        specs[name] = TensorSpec(name, tuple(tensor.shape), tensor.dtype)
    return list(specs.values())


def check_backend(backend: str, device: torch.device | str) -> None:
    """A clear error for a backend this process cannot use with tensors on `device`."""
    if backend not in BACKENDS:
        raise ValueError(f"weight_sync_backend={backend!r}: a broadcast uses one of {BACKENDS}")
    if backend == "nccl" and torch.device(device).type != "cuda":
        raise ValueError(
            f"weight_sync_backend='nccl' moves weights between GPUs, but this process keeps them "
            f"on {torch.device(device).type!r}. Use 'gloo' for CPU processes (or "
            "'object_store')."
        )
    if backend == "gloo" and not dist.is_gloo_available():
        raise ValueError("weight_sync_backend='gloo': this torch build has no gloo support")


def open_store(world_size: int, timeout_s: float) -> tuple[dist.TCPStore, str, int]:
    """Host the group's rendezvous store on a free port of this node: (store, host, port)."""
    host = _node_ip()
    store = dist.TCPStore(host, 0, world_size, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=timeout_s))
    return store, host, store.port


def join_group(backend: str, *, host: str, port: int, rank: int, world_size: int,
               timeout_s: float, store: dist.TCPStore | None = None) -> dist.ProcessGroup:
    """Join the broadcast group as `rank`; blocks until all `world_size` ranks have joined.

    Rank 0 passes the store it opened with `open_store`; the others connect to `host:port`.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")
    timeout = datetime.timedelta(seconds=timeout_s)
    if store is None:
        store = dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)
    if backend == "gloo":
        return dist.ProcessGroupGloo(store, rank, world_size, timeout)
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout  # the watchdog's limit for each collective of this group
        with _nccl_clean_up_only():
            return dist.ProcessGroupNCCL(store, rank, world_size, options)
    raise ValueError(f"weight_sync_backend={backend!r}: a broadcast uses one of {BACKENDS}")


_NCCL_ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING"


@contextmanager
def _nccl_clean_up_only() -> Iterator[None]:
    """`TORCH_NCCL_ASYNC_ERROR_HANDLING=2` while an NCCL group is built (torch reads it then, per
    group), unless the user set it. torch's default, 3, has the watchdog take the whole process
    down when a collective outlives the group's timeout: a runner that died mid-broadcast would
    then kill the learner too. 2 aborts this group's communicator and leaves the process alive,
    the blocked `wait` raising (torch's "ProcessGroupNCCL environment variables"). Not run here:
    the tests have no GPUs; gloo runs the same timeout path."""
    if _NCCL_ERROR_HANDLING in os.environ:
        yield
        return
    os.environ[_NCCL_ERROR_HANDLING] = "2"
    try:
        yield
    finally:
        del os.environ[_NCCL_ERROR_HANDLING]


class Sender:
    """Rank 0 of a broadcast group: the learner's side.

    `open` hosts the rendezvous store; `join` blocks until every receiver has joined (call it
    while the receivers join); `send` broadcasts one version of the weights.

    `in_transit` is a test seam: a function through which the stream of payloads (each bucket's
    flat buffer and checksum, after the checksum is taken) passes on its way to the receivers;
    a test corrupts or reorders buckets with it. None sends them as they are.
    """

    def __init__(self, backend: str, state_dict: dict[str, torch.Tensor], *, world_size: int,
                 timeout_s: float, bucket_bytes: int,
                 in_transit: Callable[[Iterator[Payload]], Iterator[Payload]] | None = None
                 ) -> None:
        if world_size < 2:
            raise ValueError(f"world_size={world_size}: a broadcast needs at least one receiver")
        first = next(iter(state_dict.values()))
        # gloo sends from host memory; nccl from the learner's GPU.
        self.device = first.device if backend == "nccl" else torch.device("cpu")
        check_backend(backend, self.device)
        self.backend, self.world_size, self.timeout_s = backend, world_size, timeout_s
        self.bucket_bytes, self.in_transit = bucket_bytes, in_transit
        self.layout = layout_of(state_dict)
        self._store, self.host, self.port = open_store(world_size, timeout_s)
        self.group: dist.ProcessGroup | None = None

    def address(self) -> dict:
        """What every receiver needs to join (pass it to `Receiver(..., **address)`)."""
        return {"backend": self.backend, "host": self.host, "port": self.port,
                "world_size": self.world_size, "timeout_s": self.timeout_s,
                "layout": self.layout, "bucket_bytes": self.bucket_bytes}

    def join(self) -> None:
        self.group = join_group(self.backend, host=self.host, port=self.port, rank=0,
                                world_size=self.world_size, timeout_s=self.timeout_s,
                                store=self._store)

    def send(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Broadcast `version`, then `state_dict`'s tensors bucket by bucket, each bucket
        followed by its checksum. `state_dict` holds the tensors `layout_of` saw, or DTensors
        of their shapes sharded on dim 0, whose pieces' rows are gathered as their bucket fills
        (collective: every rank of their mesh reads the same pieces, `weight_pieces.copy_rows`;
        a broadcast sync has one learner, whose mesh is itself)."""
        if self.group is None:
            raise RuntimeError("Sender.send before join() (or after a broken broadcast): the "
                               "receivers have not joined a group")
        try:
            _broadcast(self.group, torch.tensor([version], dtype=torch.int64, device=self.device))
            payloads = self._payloads(state_dict)
            for flat, checksum in (self.in_transit or iter)(payloads):
                _broadcast(self.group, flat)
                _broadcast(self.group, checksum)
                del flat, checksum  # before the next bucket is filled: one bucket at a time
        except BaseException:
            # Whatever stopped the stream (a broken broadcast, an error filling a bucket), the
            # group is out of step. This was its last reference: it closes its connections, so
            # every receiver's broadcast fails now instead of after its own timeout.
            self.group = None
            raise

    def _payloads(self, state_dict: dict[str, torch.Tensor]) -> Iterator[Payload]:
        """Each bucket filled from `state_dict` a piece at a time, and its checksum, on the
        sending device."""
        with torch.no_grad():
            for bucket in buckets(self.layout, self.bucket_bytes):
                flat = torch.empty(sum(p.numel for p in bucket), dtype=bucket[0].spec.dtype,
                                   device=self.device)  # (sum of numels,)
                views = _views(flat, bucket)
                for piece, view in zip(bucket, views, strict=True):
                    copy_rows(view, state_dict[piece.name], piece)
                checksum = bucket_checksum([p.label for p in bucket], views)
                yield flat, checksum.to(self.device)
                del flat, views, checksum


class Receiver:
    """Any other rank of a broadcast group: an engine process's side.

    Joining blocks until every rank has joined. `receive` returns the version and the weights
    as `(name, tensor)` pairs, whole; `receive_pieces` the version and `(name, rows, tensor)`
    triples as they arrive (rows: the slice of the weight's dim 0 the tensor fills, None for a
    whole weight). Both receive bucket by bucket as the iterator is consumed.
    """

    def __init__(self, *, backend: str, host: str, port: int, rank: int, world_size: int,
                 timeout_s: float, layout: list[TensorSpec], bucket_bytes: int,
                 device: torch.device | str) -> None:
        self.device = torch.device(device) if backend == "nccl" else torch.device("cpu")
        check_backend(backend, self.device)
        self.layout, self.bucket_bytes = layout, bucket_bytes
        self.group = join_group(backend, host=host, port=port, rank=rank,
                                world_size=world_size, timeout_s=timeout_s)

    def receive(self) -> tuple[int, Iterator[tuple[str, torch.Tensor]]]:
        """The version, and the weights whole: views of the bucket they arrived in (a fresh
        buffer per bucket, checked against its checksum before any of it is handed on: see
        `WeightChecksumError`), and a weight larger than a bucket assembled from its pieces
        into a tensor of its own (`whole_weights`): for an engine that loads whole tensors
        (vLLM's `reload_weights`), whose extra memory is then a bucket or that weight. Consume
        the whole iterator, or the group falls out of step with the sender."""
        version = self._version()
        return version, ((name, tensor) for piece, tensor in whole_weights(self._pieces(version))
                         for name in (piece.name, *piece.spec.aliases))

    def receive_pieces(self) -> tuple[int, Iterator[tuple[str, slice | None, torch.Tensor]]]:
        """The version, and the weights as they arrive, `(name, rows, tensor)`: `tensor` (a
        view of its bucket, checked as `receive`'s are) fills rows `rows` of weight `name`, or
        all of it where `rows` is None. An engine that copies each into its weight's rows in
        place holds a bucket, never a whole weight. Consume the whole iterator."""
        version = self._version()
        return version, ((name, piece.rows, tensor) for piece, tensor in self._pieces(version)
                         for name in (piece.name, *piece.spec.aliases))

    def _version(self) -> int:
        header = torch.empty(1, dtype=torch.int64, device=self.device)
        _broadcast(self.group, header)
        return int(header.item())

    def _pieces(self, version: int) -> Iterator[tuple[Piece, torch.Tensor]]:
        layout = buckets(self.layout, self.bucket_bytes)
        for index, bucket in enumerate(layout):
            flat, checksum = self._receive_bucket(bucket)
            views = _views(flat, bucket)
            try:
                check_bucket(checksum, [p.label for p in bucket], views, bucket=index,
                             num_buckets=len(layout), version=version)
            except WeightChecksumError:
                for rest in layout[index + 1:]:  # read the rest: the sender's call then ends
                    self._receive_bucket(rest)
                raise
            yield from zip(bucket, views, strict=True)
            del flat, views  # before the next bucket arrives

    def _receive_bucket(self, bucket: list[Piece]) -> Payload:
        flat = torch.empty(sum(p.numel for p in bucket), dtype=bucket[0].spec.dtype,
                           device=self.device)  # (sum of numels,)
        _broadcast(self.group, flat)
        checksum = torch.empty(len(bucket), 2, dtype=torch.int64, device=self.device)
        _broadcast(self.group, checksum)
        return flat, checksum


def _views(flat: torch.Tensor, bucket: list[Piece]) -> list[torch.Tensor]:
    """The bucket's pieces, shaped, as views of its flat buffer, in order."""
    return [part.view(piece.shape)
            for part, piece in zip(flat.split([p.numel for p in bucket]), bucket, strict=True)]


class BroadcastBroken(RuntimeError):
    """A broadcast of the group failed: a rank left it (its process died) or did not take part
    within the group's timeout. The group is unusable after that; the caller builds a new one."""


def _broadcast(group: dist.ProcessGroup, tensor: torch.Tensor) -> None:
    """Broadcast `tensor` from rank 0, waiting at most the group's timeout.

    With a timeout NCCL's `wait` blocks this thread until the collective is done, and on timeout
    aborts the communicator and raises; without one it only orders the current stream after
    the collective, and a hung broadcast would block the next `.item()` or synchronize forever.
    A failed group is let go of here (and by `Sender.send`): a gloo group closes its sockets when
    the last reference goes (`shutdown()` does not), so the other ranks' pending broadcasts fail
    at once instead of each waiting out its own timeout (measured: a receiver whose sender
    stopped waited the whole timeout, one whose sender dropped the group 0.5 s). NCCL's peers
    learn only by their own timeouts; its paths here are written from torch's documentation and
    source (`WorkNCCL::wait`), not run: the tests have no GPUs."""
    timeout = group.options._timeout
    try:
        group.broadcast(tensor, 0).wait(timeout)
    except RuntimeError as error:  # torch's DistBackendError is one
        where = f"rank {group.rank()} of {group.size()}"
        del group  # this frame lives on in the traceback: it must not keep the group open
        raise BroadcastBroken(f"{where}: {first_line(error)} (timeout "
                              f"{timeout.total_seconds():g} s)") from error


def first_line(error: BaseException) -> str:
    """A torch.distributed error's message without its source location and boilerplate: gloo's
    '[.../pair.cc:537] Read error [127.0.0.1]:4998: Connection reset by peer. This is typically
    caused by ...' is 'Read error [127.0.0.1]:4998: Connection reset by peer'."""
    lines = str(error).strip().splitlines() or [type(error).__name__]
    line = re.sub(r"^\[[^\]]*\] ", "", lines[0])
    return line.split(". This is typically")[0]


def _node_ip() -> str:
    """This node's address as Ray sees it (reachable by the other nodes of the cluster)."""
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # no Ray here (the unit tests): a one-machine group
        return socket.gethostbyname(socket.gethostname())
