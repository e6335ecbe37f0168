"""Partial rollouts (`partial_rollout_max_split` = N > 1): a response still unfinished when its
runner's `sample()` call has its groups is continued in the runner's next call, under the weights
the runner holds by then.

Why: a call that waits for every response to end waits for the longest one (the long tail of
reasoning lengths), while the learner and the other responses' slots idle. With partial
rollouts a call ends as soon as it holds the groups it was asked for; the responses still going
keep their tokens and go on next time (verl's, OpenRLHF's and slime's `partial_rollout`; the
split into at most N segments is MindSpeed-RL's `partial_rollout_max_split`).

How one call (`InFlight.sample_groups`) of n groups runs, in rounds (MindSpeed-RL's scheme):
1. Groups finished beyond the last call's n are handed out first.
2. Each round, n groups are in flight: those from earlier calls, oldest first, and new prompts
   started to make up the number. The round generates the next segment, at most
   `segment = ceil(response_length / N)` tokens, of every unfinished response in flight, from
   prompt + the response's tokens so far. The engine's KV cache is not kept across rounds; the
   prefix is encoded again under the weights held now, as the peers' partial rollouts re-prefill
   after a weight update.
3. Groups whose every response has ended leave flight, in the order they were started.
Rounds repeat until n groups are finished; those beyond n wait for the next call, finished, and
the unfinished ones wait in flight. Every response ends within N segments, so a group finishes
within N rounds, and (fewer than n waiting finished) every call advances the groups in flight.

Each token keeps the version of the weights that sampled it and its own behaviour log-prob, so an
episode may hold tokens of several versions; its staleness is its oldest token's
(`algorithm.async_sampling.episode_version`). In asynchronous training a runner's consecutive
calls sample with consecutive versions, so a group is handed out at most N calls after it was
started (N - 1 it may go on for, one it may wait finished): at most N versions older than a
whole-response batch of the same call. A call asking for fewer groups than the last (dynamic
sampling's later rounds, a dropped share sampled again) may be served from the finished ones
alone; `max_staleness` drops what grows too old.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rllib_llm.rollout.engine import Response, RolloutEngine, SamplingParams


@dataclass
class PartialResponse:
    """One response so far: its tokens, their behaviour log-probs and weight versions, and why
    it ended (None while it goes on)."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    finish_reason: str | None = None

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def extend(self, segment: Response, version: int, response_length: int) -> None:
        """Append a segment sampled by weights `version`; the response ends with an EOS (or
        stop sequence) or at `response_length` tokens."""
        self.token_ids += segment.token_ids
        self.logprobs += segment.logprobs
        self.versions += [version] * len(segment.token_ids)
        if segment.finish_reason == "stop" or len(self.token_ids) >= response_length:
            self.finish_reason = segment.finish_reason

    def response(self) -> Response:
        """The finished response, as an engine would have returned it whole."""
        assert self.finish_reason is not None, "the response is still being generated"
        return Response(list(self.token_ids), list(self.logprobs), self.finish_reason)


@dataclass
class PromptGroup:
    """The responses to one prompt, trained on together once all have ended."""

    prompt_index: int
    prompt_ids: list[int]
    group_id: str
    responses: list[PartialResponse]

    @property
    def done(self) -> bool:
        return all(r.done for r in self.responses)

    @property
    def started(self) -> bool:
        return any(r.token_ids for r in self.responses)


# Starts a group: (prompt index, prompt ids, group id) of the next prompt of the runner's env.
GroupStarter = Callable[[], tuple[int, list[int], str]]


def in_flight_for(env, *, max_split: int, env_name: Any, response_length: int,
                  group_size: int) -> InFlight | None:
    """The groups a runner with partial rollouts (`max_split` > 1) keeps in flight between its
    calls; None without them. A multi-turn `env` is refused, and closed first (the runner that
    was to own it fails to build, so nothing else would close its tools' and verifier's
    processes)."""
    if max_split == 1:
        return None
    if getattr(env, "multi_turn", False):
        env.close()
        raise ValueError(
            f"RLVRConfig.partial_rollout_max_split={max_split} with the multi-turn environment "
            f"{env_name!r}: partial rollouts continue single responses, not "
            "turns between tool calls; set partial_rollout_max_split=1.")
    return InFlight(max_split, response_length, group_size)


class InFlight:
    """The prompt groups a runner is generating, kept between its `sample()` calls.

    Args:
        max_split: N, the most segments a response is generated in (>= 2).
        response_length: the most tokens of a response.
        group_size: responses per prompt (num_return_sequences_in_group).
    """

    def __init__(self, max_split: int, response_length: int, group_size: int):
        self.segment = math.ceil(response_length / max_split)
        self.response_length = response_length
        self.group_size = group_size
        self.groups: list[PromptGroup] = []  # in flight, oldest first
        self.finished: list[PromptGroup] = []  # finished beyond the last call's groups
        self.rounds = 0  # rounds of the last sample_groups call

    def sample_groups(self, num_groups: int, start: GroupStarter, engine: RolloutEngine,
                      sampling: SamplingParams) -> list[PromptGroup]:
        """`num_groups` finished groups, oldest first (module docstring).

        `sampling` is the call's; round r draws with a seed mixed from its seed and r."""
        self.rounds = 0
        while len(self.finished) < num_groups:
            while len(self.groups) < num_groups:
                index, prompt_ids, group_id = start()
                self.groups.append(PromptGroup(
                    index, list(prompt_ids), group_id,
                    [PartialResponse() for _ in range(self.group_size)]))
            self._advance(self.groups, engine, self._round_sampling(sampling))
            self.finished += [g for g in self.groups if g.done]
            self.groups = [g for g in self.groups if not g.done]
            self.rounds += 1
        out, self.finished = self.finished[:num_groups], self.finished[num_groups:]
        return out

    def _round_sampling(self, sampling: SamplingParams) -> SamplingParams:
        if sampling.seed is None:
            return sampling
        mix = np.random.SeedSequence([sampling.seed, self.rounds])
        return dataclasses.replace(sampling, seed=int(mix.generate_state(1)[0]))

    def _advance(self, groups: list[PromptGroup], engine: RolloutEngine,
                 sampling: SamplingParams) -> None:
        """Generate the next segment of every unfinished response of `groups`: a new group's n
        first segments in one `generate(prompt, n)` (they share the prompt's prefill), every
        other response from its prompt + tokens so far."""
        version = engine.weight_version
        fresh = [g for g in groups if not g.started]
        fresh_ids = {id(g) for g in fresh}
        if fresh:
            params = dataclasses.replace(sampling, max_tokens=self._tokens_left(0))
            outs = engine.generate([g.prompt_ids for g in fresh], self.group_size, params)
            for group, segments in zip(fresh, outs, strict=True):
                for response, segment in zip(group.responses, segments, strict=True):
                    response.extend(segment, version, self.response_length)
        going = [(g, r) for g in groups if id(g) not in fresh_ids
                 for r in g.responses if not r.done]
        # Continuations of the same length go in one call: all but a response's last segment
        # are `segment` tokens, so there are at most two lengths.
        for max_tokens in sorted({self._tokens_left(len(r.token_ids)) for _, r in going}):
            batch = [(g, r) for g, r in going if self._tokens_left(len(r.token_ids)) == max_tokens]
            params = dataclasses.replace(sampling, max_tokens=max_tokens)
            outs = engine.generate([g.prompt_ids + r.token_ids for g, r in batch], 1, params)
            for (_, response), (segment,) in zip(batch, outs, strict=True):
                response.extend(segment, version, self.response_length)

    def _tokens_left(self, generated: int) -> int:
        """The next segment's most tokens for a response `generated` tokens long."""
        return min(self.segment, self.response_length - generated)

    # --- checkpoints ----------------------------------------------------------------------------
    def get_state(self) -> dict[str, list[dict[str, Any]]]:
        """The groups in flight and those finished, as plain lists (a checkpoint resumes them)."""
        return {"in_flight": [dataclasses.asdict(g) for g in self.groups],
                "finished": [dataclasses.asdict(g) for g in self.finished]}

    def set_state(self, state: dict[str, list[dict[str, Any]]]) -> None:
        self.groups, self.finished = ([_group(g) for g in state[key]]
                                      for key in ("in_flight", "finished"))


def _group(state: dict[str, Any]) -> PromptGroup:
    """A PromptGroup from its `dataclasses.asdict` form."""
    group = PromptGroup(**state)
    group.responses = [PartialResponse(**r) for r in group.responses]
    return group
