"""The driver's side of broadcast weight sync (`weight_sync_backend` 'nccl' or 'gloo').

The learner is rank 0 of a group and every remote env runner's engine holds the next ranks (one
per vLLM tensor-parallel worker). A sync asks the learner to send and every runner to receive at
the same time: the learner's call runs in a thread while Ray runs the runners' calls, since each
side blocks until the other has joined in.

The group's members are fixed when it is built, so anything that changes them (a runner that
died, a restored runner) makes the next sync fall back to RLlib's object-store sync, and the one
after it rebuild the group. The driver's own env runner is not a member: it receives the
learner's weights only when something reads them (evaluation, checkpoints, restoring a runner).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_RL_MODULE
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

logger = logging.getLogger(__name__)


class BroadcastWeightSync:
    """Builds the broadcast group on first use and runs each sync over it."""

    def __init__(self, config, learner_group, env_runner_group) -> None:
        self.config = config
        self.learner_group = learner_group
        self.env_runner_group = env_runner_group
        # One rank per process that holds engine weights.
        self.ranks_per_runner = (config.vllm_tensor_parallel_size
                                 if config.rollout_engine == "vllm" else 1)
        self._members: list[int] | None = None  # remote runner ids of the current group
        self._local_runner_stale = False

    def sync(self) -> bool:
        """Broadcast the learner's weights to every remote runner.

        Returns False, having changed nothing, when a runner is down or the broadcast failed:
        the caller then syncs through the object store, and the group is rebuilt next time.
        """
        group = self.env_runner_group
        ids = group.healthy_env_runner_ids()
        if not ids or len(ids) < group.num_remote_env_runners():
            self.invalidate()
            return False
        try:
            if self._members != ids:
                self._build(ids)
            versions, version = self._concurrently(
                lambda learner: learner.broadcast_weights(),
                lambda runner: runner.receive_weights(), ids,
            )
        except ValueError:  # a configuration error (e.g. 'nccl' without GPUs): say so, loudly
            raise
        except Exception as e:  # a runner died mid-sync, or the group timed out
            logger.warning("Broadcast weight sync failed (%s: %s); syncing through the object "
                           "store and rebuilding the group next time.", type(e).__name__, e)
            self.invalidate()
            return False
        if sorted(versions) != [version] * len(ids):
            logger.warning("Broadcast weight sync: runners report versions %s, the learner sent "
                           "%s; syncing through the object store.", versions, version)
            self.invalidate()
            return False
        self._local_runner_stale = True
        return True

    def invalidate(self) -> None:
        """Forget the group: the next `sync` builds a new one with the runners then healthy."""
        self._members = None

    def refresh_local_env_runner(self) -> None:
        """Give the driver's env runner the learner's current weights, if a broadcast left it
        behind (it is not in the group: it only evaluates, checkpoints and restores others)."""
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

    # --- internals ------------------------------------------------------------------------------
    def _build(self, ids: list[int]) -> None:
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
        self._members = list(ids)

    def _concurrently(self, on_learner, on_runner, ids: list[int]) -> tuple[list[Any], Any]:
        """Run `on_learner` on the learner and `on_runner` on runners `ids` at the same time."""
        with ThreadPoolExecutor(max_workers=1) as pool:
            learner_call = pool.submit(self._on_learner, on_learner)
            try:
                runner_results = self.env_runner_group.foreach_env_runner(
                    on_runner, remote_worker_ids=ids, local_env_runner=False,
                    timeout_seconds=self.config.weight_sync_timeout_s,
                )
            finally:
                learner_result = learner_call.result()  # the learner's call ends by timeout
        if len(runner_results) != len(ids):
            raise RuntimeError(f"{len(ids) - len(runner_results)} env runner(s) did not answer "
                               f"within weight_sync_timeout_s={self.config.weight_sync_timeout_s}")
        return runner_results, learner_result

    def _on_learner(self, fn) -> Any:
        """`fn(learner)` on the (single) learner, local or remote; raises its error."""
        result = self.learner_group.foreach_learner(fn).result_or_errors[0]
        if not result.ok:
            raise result.get()
        return result.get()
