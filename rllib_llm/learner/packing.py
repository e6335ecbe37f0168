"""Pack token-level episodes into the learner's (B, T) tensors.

An episode's state is rebuilt exactly from its history (docs/DESIGN.md, "The token-level MDP"):
the prompt ids from the reset info, then per step the agent's token (an action, mask 1) followed
by any tokens the environment appended in that step's info (tool output: state, not action,
mask 0). An episode that holds several sequences (an agent that rewrote its history: a step info
with `NEXT_PROMPT_IDS` ends one) packs into one row per sequence, each with the episode's
reward, and the batch then says which rows are one episode (`EPISODE_INDEX`).

Every per-token step is a numpy operation: at 512 responses of 1,024 tokens a Python loop over
tokens costs seconds per iteration (benchmarks/speed/per_token_overhead.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from rllib_llm.exchange.columns import (
    ACTION_LOGP,
    ACTION_MASK,
    ATTENTION_MASK,
    CORRECT,
    EMPTY_INFO,
    ENV_TOKENS,
    EPISODE_INDEX,
    GROUP_ID,
    INPUT_IDS,
    NEXT_PROMPT_IDS,
    OLD_LOGP,
    PROMPT_IDS,
    RESPONSE_IDS,
    SCORES,
    TRUNCATED,
    TURN_REWARDS,
    is_correct,
)


@dataclass
class EpisodeTokens:
    """One response, as flat token arrays (no padding; they may share memory with the episode,
    so read them, do not write to them).

    Attributes:
        prompt_ids: (P_i,) int64.
        response_ids: (T_i,) int64, the agent's and the environment's tokens in order.
        action_mask: (T_i,) bool, True on agent tokens.
        behaviour_logp: (T_i,) float32, the sampler's log-prob on agent tokens, 0.0 elsewhere.
        score: the reward of the episode's last step (the verifier's).
        turn_rewards: (T_i,) float32, rewards a multi-turn env paid before the last step, on the
            agent token they came with (0.0 elsewhere), or None when there are none.
        correct: the verifier's verdict (`columns.is_correct`).
        group_id: shared by the responses to one prompt.
        truncated: the episode ended by truncation (the response limit, no EOS).
        sequence: the row's place among its episode's sequences (`episode_rows`); 0 for the
            first, and for every episode of one sequence.
    """

    prompt_ids: np.ndarray
    response_ids: np.ndarray
    action_mask: np.ndarray
    behaviour_logp: np.ndarray
    score: float
    correct: bool
    group_id: Any
    turn_rewards: np.ndarray | None = None
    truncated: bool = False
    sequence: int = 0


def episode_tokens(episode: Any, infos: Sequence[Mapping[str, Any]] | None = None
                   ) -> EpisodeTokens:
    """Rebuild one SingleAgentEpisode's prompt and response tokens (`infos`: its
    `get_infos()`, where the caller holds them already: RLlib builds the list on every call)."""
    infos = episode.get_infos() if infos is None else infos
    actions = np.asarray(episode.get_actions(), dtype=np.int64)  # (k,)
    logps = np.asarray(episode.get_extra_model_outputs(ACTION_LOGP), dtype=np.float32)  # (k,)
    rewards = np.asarray(episode.get_rewards(), dtype=np.float32)  # (k,)
    # Rewards before the last step come from a multi-turn env's earlier turns: dense rewards on
    # the agent token they came with, like the actions (zeros where env tokens sit).
    early = rewards[:-1].any() if len(rewards) else False
    response, mask, behaviour, turn_rewards = _interleave(
        actions, logps, _env_tokens(infos[1:]),
        np.concatenate((rewards[:-1], [0.0])).astype(np.float32) if early else None)
    score = float(rewards[-1]) if len(rewards) else 0.0
    return EpisodeTokens(
        prompt_ids=np.asarray(infos[0][PROMPT_IDS], dtype=np.int64),
        response_ids=response,
        action_mask=mask,
        behaviour_logp=behaviour,
        score=score,
        correct=is_correct(infos[-1], score),
        group_id=infos[0].get(GROUP_ID),
        turn_rewards=turn_rewards,
        truncated=bool(episode.is_truncated),
    )


def episode_rows(episode: Any) -> list[EpisodeTokens]:
    """One SingleAgentEpisode's rows: the episode itself, or one row per sequence where a step
    info ends a sequence (`NEXT_PROMPT_IDS`: the next one's prompt). Each row keeps the
    episode's score, verdict, group and truncation."""
    infos = episode.get_infos()
    whole = episode_tokens(episode, infos)
    breaks = _sequence_breaks(infos[1:])
    if not breaks:
        return [whole]
    # A sequence ends on an action with no env tokens after it: cut just past that action.
    cuts = np.flatnonzero(whole.action_mask)[list(breaks)] + 1
    bounds = [0, *cuts.tolist(), len(whole.response_ids)]
    prompts = [whole.prompt_ids, *breaks.values()]
    return [replace(whole, prompt_ids=prompt, response_ids=whole.response_ids[a:b],
                    action_mask=whole.action_mask[a:b],
                    behaviour_logp=whole.behaviour_logp[a:b],
                    turn_rewards=None if whole.turn_rewards is None else whole.turn_rewards[a:b],
                    sequence=i)
            for i, (prompt, a, b) in enumerate(zip(prompts, bounds[:-1], bounds[1:]))]


def _sequence_breaks(step_infos: Sequence[Mapping[str, Any]]) -> dict[int, np.ndarray]:
    """{step: the next sequence's prompt ids} for each step that ends a sequence, in order."""
    n = len(step_infos)
    # Most episodes have news in the last info only (never a break): tell at C speed.
    if n == 0 or step_infos.count(EMPTY_INFO) == n - bool(step_infos[-1]):
        return {}
    return {t: np.asarray(step_infos[t][NEXT_PROMPT_IDS], dtype=np.int64)
            for t in range(n) if NEXT_PROMPT_IDS in step_infos[t]}


def _env_tokens(step_infos: Sequence[Mapping[str, Any]]) -> dict[int, np.ndarray]:
    """{step: tokens the environment appended after that step's action}, steps in order."""
    n = len(step_infos)
    if n == 0:
        return {}
    # Single-turn episodes have news in the last info only: tell so at C speed (`count`
    # compares by identity, or `==` once unpickled) before looking at infos one by one.
    only_last = step_infos.count(EMPTY_INFO) == n - bool(step_infos[-1])
    steps = (n - 1,) if only_last else range(n)
    return {t: np.asarray(step_infos[t][ENV_TOKENS], dtype=np.int64)
            for t in steps if len(step_infos[t].get(ENV_TOKENS, ())) > 0}


def _interleave(actions: np.ndarray, logps: np.ndarray, env_tokens: dict[int, np.ndarray],
                step_rewards: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Response ids (T,), action mask (T,), behaviour log-probs (T,) and per-action rewards
    (T,) or None: each action, then the tokens the environment appended after it (mask 0,
    log-prob 0, reward 0)."""
    if not env_tokens:
        return actions, np.ones(len(actions), dtype=bool), logps, step_rewards
    appended = np.zeros(len(actions), dtype=np.int64)  # (k,) env tokens after each action
    appended[list(env_tokens)] = [len(v) for v in env_tokens.values()]
    # Action t lands after t actions and every env token appended before it.
    positions = np.arange(len(actions)) + np.concatenate(([0], np.cumsum(appended)[:-1]))
    total = len(actions) + int(appended.sum())
    response = np.empty(total, dtype=np.int64)
    mask = np.zeros(total, dtype=bool)
    behaviour = np.zeros(total, dtype=np.float32)
    response[positions], mask[positions], behaviour[positions] = actions, True, logps
    response[~mask] = np.concatenate(list(env_tokens.values()))  # dict order is step order
    rewards = None
    if step_rewards is not None:
        rewards = np.zeros(total, dtype=np.float32)
        rewards[positions] = step_rewards
    return response, mask, behaviour, rewards


def pack(items: Sequence[EpisodeTokens], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Left-pad prompts to P and right-pad responses to T.

    Returns input_ids/attention_mask (B, P+T), response_ids/action_mask/old_logp (B, T),
    scores (B,), `CORRECT` (B,) and `TRUNCATED` (B,), float32 for reals and flags, int64 for ids
    and the attention mask; and `TURN_REWARDS` (B, T) when any episode has rewards before its end.
    """
    if not items:
        raise ValueError("pack() got no episodes: the env runners returned an empty batch.")
    p = max(len(e.prompt_ids) for e in items)
    t = max(len(e.response_ids) for e in items)
    b = len(items)
    input_ids = np.full((b, p + t), pad_token_id, dtype=np.int64)
    attention = np.zeros((b, p + t), dtype=np.int64)
    action_mask = np.zeros((b, t), dtype=np.float32)
    old_logp = np.zeros((b, t), dtype=np.float32)
    for i, e in enumerate(items):  # a loop over rows; each row is copied at C speed
        lp, lr = len(e.prompt_ids), len(e.response_ids)
        input_ids[i, p - lp : p] = e.prompt_ids
        input_ids[i, p : p + lr] = e.response_ids
        attention[i, p - lp : p + lr] = 1
        action_mask[i, :lr] = e.action_mask
        old_logp[i, :lr] = e.behaviour_logp
    batch = {
        INPUT_IDS: torch.from_numpy(input_ids),
        ATTENTION_MASK: torch.from_numpy(attention),
        RESPONSE_IDS: torch.from_numpy(input_ids[:, p:].copy()),
        ACTION_MASK: torch.from_numpy(action_mask),
        OLD_LOGP: torch.from_numpy(old_logp),
        SCORES: torch.tensor([e.score for e in items], dtype=torch.float32),
        CORRECT: torch.tensor([e.correct for e in items], dtype=torch.float32),
        TRUNCATED: torch.tensor([e.truncated for e in items], dtype=torch.float32),
    }
    if any(e.turn_rewards is not None for e in items):
        turn_rewards = np.zeros((b, t), dtype=np.float32)
        for i, e in enumerate(items):
            if e.turn_rewards is not None:
                turn_rewards[i, : len(e.turn_rewards)] = e.turn_rewards
        batch[TURN_REWARDS] = torch.from_numpy(turn_rewards)
    if any(e.sequence for e in items):  # the episode of each row: a new one at each sequence 0
        starts = np.asarray([e.sequence == 0 for e in items], dtype=np.int64)
        batch[EPISODE_INDEX] = torch.from_numpy(np.cumsum(starts) - 1)
    return batch


def pack_episodes(episodes: Sequence[Any], group_size: int, pad_token_id: int
                  ) -> dict[str, torch.Tensor]:
    """The learner batch of `episodes` (SingleAgentEpisodes), each prompt's group together,
    each episode's rows (`episode_rows`) together in it."""
    rows = [row for e in episodes for row in episode_rows(e)]
    return pack(order_by_group(rows, group_size), pad_token_id)


def order_by_group(items: list[EpisodeTokens], group_size: int) -> list[EpisodeTokens]:
    """Put each prompt's responses next to each other and check every group is complete.

    The group estimators (grpo, rloo, ...) read groups as consecutive runs of `group_size`
    responses, so a group split across batches would silently compare unrelated answers. A group
    counts episodes (rows with `sequence` 0); an episode's further rows follow it in `items`
    and stay behind it.
    """
    groups: dict[Any, list[EpisodeTokens]] = {}
    for e in items:
        groups.setdefault(e.group_id, []).append(e)
    bad = {g: n for g, v in groups.items()
           if (n := sum(e.sequence == 0 for e in v)) != group_size}
    if bad:
        raise ValueError(
            f"Episodes do not form complete groups of num_return_sequences_in_group="
            f"{group_size}: group sizes {dict(list(bad.items())[:5])}. Every prompt's responses "
            "must reach the learner in the same batch."
        )
    return [e for v in groups.values() for e in v]
