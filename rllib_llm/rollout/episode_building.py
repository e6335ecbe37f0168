"""From a sample call's generated responses to its finished `SingleAgentEpisode`s: verify every
response in one batch, then replay each through the env with its verdict (`replay_response`).
Single-turn responses, partial rollouts' continued responses and multi-turn episodes alike; the
env runner times the phases and draws the group ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_llm.rollout.engine import Response
from rllib_llm.rollout.partial_rollouts import PartialResponse, PromptGroup
from rllib_llm.rollout.replay import replay_response
from rllib_llm.rollout.turn_loop import to_single_agent_episode


def verify_groups(env, prompt_indices: list[int],
                  responses: Sequence[Sequence[Response]]) -> list[Any]:
    """The verdicts of every response (`responses[g][j]` answers `prompt_indices[g]`), flat,
    in one batch (the verifier's pool overlaps them); `build_episodes` replays each with
    its verdict."""
    flat = [(i, r) for i, group in zip(prompt_indices, responses) for r in group]
    return env.verify_responses([i for i, _ in flat], [r.token_ids for _, r in flat])


def build_episodes(env, prompt_indices: list[int], responses: Sequence[Sequence[Response]],
                   verdicts: Sequence[Any], *, group_ids: Sequence[str],
                   weight_version: int) -> list[SingleAgentEpisode]:
    """Replay every response (`responses[g][j]` answers `prompt_indices[g]`, of group
    `group_ids[g]`) with its verdict (`verdicts`, flat in the same order) into an episode."""
    episodes = []
    for g, (index, group) in enumerate(zip(prompt_indices, responses)):
        for j, response in enumerate(group):
            episodes.append(replay_response(
                env, index, response, group_id=group_ids[g], weight_version=weight_version,
                verification=verdicts[g * len(group) + j]))
    return episodes


def partial_responses(groups: Sequence[PromptGroup]
                      ) -> list[tuple[PromptGroup, PartialResponse]]:
    """Partial rollouts: every response of the finished `groups`, flat, with its group."""
    return [(g, r) for g in groups for r in g.responses]


def verify_partial(env, flat: Sequence[tuple[PromptGroup, PartialResponse]]) -> list[Any]:
    """The verdicts of `partial_responses`, in one batch."""
    return env.verify_responses([g.prompt_index for g, _ in flat],
                                [r.token_ids for _, r in flat])


def build_partial_episodes(env, flat: Sequence[tuple[PromptGroup, PartialResponse]],
                           verdicts: Sequence[Any]) -> list[SingleAgentEpisode]:
    """Replay every one of `partial_responses` with its verdict; each token keeps the version
    of the weights that sampled it."""
    return [replay_response(env, g.prompt_index, r.response(), group_id=g.group_id,
                            weight_version=np.asarray(r.versions, dtype=np.int64),
                            verification=verdict)
            for (g, r), verdict in zip(flat, verdicts, strict=True)]


def multi_turn_episodes(finished: Sequence[Any], n: int, *, group_ids: Sequence[str],
                        weight_version: int) -> list[SingleAgentEpisode]:
    """The `SingleAgentEpisode`s of `run_multi_turn`'s finished episodes, `n` per group in the
    order of `group_ids` (the env verified them as they ended)."""
    return [to_single_agent_episode(e, group_id=group_id, weight_version=weight_version)
            for g, group_id in enumerate(group_ids) for e in finished[g * n:(g + 1) * n]]
