"""Synchronous sampling on the remote env runners, through their failures (or, with none, on
the driver's env runner).

Each iteration's prompts are `num_env_runners` equal parts, one per runner. A runner that dies
does not end the iteration: RLlib's fault tolerance (`restart_failed_env_runners`, on by default)
has Ray start its process again and `Algorithm.restore_env_runners` give it the current weights.
Meanwhile the runners alive sample the dead one's prompts; with none alive, the iteration waits
for one, up to RLlib's `env_runner_restore_timeout_s`, warning with the runners' numbers, and
then stops with one line naming them. RLlib counts the restarts in the results
(fault_tolerance/num_remote_worker_restarts); the parts sampled again are
async_sampling/num_resampled_parts.

Without fault tolerance (`restart_failed_env_runners=False`, `ignore_env_runner_failures=False`)
RLlib raises the runner's error at once, as it does for every algorithm.

An exception raised inside `sample()` is not a death: the runner answers with it, and training
stops at once naming the runner and the cause (sample_errors.py), instead of RLlib's restart
after a 60 s delay, three times over.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from rllib_llm.algorithm.sample_errors import raise_if_failed, sample_or_error

logger = logging.getLogger(__name__)

# Sampling again the prompts of a runner that died this many times in a row stops training: a
# runner that dies in every sample() call has a cause of its own (an error in its env or its
# verifier: RLlib logs each, and ends the runner's process on it).
MAX_SAMPLE_ATTEMPTS = 3


def healthy_runner_ids(group, restore: Callable[[], Any], timeout_s: float) -> list[int]:
    """The healthy remote runners' ids, sorted. While there are none, calls `restore` (RLVR's
    `restore_env_runners`) every second, warning once with the runners down, for up to
    `timeout_s` seconds; then raises RuntimeError with one line naming them."""
    healthy = sorted(group.healthy_env_runner_ids())
    if healthy:
        return healthy
    down = _down(group)
    logger.warning("%s down, none left to sample; waiting up to env_runner_restore_timeout_s="
                   "%s s for RLlib to restore one.", _names(down), timeout_s)
    deadline = time.monotonic() + timeout_s
    while not healthy:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{_names(down)} died; RLlib restored none within env_runner_restore_timeout_s="
                f"{timeout_s} s, and no remote env runner is left to sample (RLlib logged the "
                "cause; restart_failed_env_runners must be on for a runner to come back).")
        time.sleep(1.0)
        restore()
        healthy = sorted(group.healthy_env_runner_ids())
    logger.warning("%s restored; sampling goes on.", _names(healthy))
    return healthy


def sample_remote(group, num_prompts: int | None, num_parts: int, part_size: int,
                  restore: Callable[[], Any], timeout_s: float
                  ) -> tuple[list, list[dict[str, Any]], int]:
    """`num_parts` parts of `part_size` prompts each (or of ceil(num_prompts / num_parts) when
    `num_prompts` is given), sampled by the healthy remote runners now.

    Returns:
        The episodes, each sample() call's runner metrics, and how many times a runner's share
        was lost with it and sampled again.
    """
    if num_prompts is not None:
        part_size = math.ceil(num_prompts / num_parts)
    pending = num_parts * part_size  # prompts not sampled yet
    episodes: list = []
    metrics: list[dict[str, Any]] = []
    resampled = 0
    for attempt in range(1, MAX_SAMPLE_ATTEMPTS + 1):
        shares = share_out(pending, healthy_runner_ids(group, restore, timeout_s))
        results = group.foreach_env_runner(
            lambda r: (r.worker_index, sample_or_error(r, shares[r.worker_index])),
            remote_worker_ids=list(shares), local_env_runner=False)
        raise_if_failed([outcome for _, outcome in results])  # an error in sample(): no retry
        for _, (eps, m) in results:
            episodes += eps
            metrics.append(m)
        lost = sorted(set(shares) - {index for index, _ in results})
        pending = sum(shares[i] for i in lost)
        if not pending:
            return episodes, metrics, resampled
        logger.warning("%s died while sampling; its share, %d prompts, is sampled again.",
                       _names(lost), pending)
        resampled += len(lost)
        restore()
    raise RuntimeError(
        f"{_names(lost)} died in {MAX_SAMPLE_ATTEMPTS} sample() calls in a row; RLlib logged "
        "their errors above. A killed runner is restored, so this is probably an error in "
        "sample() itself, such as in the env or its verifier.")


def sample_now(group, num_prompts: int | None, batch_size: int, num_parts: int,
               restore: Callable[[], Any], timeout_s: float
               ) -> tuple[list, list[dict[str, Any]], int]:
    """`num_prompts` prompts (None: `batch_size`) sampled now: by the healthy remote runners of
    `group` in `num_parts` parts (`sample_remote`), or with no remote runners by its local one.
    Returns what `sample_remote` returns."""
    if group.num_remote_env_runners() == 0:
        runner = group.local_env_runner
        return runner.sample(num_prompts=num_prompts), [runner.get_metrics()], 0
    return sample_remote(group, num_prompts, num_parts, batch_size // num_parts, restore,
                         timeout_s)


def share_out(num_prompts: int, runner_ids: list[int]) -> dict[int, int]:
    """`num_prompts` split as evenly as can be among `runner_ids` (none gets 0 prompts)."""
    k = len(runner_ids)
    shares = {r: num_prompts // k + (j < num_prompts % k) for j, r in enumerate(runner_ids)}
    return {r: n for r, n in shares.items() if n}


def _down(group) -> list[int]:
    # RLlib numbers the remote runners 1..num_env_runners and keeps a restarted one's number.
    healthy = set(group.healthy_env_runner_ids())
    return [i for i in range(1, group.num_remote_env_runners() + 1) if i not in healthy]


def _names(ids: list[int]) -> str:
    return f"env runner {ids[0]}" if len(ids) == 1 else \
        f"env runners {', '.join(map(str, ids))}"
