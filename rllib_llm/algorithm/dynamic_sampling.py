"""DAPO's dynamic sampling: train only on prompt groups whose rewards differ.

A group whose responses all score the same has zero advantage under every group baseline (GRPO,
RLOO, Dr. GRPO): it adds tokens to the loss's counts and nothing to its gradient. With
`dynamic_sampling` the algorithm samples again until it holds `rollout_batch_size` informative
groups or has sampled `dynamic_sampling_max_rounds` rounds (DAPO, arXiv:2503.14476, section 3.2;
verl's `algorithm.filter_groups` with `max_num_gen_batches`). The batch trained on keeps its
size: the informative groups in the order they came, then, when the rounds ran out first,
uninformative ones (so a hard or easy phase degrades to plain sampling, and the shortfall is
logged).

The first round is a whole batch. verl's later rounds are whole batches too, so a batch 90%
informative costs twice the samples; here a later round asks for the groups still missing
divided by the share of informative groups seen so far (at most a batch), so it costs about
what is missing. Each round is one call of the algorithm's sampler, so it works with the local
env runner and with remote ones (which share a round's prompts); in asynchronous training a
round is the next batch generated ahead, whole. A group's reward is each episode's final reward,
the verifier's score, before any shaping.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_llm.algorithm.async_sampling import Batch, group_of

# Metric names, under DYNAMIC_RESULTS in the results.
DYNAMIC_RESULTS = "dynamic_sampling"
ROUNDS = "rounds"  # batches sampled this iteration
UNINFORMATIVE_FRACTION = "uninformative_fraction"  # of all groups sampled this iteration
SHORTFALL_GROUPS = "shortfall_groups"  # uninformative groups trained on: the rounds ran out
SAMPLES_PER_INFORMATIVE_GROUP = "samples_per_informative_group"  # responses sampled / kept group
RESPONSES_SAMPLED = "responses_sampled"  # this iteration, every round


def groups_in_order(episodes: list[SingleAgentEpisode]) -> list[list[SingleAgentEpisode]]:
    """The episodes as prompt groups, in the order each group first appears."""
    groups: dict[str, list[SingleAgentEpisode]] = {}
    for episode in episodes:
        groups.setdefault(group_of(episode), []).append(episode)
    return list(groups.values())


def is_informative(group: list[SingleAgentEpisode]) -> bool:
    """Whether the group's final rewards are not all equal."""
    scores = [float(e.get_rewards()[-1]) if len(e) else 0.0 for e in group]
    return bool(np.ptp(scores) > 0)


def next_round_size(missing: int, informative: int, sampled: int, batch: int) -> int:
    """Prompts to ask for in a later round: the missing groups over the informative share seen
    so far, rounded up, at most a batch (a whole batch while none was informative)."""
    if informative == 0:
        return batch
    return min(batch, math.ceil(missing * sampled / informative))


def fill_batch(sample: Callable[[int], Batch], num_groups: int, max_rounds: int
               ) -> tuple[Batch, dict[str, float]]:
    """Sample rounds until `num_groups` informative groups are held or `max_rounds` were drawn.

    Args:
        sample: draws a round of the given number of prompts (it may return more groups: a
            sampler that generates whole batches ahead).
        num_groups: the batch's prompt groups (`rollout_batch_size`).
        max_rounds: the most rounds, the first included.

    Returns the batch (exactly `num_groups` groups: informative first, then uninformative ones
    if the rounds ran out; every round's runner and reward-model metrics; the first round's own
    metrics) and this module's metrics.
    """
    informative: list[list[SingleAgentEpisode]] = []
    uninformative: list[list[SingleAgentEpisode]] = []
    runner_metrics: list[dict[str, Any]] = []
    reward_rounds: list[dict[str, float]] = []
    first_metrics: dict[str, float] | None = None
    rounds = sampled_groups = sampled_responses = 0
    while rounds < max_rounds and len(informative) < num_groups:
        size = num_groups if rounds == 0 else next_round_size(
            num_groups - len(informative), len(informative), sampled_groups, num_groups)
        batch = sample(size)
        rounds += 1
        runner_metrics += batch.runner_metrics
        reward_rounds += batch.reward_rounds
        first_metrics = batch.metrics if first_metrics is None else first_metrics
        for group in groups_in_order(batch.episodes):
            sampled_groups += 1
            sampled_responses += len(group)
            (informative if is_informative(group) else uninformative).append(group)
    shortfall = max(0, num_groups - len(informative))
    kept = informative[:num_groups] + uninformative[:shortfall]
    episodes = [e for group in kept for e in group]
    metrics = {
        ROUNDS: float(rounds),
        RESPONSES_SAMPLED: float(sampled_responses),
        UNINFORMATIVE_FRACTION: len(uninformative) / max(1, sampled_groups),
        SHORTFALL_GROUPS: float(shortfall),
        SAMPLES_PER_INFORMATIVE_GROUP:
            sampled_responses / max(1, min(len(informative), num_groups)),
    }
    return Batch(episodes, runner_metrics, dict(first_metrics or {}), reward_rounds), metrics
