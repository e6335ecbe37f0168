"""Several learners (`num_learners >= 2`) that take exactly the update one learner takes.

Every learner receives the whole rollout batch (a list of token episodes: small next to the
model) and builds the same packed batch, advantages and mini-batch order from it, so batch-level
statistics (whitening, running reward statistics, the adaptive KL coefficient) need no
communication and every learner checkpoints the same state. The work is what is split:

- scoring (old/reference log-probs, rollout-time values): each rank scores the prompt groups
  g ≡ rank (mod world) of the batch and an all-reduce sums the disjoint pieces (`score_rows`);
- each optimizer step: each rank trains on the groups g ≡ rank (mod world) of the mini-batch
  (`rank_rows`), its loss normalised by the whole mini-batch's counts
  (`rllib_llm.core.aggregation`) and multiplied by `world`, because DDP averages gradients:
  the averaged gradient is then the sum of the pieces, the one-learner gradient.

Prompt groups are never split, so a group baseline sees its whole group. Without torch
distributed (one learner) every function is the identity of the one-learner code.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from rllib_llm.exchange.columns import ACTION_MASK
from rllib_llm.learner.optimizer_steps import row_groups
from rllib_llm.learner.step_metrics import extreme


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) of this learner's process group; (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def rank_rows(rows: torch.Tensor, *, group_size: int, rank: int, world: int,
              groups: torch.Tensor | None = None) -> torch.Tensor:
    """The rows of whole prompt groups g ≡ rank (mod world) among `rows` (consecutive runs of
    `group_size` rows per group, as `optimizer_steps.minibatch_rows` returns them; or, where an
    episode spans several rows, runs of equal `groups`, the group of each of `rows`)."""
    if world == 1:
        return rows
    if groups is not None:
        _, nth = torch.unique_consecutive(groups, return_inverse=True)  # (N,) group ordinal
        if (int(nth[-1]) + 1) % world:
            raise ValueError(
                f"rank_rows: {int(nth[-1]) + 1} prompt groups cannot be shared equally by "
                f"{world} learners; each mini-batch needs a multiple of {world} prompt groups.")
        return rows[nth % world == rank]
    if rows.numel() % (group_size * world):
        raise ValueError(
            f"rank_rows: {rows.numel()} rows in groups of {group_size} cannot be shared equally "
            f"by {world} learners; each mini-batch needs a multiple of {world} prompt groups."
        )
    return rows.view(-1, group_size)[rank::world].reshape(-1)


def score_rows(fn: Callable[[dict[str, torch.Tensor]], torch.Tensor],
               data: dict[str, torch.Tensor], *, group_size: int) -> torch.Tensor:
    """fn(data) (B, ...) computed by every rank on its share of the prompt groups, summed
    across ranks: each row's value comes from exactly one rank, the rest add zeros."""
    rank, world = rank_and_world()
    if world == 1:
        return fn(data)
    n = data[ACTION_MASK].shape[0]
    rows = rank_rows(torch.arange(n), group_size=group_size, rank=rank, world=world,
                     groups=row_groups(data, group_size))
    part = fn({k: v[rows.to(v.device)] for k, v in data.items()
               if isinstance(v, torch.Tensor) and v.shape[:1] == (n,)})
    full = torch.zeros((n, *part.shape[1:]), dtype=part.dtype, device=part.device)
    full[rows.to(part.device)] = part
    dist.all_reduce(full, op=dist.ReduceOp.SUM)
    return full


def max_over_ranks(value: int) -> int:
    """The largest `value` any rank holds (collective: every rank calls it at once)."""
    _, world = rank_and_world()
    if world == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.int64, device=_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def all_reduce_step_metrics(values: dict[str, float]) -> dict[str, float]:
    """One optimizer step's metrics over all ranks: pieces add up (each was normalised by the
    whole mini-batch's counts), `*_max` / `*_min` take the max / min (`step_metrics.extreme`).
    Every rank must log the same names (they run the same code on equal shares)."""
    _, world = rank_and_world()
    if world == 1:
        return values
    ops = {"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, None: dist.ReduceOp.SUM}
    by_kind: dict[str | None, list[str]] = {}
    for name in sorted(values):  # the same order of collectives on every rank
        by_kind.setdefault(extreme(name), []).append(name)
    out = {}
    for kind, names in by_kind.items():
        tensor = torch.tensor([values[n] for n in names], dtype=torch.float64, device=_device())
        dist.all_reduce(tensor, op=ops[kind])
        out.update(zip(names, tensor.tolist()))
    return out


class BatchShare:
    """What RLlib's step counters read of a batch (`policy_batches` lengths and `env_steps()`),
    as one rank's share of it: rows and env steps split as evenly as whole units allow, so that
    summed over ranks every one counts once."""

    def __init__(self, batch, rank: int, world: int) -> None:
        self.policy_batches = {mid: range(_share(len(b), rank, world))
                               for mid, b in batch.policy_batches.items()}
        self._env_steps = _share(batch.env_steps(), rank, world)

    def env_steps(self) -> int:
        return self._env_steps


def _share(total: int, rank: int, world: int) -> int:
    return total // world + (rank < total % world)


def _device() -> torch.device:
    """Where this process group's collectives take tensors: NCCL's on the GPU, gloo's on CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
