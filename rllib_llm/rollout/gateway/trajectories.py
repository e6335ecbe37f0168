"""An episode's calls stitched into token-level sequences: what is trained is what was sampled.

The gateway records every call of an episode: its prompt ids, the completion's ids, their
log-probs and the weight version that produced them (`Call`). `stitch` joins the calls into
sequences. A call whose prompt extends a sequence (its prompt + completions + the tokens between
them) continues it: the tokens between the previous completion and the new one (a tool's output,
the next user message, the chat template's markers) are state, appended after the previous
completion as environment tokens (mask 0, as `TextTurnEnv` appends a tool's output), and the new
completion's tokens are actions with their log-probs. A call that extends no sequence (the agent
dropped or rewrote messages, or sampled several choices and went on from one) starts a new
sequence; `prefix_breaks` counts them (sequences − 1). Every sequence is trained, as a row of its
own with the episode's reward (`rollout.agent_rollouts` says how the episode carries them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Call:
    """One sampled completion: the prompt it continued and the model's tokens.

    Attributes:
        prompt_ids: the prompt the engine decoded from.
        completion_ids: (k,) the sampled tokens.
        logprobs: (k,) the engine's log-prob of each sampled token.
        weight_version: the weights that sampled it.
    """

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    weight_version: int


@dataclass
class TokenSequence:
    """One token-level trajectory: prompt, then actions, with environment tokens between turns.

    Attributes:
        prompt_ids: the first call's prompt (state).
        actions: (T,) the model's tokens of every stitched call, in order.
        logprobs: (T,) their sampling log-probs.
        weight_versions: (T,) the weights that sampled each.
        env_tokens: action index → the state tokens that follow that action (mask 0).
    """

    prompt_ids: list[int]
    actions: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    weight_versions: list[int] = field(default_factory=list)
    env_tokens: dict[int, list[int]] = field(default_factory=dict)

    def tokens(self) -> list[int]:
        """The whole sequence: prompt, then each action followed by its env tokens."""
        out = list(self.prompt_ids)
        for i, token in enumerate(self.actions):
            out.append(token)
            out.extend(self.env_tokens.get(i, ()))
        return out

    def action_mask(self) -> list[int]:
        """1 on the model's tokens, 0 on every other token of `tokens()`."""
        mask = [0] * len(self.prompt_ids)
        for i in range(len(self.actions)):
            mask.append(1)
            mask.extend([0] * len(self.env_tokens.get(i, ())))
        return mask


def stitch(calls: Sequence[Call]) -> tuple[list[TokenSequence], int]:
    """The calls of one episode, in order, as sequences; returns (sequences, prefix_breaks).

    A call continues the longest sequence whose tokens its prompt starts with; otherwise it
    starts a new one (a prefix break)."""
    sequences: list[TokenSequence] = []
    full: list[list[int]] = []  # each sequence's tokens so far (kept, not rebuilt per call)
    for call in calls:
        prompt = list(call.prompt_ids)
        best = _longest_prefix(full, prompt)
        if best is None:
            sequences.append(TokenSequence(prompt_ids=prompt))
            full.append(list(prompt))
            best = len(sequences) - 1
        seq, tokens = sequences[best], full[best]
        between = prompt[len(tokens):]
        if between:  # state after the last action (never before the first: that is the prompt)
            seq.env_tokens[len(seq.actions) - 1] = between
        seq.actions.extend(call.completion_ids)
        seq.logprobs.extend(call.logprobs)
        seq.weight_versions.extend([call.weight_version] * len(call.completion_ids))
        full[best] = [*prompt, *call.completion_ids]
    return sequences, max(0, len(sequences) - 1)


def _longest_prefix(full: list[list[int]], prompt: list[int]) -> int | None:
    """The index of the longest of `full` that `prompt` starts with, None if none does."""
    best, best_len = None, -1
    for i, tokens in enumerate(full):
        if len(tokens) > best_len and len(tokens) <= len(prompt) and \
                prompt[:len(tokens)] == tokens:
            best, best_len = i, len(tokens)
    return best
