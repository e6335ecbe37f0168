"""Shared pieces of token-level MDP environments: the chunk result, env tokens, state rebuilding.

The state of an episode is prompt + everything appended since, stored as a history rather than
as per-step snapshots (O(T) memory, not O(T²)). An observation is only the last token of the
state; the prompt ids ride in the reset info (`PROMPT_IDS`). A step appends the agent's token
(an action, trained with mask 1) and, in multi-turn environments, possibly tokens of the
environment's own right after it (a tool's output), listed in that step's info under
`ENV_TOKENS`: they are part of the state but not actions (mask 0 in training), and the
observation is then the last of them. `rebuild_state` turns prompt + actions + infos back into
the exact state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PROMPT_IDS = "prompt_ids"  # reset info: the prompt's token ids
ENV_TOKENS = "env_tokens"  # step info: tokens the environment appended after the action


@dataclass(slots=True)
class ChunkResult:
    """The outcome of `step_chunk`: one entry per consumed token, exactly what `step` returns.

    Attributes:
        observations: observation after each token (the last token of the state).
        rewards: 0.0 except at the episode's end.
        terminateds: True only on the token that ended the episode with EOS.
        truncateds: True only on the token that hit the response length without EOS.
        infos: one dict per token; empty except at the end (and where env tokens were added).
    """

    observations: list[int]
    rewards: list[float]
    terminateds: list[bool]
    truncateds: list[bool]
    infos: list[dict[str, Any]]


def rebuild_state(
    prompt_ids: Sequence[int], actions: Sequence[int], infos: Sequence[Mapping[str, Any]]
) -> list[int]:
    """The full state after `actions`: prompt, then per step the action and its env tokens.

    Args:
        prompt_ids: the reset info's `PROMPT_IDS`.
        actions: the agent's tokens, one per step.
        infos: the step infos, one per action (an RLlib episode's `get_infos()[1:]`: its first
            info is the reset's).
    """
    if len(infos) != len(actions):
        raise ValueError(
            f"rebuild_state got {len(actions)} actions and {len(infos)} infos; pass one step info "
            "per action (without the reset info)"
        )
    state = [int(t) for t in prompt_ids]
    for action, info in zip(actions, infos):
        state.append(int(action))
        state.extend(int(t) for t in info.get(ENV_TOKENS, ()))
    return state
