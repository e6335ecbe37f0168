"""Asynchronous sampling (`async_generation_ratio` = k >= 1): the remote env runners generate up to
k batches ahead of the learner, with the weights they hold, while it updates.

Built on RLlib's asynchronous actor calls, the ones IMPALA and APPO sample with
(`EnvRunnerGroup.foreach_env_runner_async` / `fetch_ready_async_reqs`). Each batch is
`num_env_runners` parts, one `sample()` call of `rollout_batch_size / num_env_runners` prompts per
runner, each call with a tag of its own so its result can be waited for alone.

Why the lag is exactly k: a Ray actor runs the calls it receives one at a time, in the order they
were sent. The weights of update t are pushed (RLlib's fire-and-forget `sync_weights`) behind the
sample calls already queued on each runner: those finish with the weights they started with, and
every later call samples with the new ones. (RLlib drops a push while
`max_requests_in_flight_per_env_runner` calls of its kind wait on a runner; RLVRConfig raises
that limit to 2k + 2 in asynchronous training, so none is.) At the start of update t the
driver requests batch t + k, behind the push of version t - 1, and trains on batch t, requested
at update t - k behind the push of version t - k - 1: it is k updates old (its staleness), fewer
during the first k updates. `max_staleness` bounds it anyway: a runner whose push failed falls
further behind; its episodes are dropped by prompt group, it is sent the learner's weights, and
it samples their prompts' share again.

Runner failures: a part whose runner died is sampled again by a healthy runner (after RLlib's
`restore_env_runners` brought the dead one back, when it can). Checkpoints: `get_state` waits for
the batches in flight and returns them, so a restored run trains on the same batches as one that
was never stopped.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_llm.algorithm.sample_errors import raise_if_failed, sample_or_error
from rllib_llm.algorithm.sync_sampling import MAX_SAMPLE_ATTEMPTS, healthy_runner_ids
from rllib_llm.exchange.columns import GROUP_ID, WEIGHT_VERSION

# Metric names, under ASYNC_RESULTS in the results.
ASYNC_RESULTS = "async_sampling"
STALENESS_MEAN = "staleness_mean"  # over the batch's episodes, in weight versions
STALENESS_MAX = "staleness_max"
STALENESS_FRACTION = "staleness_{}_fraction"  # share of episodes s versions old, s = 0..bound
NUM_DROPPED = "num_dropped_episodes"  # this iteration: older than max_staleness
DROPPED_FRACTION = "dropped_fraction"  # dropped / (trained on + dropped), this iteration
NUM_DROPPED_LIFETIME = "num_dropped_episodes_lifetime"
NUM_RESAMPLED_PARTS = "num_resampled_parts"  # parts lost with a failed runner, sampled again
BATCHES_IN_FLIGHT = "batches_in_flight"  # generating while the learner updates
LEARNER_WAIT_S = "learner_wait_s"  # the learner's idle time: waiting for this batch

# A part whose runner dies this many times in a row, or a batch still too stale after this many
# rounds of sampling again, stops training: the cause is not a passing one. RLlib logs each
# failure's error. (The bound synchronous sampling keeps too.) An error sample() raises stops it
# at once (sample_errors.py).
MAX_PART_ATTEMPTS = MAX_SAMPLE_ATTEMPTS


def episode_version(episode: SingleAgentEpisode) -> int:
    """The oldest weight version among the episode's sampled tokens."""
    return int(np.min(episode.get_extra_model_outputs(WEIGHT_VERSION)))


def group_of(episode: SingleAgentEpisode) -> str:
    return episode.get_infos(0)[GROUP_ID]


def staleness(episodes: Sequence[SingleAgentEpisode], learner_version: int) -> np.ndarray:
    """(N,) int64: how many weight versions each episode lags behind the learner's."""
    return learner_version - np.array([episode_version(e) for e in episodes], dtype=np.int64)


def stale_groups(episodes: Sequence[SingleAgentEpisode], learner_version: int,
                 max_staleness: int) -> set[str]:
    """The prompt groups with an episode more than `max_staleness` versions old (a group is
    trained on whole or not at all: its baseline needs every response)."""
    lags = staleness(episodes, learner_version)
    return {group_of(e) for e, lag in zip(episodes, lags, strict=True) if lag > max_staleness}


def staleness_metrics(lags: np.ndarray, bound: int) -> dict[str, float]:
    """Mean, max and the distribution (levels 0..bound) of a batch's staleness."""
    metrics = {STALENESS_MEAN: float(lags.mean()) if len(lags) else 0.0,
               STALENESS_MAX: float(lags.max()) if len(lags) else 0.0}
    for s in range(bound + 1):
        metrics[STALENESS_FRACTION.format(s)] = float(np.mean(lags == s)) if len(lags) else 0.0
    return metrics


@dataclass
class Batch:
    """What one training iteration gets: the episodes, the runners' metrics of the sample calls
    that made them, this module's metrics (ASYNC_RESULTS), and the reward model's metrics of
    each sampling round that scored them (reward_workers.py; none without a reward model)."""

    episodes: list[SingleAgentEpisode]
    runner_metrics: list[dict[str, Any]]
    metrics: dict[str, float] = field(default_factory=dict)
    reward_rounds: list[dict[str, float]] = field(default_factory=list)


@dataclass
class _Part:
    """One sample() call in flight: `num_prompts` prompts of batch `batch` on runner `runner`."""

    batch: int
    num_prompts: int
    runner: int
    tag: str
    attempt: int = 1


class AsyncSampler:
    """Keeps `ahead` batches generating on the remote env runners while the learner updates.

    Args:
        group: the algorithm's EnvRunnerGroup (remote runners only sample).
        ahead: async_generation_ratio, k >= 1.
        max_staleness: the most versions an episode may lag when trained on (>= ahead).
        num_parts: parts per batch (num_env_runners), each of `num_prompts` prompts.
        restore_runners: brings failed runners back (RLVR.restore_env_runners); returns the
            restored runners' ids.
        resync_runners: sends the learner's current weights to the runners with these ids.
        restore_timeout_s: how long to wait for a healthy runner before giving up.
    """

    def __init__(self, group, *, ahead: int, max_staleness: int, num_parts: int,
                 num_prompts: int, restore_runners: Callable[[], list[int]],
                 resync_runners: Callable[[list[int]], None], restore_timeout_s: float):
        self.group = group
        self.ahead = ahead
        self.max_staleness = max_staleness
        self.num_parts = num_parts
        self.num_prompts = num_prompts
        self._restore_runners = restore_runners
        self._resync_runners = resync_runners
        self._restore_timeout_s = restore_timeout_s
        self._head = 0  # the oldest batch not trained on yet
        self._next = 0  # the next batch to request
        self._in_flight: dict[int, list[_Part]] = {}
        # Per batch: (runner id, episodes, runner metrics) of each part that arrived.
        self._arrived: dict[int, list[tuple[int, list[SingleAgentEpisode], dict]]] = {}
        self._tags = itertools.count()
        self._round_robin = itertools.count()
        self._dropped_lifetime = 0

    # --- one iteration --------------------------------------------------------------------------
    def next_batch(self, learner_version: int) -> Batch:
        """Request what keeps `ahead` batches generating, then wait for the oldest and return it
        with its episodes older than `max_staleness` replaced by fresh ones."""
        start = time.perf_counter()
        while self._next <= self._head + self.ahead:
            self._request_batch(self._next)
            self._next += 1
        resampled = self._wait_for(self._head)
        dropped = 0
        for attempt in itertools.count(1):
            parts = self._arrived[self._head]
            episodes = [e for _, eps, _ in parts for e in eps]
            stale = stale_groups(episodes, learner_version, self.max_staleness)
            if not stale:
                break
            if attempt > MAX_PART_ATTEMPTS:
                raise RuntimeError(
                    f"Asynchronous sampling: {len(stale)} prompt groups were still more than "
                    f"max_staleness={self.max_staleness} weight versions behind the learner's "
                    f"{learner_version} after {MAX_PART_ATTEMPTS} rounds of sending the runners "
                    "the learner's weights and sampling again: the weight sync is failing.")
            # Their runners missed weight pushes: bring them up to date, then sample the dropped
            # groups' prompts again.
            behind = sorted({r for r, eps, _ in parts if any(group_of(e) in stale for e in eps)})
            kept = [(r, [e for e in eps if group_of(e) not in stale], m) for r, eps, m in parts]
            dropped += len(episodes) - sum(len(eps) for _, eps, _ in kept)
            self._arrived[self._head] = kept
            self._resync_runners(behind)
            self._request(self._head, len(stale))
            resampled += self._wait_for(self._head)
        del self._arrived[self._head]
        self._head += 1
        self._dropped_lifetime += dropped
        metrics = staleness_metrics(staleness(episodes, learner_version), self.max_staleness)
        metrics.update({
            NUM_DROPPED: float(dropped),
            DROPPED_FRACTION: dropped / (len(episodes) + dropped),
            NUM_DROPPED_LIFETIME: float(self._dropped_lifetime),
            NUM_RESAMPLED_PARTS: float(resampled),
            BATCHES_IN_FLIGHT: float(self._next - self._head),
            LEARNER_WAIT_S: time.perf_counter() - start,
        })
        return Batch(episodes, [m for _, _, m in parts], metrics)

    # --- requests -------------------------------------------------------------------------------
    def _request_batch(self, batch: int) -> None:
        """One part per runner slot; a slot whose runner is down goes to a healthy one."""
        healthy = self._healthy_runners()
        self._arrived[batch] = []
        for slot in range(self.num_parts):
            self._send(_Part(batch, self.num_prompts, healthy[slot % len(healthy)], ""))

    def _request(self, batch: int, num_prompts: int, attempt: int = 1) -> None:
        healthy = self._healthy_runners()
        runner = healthy[next(self._round_robin) % len(healthy)]
        self._send(_Part(batch, num_prompts, runner, "", attempt))

    def _send(self, part: _Part) -> None:
        part.tag = f"rlvr_sample_{next(self._tags)}"
        n = part.num_prompts
        sent = self.group.foreach_env_runner_async(
            lambda runner: sample_or_error(runner, n),
            tag=part.tag, remote_worker_ids=[part.runner])
        if not sent:  # the runner went down since it was picked: _wait_for finds it lost
            part.tag = ""
        self._in_flight.setdefault(part.batch, []).append(part)

    def _wait_for(self, batch: int) -> int:
        """Collect every part of `batch`; returns how many parts were lost (of any batch) and
        sampled again."""
        lost = 0
        while self._in_flight.get(batch):
            part = self._in_flight[batch][0]
            if self._fetch(part):
                continue
            # Its runner failed. If it died, its other calls died with it; if only this call
            # raised, they arrive now. Every lost part is sampled again, by a healthy runner.
            others = [p for b in sorted(self._in_flight) for p in list(self._in_flight[b])
                      if p.runner == part.runner]
            failed = [part] + [p for p in others if not self._fetch(p)]
            for p in failed:
                if p.attempt >= MAX_PART_ATTEMPTS:
                    raise RuntimeError(
                        f"Asynchronous sampling: a sample() call of {p.num_prompts} prompts "
                        f"failed {p.attempt} times in a row (on runner {p.runner} last). Its "
                        "errors are in the log above (RLlib logs each). A crashed runner is "
                        "restored, so this is probably an error in sample() itself, such as in "
                        "the env or its verifier.")
            self._restore_runners()
            for p in failed:
                self._request(p.batch, p.num_prompts, p.attempt + 1)
            lost += len(failed)
        return lost

    def _fetch(self, part: _Part) -> bool:
        """Wait for `part`'s result; True if it arrived. It leaves the in-flight list anyway."""
        self._in_flight[part.batch].remove(part)
        results = self.group.fetch_ready_async_reqs(tags=[part.tag], timeout_seconds=None) \
            if part.tag else []
        if results:
            raise_if_failed([results[0][1]])  # an error in sample(): no retry (sample_errors.py)
            self._arrived[part.batch].append((part.runner, *results[0][1]))
        return bool(results)

    def _healthy_runners(self) -> list[int]:
        """The healthy remote runners' ids, waiting (and restoring) while there are none."""
        return healthy_runner_ids(self.group, self._restore_runners, self._restore_timeout_s)

    # --- checkpoints ----------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """The batches generated ahead, waited for: a restored run trains on them next."""
        for batch in sorted(self._in_flight):
            self._wait_for(batch)
        return {"head": self._head, "next": self._next, "arrived": dict(self._arrived),
                "dropped_lifetime": self._dropped_lifetime}

    def set_state(self, state: dict[str, Any]) -> None:
        self._in_flight.clear()
        self._head, self._next = state["head"], state["next"]
        self._arrived = dict(state["arrived"])
        self._dropped_lifetime = state["dropped_lifetime"]
