"""Pack token-level episodes into the learner's (B, T) tensors.

An episode's state is rebuilt exactly from its history (DESIGN.md): the prompt ids from the
reset info, then per step the agent's token (an action, mask 1) followed by any tokens the
environment appended in that step's info (tool output: state, not action, mask 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rllib_llm.envs.token_mdp import ENV_TOKENS, PROMPT_IDS
from rllib_llm.exchange.columns import ACTION_LOGP, GROUP_ID


@dataclass
class EpisodeTokens:
    """One response, as flat token lists (no padding)."""

    prompt_ids: list[int]
    response_ids: list[int]  # agent and environment tokens in order
    action_mask: list[int]  # 1 on agent tokens
    behaviour_logp: list[float]  # the sampler's log-prob on agent tokens, 0.0 elsewhere
    score: float
    group_id: Any


def episode_tokens(episode: Any) -> EpisodeTokens:
    """Rebuild one SingleAgentEpisode's prompt and response tokens."""
    infos = episode.get_infos()
    actions = np.asarray(episode.get_actions()).tolist()
    logps = np.asarray(episode.get_extra_model_outputs(ACTION_LOGP)).tolist()
    response, mask, behaviour = [], [], []
    for t, (a, lp) in enumerate(zip(actions, logps)):
        response.append(int(a))
        mask.append(1)
        behaviour.append(float(lp))
        env_tokens = infos[t + 1].get(ENV_TOKENS, ())
        response.extend(int(x) for x in env_tokens)
        mask.extend([0] * len(env_tokens))
        behaviour.extend([0.0] * len(env_tokens))
    return EpisodeTokens(
        prompt_ids=[int(x) for x in infos[0][PROMPT_IDS]],
        response_ids=response,
        action_mask=mask,
        behaviour_logp=behaviour,
        score=float(np.sum(episode.get_rewards())),
        group_id=infos[0].get(GROUP_ID),
    )


def pack(items: Sequence[EpisodeTokens], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Left-pad prompts to P and right-pad responses to T.

    Returns input_ids/attention_mask (B, P+T), response_ids/action_mask/old_logp (B, T),
    scores (B,), float32 for reals and int64 for ids.
    """
    if not items:
        raise ValueError("pack() got no episodes: the env runners returned an empty batch.")
    p = max(len(e.prompt_ids) for e in items)
    t = max(len(e.response_ids) for e in items)
    b = len(items)
    input_ids = torch.full((b, p + t), pad_token_id, dtype=torch.long)
    attention = torch.zeros((b, p + t), dtype=torch.long)
    action_mask = torch.zeros((b, t), dtype=torch.float32)
    old_logp = torch.zeros((b, t), dtype=torch.float32)
    for i, e in enumerate(items):
        lp, lr = len(e.prompt_ids), len(e.response_ids)
        input_ids[i, p - lp : p] = torch.tensor(e.prompt_ids)
        input_ids[i, p : p + lr] = torch.tensor(e.response_ids)
        attention[i, p - lp : p + lr] = 1
        action_mask[i, :lr] = torch.tensor(e.action_mask, dtype=torch.float32)
        old_logp[i, :lr] = torch.tensor(e.behaviour_logp)
    return {
        "input_ids": input_ids,
        "attention_mask": attention,
        "response_ids": input_ids[:, p:].clone(),
        "action_mask": action_mask,
        "old_logp": old_logp,
        "scores": torch.tensor([e.score for e in items], dtype=torch.float32),
    }


def order_by_group(items: list[EpisodeTokens], group_size: int) -> list[EpisodeTokens]:
    """Put each prompt's responses next to each other and check every group is complete.

    The group estimators (grpo, rloo, ...) read groups as consecutive runs of `group_size`
    responses, so a group split across batches would silently compare unrelated answers.
    """
    groups: dict[Any, list[EpisodeTokens]] = {}
    for e in items:
        groups.setdefault(e.group_id, []).append(e)
    bad = {g: len(v) for g, v in groups.items() if len(v) != group_size}
    if bad:
        raise ValueError(
            f"Episodes do not form complete groups of num_return_sequences_in_group="
            f"{group_size}: group sizes {dict(list(bad.items())[:5])}. Every prompt's responses "
            "must reach the learner in the same batch."
        )
    return [e for v in groups.values() for e in v]
