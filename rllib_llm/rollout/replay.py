"""Replay one generated response through its environment into a finished SingleAgentEpisode.

The environment stays the authority on rewards and termination: `step_chunk` consumes the whole
response at once with exactly the results of stepping token by token. Its results are numpy
arrays, and they become the episode's buffers as they are: the episode is numpy from the start
(`is_numpy`), and no Python object is made per token. Only the infos stay a list, one per step
(RLlib never batches infos), holding the env's shared read-only `EMPTY_INFO` wherever a step
has no news.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_llm.exchange.columns import ACTION_LOGP, GROUP_ID, PROMPT_INDEX, WEIGHT_VERSION
from rllib_llm.rollout.engine import Response


def replay_response(env: Any, prompt_index: int, response: Response, *, group_id: str,
                    weight_version: int | np.ndarray,
                    verification: Any = None) -> SingleAgentEpisode:
    """Step `env` through `response` (k tokens) from problem `prompt_index`; the finished episode.

    Args:
        env: a token-level environment with `reset(options={PROMPT_INDEX: i})` and
            `step_chunk(tokens, verification=...)` (e.g. `MathVerifyEnv`).
        response: the engine's tokens and behaviour log-probs; the env rejects tokens past the
            episode's end (ValueError).
        group_id: shared by the responses to one prompt (written to the reset info).
        weight_version: the version of the weights that sampled the response, or (k,) one per
            token (a partial rollout's response may span several).
        verification: the verdict precomputed by `env.verify_responses`, or None to verify here.

    Returns:
        An episode of k steps: observations (k+1,) int64, actions (k,) int64, rewards (k,)
        float64, extra model outputs `ACTION_LOGP` (k,) float32 and `WEIGHT_VERSION` (k,) int64.
    """
    obs, info = env.reset(options={PROMPT_INDEX: prompt_index})
    result = env.step_chunk(response.token_ids, verification=verification)
    k = len(result.actions)
    return SingleAgentEpisode(
        observations=np.concatenate(([obs], result.observations)),  # (k+1,)
        infos=[{**info, GROUP_ID: group_id}, *result.infos],
        actions=result.actions,  # (k,) int64, converted and checked by the env
        rewards=result.rewards,
        terminated=bool(result.terminateds[-1]),
        truncated=bool(result.truncateds[-1]),
        extra_model_outputs={
            ACTION_LOGP: np.asarray(response.logprobs, dtype=np.float32),
            WEIGHT_VERSION: np.broadcast_to(np.asarray(weight_version, dtype=np.int64),
                                            (k,)).copy(),
        },
        observation_space=env.observation_space,
        action_space=env.action_space,
        len_lookback_buffer=0,
    )  # arrays in: already numpy, so `to_numpy()` would only validate a second time
