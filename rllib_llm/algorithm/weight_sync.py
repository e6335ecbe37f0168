"""The driver's side of direct weight sync: a broadcast (`weight_sync_backend` 'nccl' or 'gloo')
or CUDA IPC handles ('cuda_ipc'), instead of RLlib's object-store sync.

Broadcast: the learner is rank 0 of a group and every remote env runner's engine holds the next
ranks (one per vLLM tensor-parallel worker). A sync asks the learner to send and every runner to
receive at the same time: the learner's call runs in a thread while Ray runs the runners' calls,
since each side blocks until the other has joined in.

CUDA IPC: the learner returns handles to its weights on its GPU; each runner on that GPU copies
from them (`exchange/weight_ipc.py`). The runners' GPUs are checked once per set of runners: a
runner that cannot see the learner's GPU is a placement error, raised, not fallen back from.

Every bucket a broadcast carries comes with its checksum, checked by each runner before the bucket
reaches its engine (`exchange/weight_checksums.py`). A bucket that fails it stops the run with
the runner's one line (`WeightChecksumError`: the bucket, the tensor, the learner's version):
weights that arrived corrupt or misordered are a fault to find, not one to sample from or to
paper over by syncing again through the object store.

The members are fixed when a sync is set up, so anything that changes them (a runner that died,
a restored runner) makes the next sync fall back to RLlib's object-store sync, and the one after
it set up again. The driver's own env runner is not a member: it receives the learner's weights
only when something reads them (evaluation, checkpoints, restoring a runner).

A process that dies inside a broadcast (peers: TRL's weight sync sat in an NCCL broadcast with no
timeout until the job was killed, huggingface/trl#6913) ends the sync within
`weight_sync_timeout_s`, in one line naming what died and the setting: every collective waits at
most that long, and the learner, whose send fails first, drops the group, so the runners still
receiving fail at once too (`exchange/weight_broadcast.py`). A runner that died is RLlib's to
restore where it tolerates failed runners: the sync warns, goes through the object store this
time, and builds a new group once the runner is back. Where RLlib does not tolerate them, or the
learner died, the run stops with `WeightSyncError`.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from ray.exceptions import RayActorError
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_RL_MODULE
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

from rllib_llm.exchange.weight_broadcast import BroadcastBroken, first_line
from rllib_llm.exchange.weight_checksums import WeightChecksumError

logger = logging.getLogger(__name__)


class WeightSyncError(RuntimeError):
    """A direct weight sync that cannot go on, in one line: what failed, the setting, the fix."""


class DirectWeightSync:
    """What both direct syncs share: the members, the fall-back, the driver's own runner.
    Subclasses say how one sync runs (`_push`)."""

    def __init__(self, config, learner_group, env_runner_group) -> None:
        self.config = config
        self.learner_group = learner_group
        self.env_runner_group = env_runner_group
        self._members: list[int] | None = None  # remote runner ids the sync is set up for
        self._local_runner_stale = False

    def sync(self) -> bool:
        """Send the learner's weights to every remote runner.

        Returns False, having changed nothing, when a runner is down or the sync failed (a
        runner died or timed out mid-sync: one warning line): the caller then syncs through the
        object store, and the sync is set up again next time. Raises `WeightChecksumError` when
        a runner refused a bucket of the weights, and `WeightSyncError` when the learner died or
        did not finish in time, or a runner died where RLlib does not tolerate failed runners.
        """
        group = self.env_runner_group
        ids = group.healthy_env_runner_ids()
        if not ids or len(ids) < group.num_remote_env_runners():
            self.invalidate()
            return False
        start = time.monotonic()
        try:
            if self._members != ids:
                self._set_up(ids)
                self._members = list(ids)
            versions, version = self._push(ids)
        except (ValueError, WeightChecksumError, WeightSyncError):
            self.invalidate()
            raise  # a configuration error (e.g. 'nccl' without GPUs), corrupt weights, a death
        except Exception as e:  # a runner died mid-sync (tolerated), or the group timed out
            self.invalidate()
            logger.warning("%s; syncing through the object store this time, and building the "
                           "group again with the runners then healthy.",
                           self._failure(ids, e, time.monotonic() - start))
            return False
        if sorted(versions) != [version] * len(ids):
            logger.warning("%s weight sync: runners report versions %s, the learner sent %s; "
                           "syncing through the object store.", self.config.weight_sync_backend,
                           versions, version)
            self.invalidate()
            return False
        self._local_runner_stale = True
        return True

    @property
    def members(self) -> list[int] | None:
        """The remote env runner ids the sync is set up for (None: set up again next time)."""
        return self._members

    def invalidate(self) -> None:
        """Forget the members: the next `sync` sets up again with the runners then healthy."""
        self._members = None

    def refresh_local_env_runner(self) -> None:
        """Give the driver's env runner the learner's current weights, if a direct sync left it
        behind (it is not a member: it only evaluates, checkpoints and restores others)."""
        local = self.env_runner_group.local_env_runner
        if local is None or not self._local_runner_stale:
            return
        state = self.learner_group.get_state(
            components=f"{COMPONENT_LEARNER}/{COMPONENT_RL_MODULE}", inference_only=True,
        )[COMPONENT_LEARNER]
        local.set_state({k: state[k] for k in (COMPONENT_RL_MODULE, WEIGHTS_SEQ_NO)})
        self._local_runner_stale = False

    def mark_local_env_runner_fresh(self) -> None:
        """The object-store path synced the driver's runner too."""
        self._local_runner_stale = False

    def _failure(self, ids: list[int], error: BaseException, seconds: float) -> str:
        """What went wrong in a sync to runners `ids` that raised `error`, in one line."""
        dead = self._dead(ids)
        what = f"env runner(s) {dead} died during it" if dead else "it failed"
        return (f"weight_sync_backend={self.config.weight_sync_backend!r}: {what} after "
                f"{seconds:.1f} s (weight_sync_timeout_s={self.config.weight_sync_timeout_s:g}): "
                f"{first_line(error)}")

    def _dead(self, ids: list[int]) -> list[int]:
        """Runners of `ids` RLlib has taken out of service: a call to them raised a Ray error
        (the process died; a runner's own errors come back as answers, see `refusal_or`)."""
        healthy = set(self.env_runner_group.healthy_env_runner_ids())
        return [i for i in ids if i not in healthy]

    # --- what each sync does ----------------------------------------------------------------------
    def _set_up(self, ids: list[int]) -> None:
        """Prepare a sync to runners `ids` (raise ValueError for a placement it cannot serve)."""

    def _push(self, ids: list[int]) -> tuple[list[Any], Any]:
        """One sync: (the versions runners `ids` report, the version the learner sent)."""
        raise NotImplementedError

    def _on_runners(self, fn, ids: list[int]) -> list[Any]:
        """`fn(runner)` on remote runners `ids`; an error if any did not answer in time, a
        `WeightSyncError` if one died and RLlib does not tolerate failed runners."""
        timeout_s = self.config.weight_sync_timeout_s
        try:
            results = self.env_runner_group.foreach_env_runner(
                fn, remote_worker_ids=ids, local_env_runner=False, timeout_seconds=timeout_s)
        except RayActorError as death:  # RLlib raises it where it does not tolerate failures
            raise WeightSyncError(
                f"weight_sync_backend={self.config.weight_sync_backend!r}: env runner(s) "
                f"{self._dead(ids) or '?'} died during the weight sync "
                f"(weight_sync_timeout_s={timeout_s:g}) and failed env runners are not "
                "tolerated: set config.fault_tolerance(restart_failed_env_runners=True) to carry "
                f"on with them restored ({first_line(death)})") from None
        if len(results) != len(ids):
            dead = self._dead(ids)
            raise RuntimeError(f"env runner(s) {dead} died" if dead else
                               f"{len(ids) - len(results)} env runner(s) did not answer within "
                               f"weight_sync_timeout_s={timeout_s:g}")
        return results

    def _on_learner(self, fn) -> Any:
        """`fn(learner)` on the (single) learner, local or remote; raises its error, or a
        `WeightSyncError` if a remote learner died or did not answer in time."""
        timeout_s = self.config.weight_sync_timeout_s
        # A local learner runs `fn` here, ended by its collectives' own timeouts.
        answers = self.learner_group.foreach_learner(
            fn, timeout_seconds=2 * timeout_s).result_or_errors
        if not answers:
            raise WeightSyncError(self._learner_lost(f"did not answer within 2 x "
                                                     f"weight_sync_timeout_s={timeout_s:g}"))
        result = answers[0]
        if not result.ok:
            if isinstance(result.get(), RayActorError):
                raise WeightSyncError(self._learner_lost(
                    f"died (weight_sync_timeout_s={timeout_s:g}): {first_line(result.get())}"))
            raise result.get()
        return result.get()

    def _learner_lost(self, what: str) -> str:
        return (f"weight_sync_backend={self.config.weight_sync_backend!r}: the learner {what}; "
                "the run cannot go on without it: resume the run from its last checkpoint")


class BroadcastWeightSync(DirectWeightSync):
    """A broadcast group, built for the current runners and used for each sync."""

    def __init__(self, config, learner_group, env_runner_group) -> None:
        super().__init__(config, learner_group, env_runner_group)
        # One rank per process that holds engine weights.
        self.ranks_per_runner = (config.vllm_tensor_parallel_size
                                 if config.rollout_engine == "vllm" else 1)

    def _set_up(self, ids: list[int]) -> None:
        cfg = self.config
        world_size = 1 + len(ids) * self.ranks_per_runner
        address = self._on_learner(lambda learner: learner.open_weight_broadcast(
            backend=cfg.weight_sync_backend, world_size=world_size,
            timeout_s=cfg.weight_sync_timeout_s, bucket_bytes=cfg.weight_sync_bucket_bytes,
        ))
        first_rank = {wid: 1 + k * self.ranks_per_runner for k, wid in enumerate(ids)}
        self._concurrently(
            lambda learner: learner.join_weight_broadcast(),
            lambda runner: runner.join_weight_broadcast(
                first_rank=first_rank[runner.worker_index], **address),
            ids,
        )

    def _push(self, ids: list[int]) -> tuple[list[Any], Any]:
        versions, version = self._concurrently(
            lambda learner: learner.broadcast_weights(),
            lambda runner: refusal_or(runner.receive_weights), ids)
        for answer in versions:
            if isinstance(answer, (WeightChecksumError, BroadcastBroken)):
                raise answer
        return versions, version

    def _concurrently(self, on_learner, on_runner, ids: list[int]) -> tuple[list[Any], Any]:
        """Run `on_learner` on the learner and `on_runner` on runners `ids` at the same time.

        A failure of either side is raised once both have ended, a `WeightSyncError` first."""
        pool = ThreadPoolExecutor(max_workers=1)
        learner_call = pool.submit(self._on_learner, on_learner)
        pool.shutdown(wait=False)  # a call that never returns is left behind, not waited for
        runner_error = None
        try:
            runner_results = self._on_runners(on_runner, ids)
        except Exception as e:
            runner_error = e
        try:
            learner_result = self._learner_result(learner_call)
        except Exception:
            if isinstance(runner_error, WeightSyncError):
                raise runner_error from None
            raise
        if runner_error is not None:
            raise runner_error
        return runner_results, learner_result

    def _learner_result(self, call: Future) -> Any:
        """The learner's answer, waiting for it at most 2 x weight_sync_timeout_s: each of its
        collectives ends within weight_sync_timeout_s by itself, so this bounds only a call
        that hangs outside them (a local learner's thread cannot be stopped, only left)."""
        timeout_s = self.config.weight_sync_timeout_s
        try:
            return call.result(timeout=2 * timeout_s)
        except FutureTimeout:
            raise WeightSyncError(self._learner_lost(
                f"did not finish its part of the weight sync within 2 x "
                f"weight_sync_timeout_s={timeout_s:g}")) from None


class CudaIpcWeightSync(DirectWeightSync):
    """Handles to the learner's weights on its GPU, copied by each runner on that GPU."""

    def _set_up(self, ids: list[int]) -> None:
        from rllib_llm.exchange.weight_ipc import index_of

        # Sharing is only handles, cheap enough to learn the GPU the learner's weights are on.
        learner_gpu = self._on_learner(lambda learner: learner.share_weights().device_uuid)
        for visible in self._on_runners(lambda runner: runner.gpu_uuids(), ids):
            index_of(learner_gpu, visible)  # raises ValueError, naming the fix

    def _push(self, ids: list[int]) -> tuple[list[Any], Any]:
        shared = self._on_learner(lambda learner: learner.share_weights())
        return (self._on_runners(lambda runner: runner.load_shared_weights(shared), ids),
                shared.version)


def refusal_or(load) -> Any:
    """`load()` on a runner, a `WeightChecksumError` or `BroadcastBroken` returned as its answer
    instead of raised: RLlib's runner group logs and drops a runner's error where it tolerates
    failed runners (its default), and a refused bucket must reach the driver; a runner whose
    broadcast broke (the learner or another runner died) is itself fine, and RLlib would take it
    out of service, logging gloo's stack."""
    try:
        return load()
    except (WeightChecksumError, BroadcastBroken) as refusal:
        return refusal


def direct_weight_sync(config, learner_group, env_runner_group) -> DirectWeightSync | None:
    """The direct sync `config.weight_sync_backend` asks for; None for the object store."""
    if config.weight_sync_backend == "object_store":
        return None
    cls = CudaIpcWeightSync if config.weight_sync_backend == "cuda_ipc" else BroadcastWeightSync
    return cls(config, learner_group, env_runner_group)
