"""Multi-turn rollouts: generate until every episode's env needs input, step the envs, go on.

For envs with `multi_turn = True` (`rllib_llm.envs.text_turn_env.TextTurnEnv`). One env per running
episode (`env.spawn()`), all advanced in lock step:
1. generate the next turn of every running episode in one engine call (the first turn as
   `n` samples of each prompt, sharing its prefill; later turns one sample per episode from its
   whole context), stopping at EOS, at the env's stop sequences, or at the longest remaining
   budget, each response then cut where its env says the turn ends (`turn_end`);
2. step every env through its turn from a thread pool, so tool calls of different episodes run
   at the same time (tools wait on subprocesses, which releases the GIL);
3. episodes whose env ended them are done; the others continue from their env's state (prompt,
   the agent's tokens and the env's observation tokens).
Each finished episode is one `SingleAgentEpisode` whose actions are the agent's tokens only; the
env's tokens ride in the infos (`ENV_TOKENS`), so the learner masks them out of the loss.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_llm.exchange.columns import ACTION_LOGP, GROUP_ID, PROMPT_INDEX, WEIGHT_VERSION
from rllib_llm.rollout.engine import Response, SamplingParams

MAX_TOOL_THREADS = 64  # envs stepped at once; tool calls beyond it wait for a free thread


@dataclass
class _Episode:
    """One running episode: its env and what its turns produced so far."""

    env: Any
    obs: int
    reset_info: dict[str, Any]
    chunks: list[Any] = field(default_factory=list)  # ChunkResult per turn
    logps: list[np.ndarray] = field(default_factory=list)  # (k_turn,) float32 per turn
    done: bool = False

    def step(self, response: Response) -> None:
        end = self.env.turn_end(response.token_ids) or len(response.token_ids)
        result = self.env.step_chunk(response.token_ids[:end])
        self.chunks.append(result)
        self.logps.append(np.asarray(response.logprobs[:end], dtype=np.float32))
        self.done = bool(result.terminateds[-1] or result.truncateds[-1])


def run_multi_turn(envs: list[Any], engine, prompt_indices: list[int], n: int,
                   sampling: SamplingParams, executor: ThreadPoolExecutor) -> list[_Episode]:
    """Run `n` episodes from each problem `prompt_indices[g]` to their ends (module docstring).

    Args:
        envs: at least `len(prompt_indices) * n` multi-turn envs, one per episode.
        sampling: sampling of every turn; its seed is mixed with the turn number, and the env's
            stop sequences and the remaining budget are added per turn.

    Returns the finished episodes, problem-major (the n episodes of problem g at g*n..g*n+n-1).
    """
    episodes = []
    for g, index in enumerate(prompt_indices):
        for j in range(n):
            env = envs[g * n + j]
            obs, info = env.reset(options={PROMPT_INDEX: index})
            episodes.append(_Episode(env, obs, info))
    if not episodes:
        return []
    stops = episodes[0].env.stop_sequences
    turn = 0
    while running := [e for e in episodes if not e.done]:
        turn_sampling = dataclasses.replace(
            sampling, seed=_turn_seed(sampling.seed, turn), stop_sequences=stops,
            max_tokens=max(e.env.tokens_left for e in running))
        if turn == 0:  # every episode at its prompt: n samples share each prompt's prefill
            groups = engine.generate([episodes[g * n].env.state_token_ids()
                                      for g in range(len(prompt_indices))], n, turn_sampling)
            responses = [r for group in groups for r in group]
        else:
            groups = engine.generate([e.env.state_token_ids() for e in running], 1,
                                     turn_sampling)
            responses = [group[0] for group in groups]
        list(executor.map(_Episode.step, running, responses))  # list(): raise what a step raised
        turn += 1
    return episodes


def to_single_agent_episode(episode: _Episode, *, group_id: str,
                            weight_version: int) -> SingleAgentEpisode:
    """The finished episode as RLlib's: actions (k,) = the agent's tokens of every turn,
    observations (k+1,), rewards (k,), infos with the env's tokens, the sampler's log-probs."""
    chunks = episode.chunks
    actions = np.concatenate([c.actions for c in chunks])  # (k,)
    env = episode.env
    return SingleAgentEpisode(
        observations=np.concatenate([[episode.obs], *[c.observations for c in chunks]]),
        infos=[{**episode.reset_info, GROUP_ID: group_id}, *[i for c in chunks for i in c.infos]],
        actions=actions,
        rewards=np.concatenate([c.rewards for c in chunks]),
        terminated=bool(chunks[-1].terminateds[-1]),
        truncated=bool(chunks[-1].truncateds[-1]),
        extra_model_outputs={
            ACTION_LOGP: np.concatenate(episode.logps),
            WEIGHT_VERSION: np.full(len(actions), weight_version, dtype=np.int64),
        },
        observation_space=env.observation_space,
        action_space=env.action_space,
        len_lookback_buffer=0,
    )


def _turn_seed(seed: int | None, turn: int) -> int | None:
    """The sampling seed of turn `turn`: the call's own seed for the first, then mixed."""
    if seed is None or turn == 0:
        return seed
    return int(np.random.SeedSequence([seed, turn]).generate_state(1)[0])
