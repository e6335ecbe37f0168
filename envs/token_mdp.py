"""Shared pieces of token-level MDP environments: the chunk result, env tokens, state rebuilding.

The state of an episode is prompt + everything appended since, stored as a history rather than
as per-step snapshots (O(T) memory, not O(T²)). An observation is only the last token of the
state; the prompt ids ride in the reset info (`PROMPT_IDS`). A step appends the agent's token
(an action, trained with mask 1) and, in multi-turn environments, possibly tokens of the
environment's own right after it (a tool's output), listed in that step's info under
`ENV_TOKENS`: they are part of the state but not actions (mask 0 in training), and the
observation is then the last of them. `rebuild_state` turns prompt + actions + infos back into
the exact state. An episode's final info may hold the verifier's verdict under `VERIFIER_INFO`;
`is_correct` reads it.

Per-token cost: `step_chunk` returns numpy arrays and one shared read-only `EMPTY_INFO` for every
step without news, so a 1,024-token response creates no Python object per token.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

PROMPT_IDS = "prompt_ids"  # reset info: the prompt's token ids
PROMPT_INDEX = "prompt_index"  # reset info (and reset option): which problem of the data set
PROMPT = "prompt"  # reset info: the problem's prompt text
ANSWER = "answer"  # reset info: the problem's reference answer (what the verifier checks against)
ENV_TOKENS = "env_tokens"  # step info: tokens the environment appended after the action
VERIFIER_INFO = "verifier"  # final step info: the verifier's verdict, a dict with "correct"


class _ReadOnlyInfo(dict):
    """An info dict that refuses writes, so one object can stand for every empty step info.

    Episodes share it across steps (and pickling keeps it shared): a write would change every
    step at once, so it raises instead. Copy it (`dict(info)`) to add keys.
    """

    __slots__ = ()

    def _refuse(self, *args, **kwargs):
        raise TypeError(
            "this step info is the shared read-only EMPTY_INFO of token_mdp; build a new dict "
            "(e.g. {**info, key: value}) instead of writing to it"
        )

    __setitem__ = __delitem__ = __ior__ = update = setdefault = pop = popitem = clear = _refuse


EMPTY_INFO: dict[str, Any] = _ReadOnlyInfo()  # the info of every step with nothing to report


@dataclass(slots=True, eq=False)
class ChunkResult:
    """The outcome of `step_chunk`: per consumed token, the token and exactly what `step`
    returns for it. The arrays are the result's own, never the caller's; `observations` may be
    the very array `actions` is (when each observation is the token itself).

    Attributes:
        actions: (n,) int64, the tokens consumed, as the env checked them.
        observations: (n,) int64, the observation after each token (the last token of the state).
        rewards: (n,) float64, 0.0 except at the episode's end.
        terminateds: (n,) bool, True only on the token that ended the episode with EOS.
        truncateds: (n,) bool, True only on the token that hit the response length without EOS.
        infos: one dict per token: `EMPTY_INFO` except at the end (and where env tokens were
            added).
    """

    actions: np.ndarray
    observations: np.ndarray
    rewards: np.ndarray
    terminateds: np.ndarray
    truncateds: np.ndarray
    infos: list[dict[str, Any]]

    def __eq__(self, other: object) -> bool:
        """Equal per-token results (values, not dtypes: a list equals the same array)."""
        if not isinstance(other, ChunkResult):
            return NotImplemented
        arrays = ("actions", "observations", "rewards", "terminateds", "truncateds")
        return all(np.array_equal(getattr(self, a), getattr(other, a)) for a in arrays) and \
            self.infos == other.infos


def is_correct(final_info: Mapping[str, Any], score: float) -> bool:
    """Whether a finished response is correct: the verifier's verdict in the episode's final info
    (`final_info[VERIFIER_INFO]["correct"]`) when the environment gives one, else `score > 0`."""
    verdict = final_info.get(VERIFIER_INFO)
    if isinstance(verdict, Mapping) and "correct" in verdict:
        return bool(verdict["correct"])
    return score > 0


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
