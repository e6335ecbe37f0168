"""`openai_agent` episodes: agents run against the gateway, their sampled tokens become episodes.

Per sample call the runner hands the prompts it drew (`n` episodes each, one group per prompt);
`sample_agent_episodes` runs the agents (`agent_runs`), scores what each returned
(`OpenAIAgentEnv.score`) and turns each episode's calls into one `SingleAgentEpisode`:
- the calls are stitched into sequences (`gateway.trajectories`): actions are the model's
  sampled tokens with their log-probs and weight versions, the tokens between calls ride in the
  step infos as env tokens (mask 0), the reward sits on the last action;
- an agent that rewrote its history (dropped or summarised messages) sampled several sequences.
  Every one is trained, with the episode's reward: the episode holds their actions one sequence
  after the other, and the last action of each but the last carries the next one's prompt
  (`NEXT_PROMPT_IDS`), so the learner packs one row per sequence (`learner.packing`). The
  episode stays one episode for everything that counts episodes (its group's completeness,
  dynamic sampling, accuracy, staleness: its oldest token), and the group baselines and reward
  normalisation count it once, broadcasting its advantage to all its rows
  (`core.AdvantageInputs.episode_index`), as SkyRL's step-wise training broadcasts a
  trajectory's advantage to its steps (NovaSky-AI/SkyRL#436). Without that, an episode that
  split into 3 sequences would weigh 3 times in its group's mean and std. The loss sees each
  row as a sequence: token-mean aggregation counts every trained token once, a `seq-mean-*`
  mode counts each sequence as one. `prefix_breaks` counts the sequences past the first;
- an agent that raised, timed out, returned garbage or never called the model drops its
  episode, and with it its prompt's group, because group baselines need whole groups (the
  learner refuses an incomplete one). One warning per call names the first error; a call where
  every group failed raises (`AllAgentsFailed`), since there is nothing to train on;
- an episode cut by a bound (calls, context tokens) ends truncated, with the bound's name in its
  final info (`AGENT_TRUNCATED_BY`) and the agent's result scored if it returned one (else the
  verifier's wrong score).

Evaluation (`score_agents`) runs the same agent on held-out problems and counts the verifier's
verdicts; an episode that produced nothing counts as wrong.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_llm.envs.token_mdp import EMPTY_INFO, ENV_TOKENS
from rllib_llm.exchange.columns import (
    ACTION_LOGP,
    GROUP_ID,
    NEXT_PROMPT_IDS,
    PROMPT_IDS,
    PROMPT_INDEX,
    WEIGHT_VERSION,
    is_correct,
)
from rllib_llm.rollout.agent_runs import AgentRun, run_agents
from rllib_llm.rollout.engine import SamplingParams
from rllib_llm.rollout.eval_shard import EvalShard
from rllib_llm.rollout.gateway.episodes import EpisodeBounds
from rllib_llm.rollout.gateway.trajectories import TokenSequence, stitch

logger = logging.getLogger(__name__)

AGENT_TRUNCATED_BY = "agent_truncated_by"  # final info: the bound that cut the episode, or None
PREFIX_BREAKS = "prefix_breaks"  # final info: sequences the episode's calls split into, minus 1
AGENT_CALLS = "agent_calls"  # final info: the model calls the episode made
# Metrics of a sample call (fractions of its episodes; prefix breaks per kept episode).
AGENT_ERROR_FRACTION = "agent_error_fraction"
AGENT_TIMEOUT_FRACTION = "agent_timeout_fraction"
AGENT_DROPPED_GROUPS = "agent_dropped_groups"
AGENT_PREFIX_BREAKS_MEAN = "agent_prefix_breaks_mean"
AGENT_MALFORMED_TOOL_CALLS = "agent_malformed_tool_calls"
AGENT_CALLS_MEAN = "agent_calls_mean"


class AllAgentsFailed(RuntimeError):
    """Every group of a sample call lost an episode: the agent is likely broken."""


@dataclass(frozen=True)
class AgentCounts:
    """What happened to a call's agent episodes, for its metrics."""

    episodes: int
    errors: int
    timeouts: int
    dropped_groups: int
    prefix_breaks: int
    malformed_tool_calls: int
    calls: int
    first_error: str | None = None

    def metrics(self) -> dict[str, float]:
        kept = max(self.episodes - self.errors - self.timeouts, 1)
        return {AGENT_ERROR_FRACTION: self.errors / max(self.episodes, 1),
                AGENT_TIMEOUT_FRACTION: self.timeouts / max(self.episodes, 1),
                AGENT_DROPPED_GROUPS: float(self.dropped_groups),
                AGENT_PREFIX_BREAKS_MEAN: self.prefix_breaks / kept,
                AGENT_MALFORMED_TOOL_CALLS: float(self.malformed_tool_calls),
                AGENT_CALLS_MEAN: self.calls / max(self.episodes, 1)}


def make_gateway(env, engine, *, temperature: float, top_p: float, response_length: int):
    """The runner's gateway for `env`'s agents: its engine and tokenizer, sampling at the
    training temperature and top-p whatever a request asks (the learner scores at them)."""
    from rllib_llm.rollout.gateway.server import Gateway
    from rllib_llm.rollout.gateway.service import ServiceSettings

    forced = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=response_length)
    return Gateway(engine, env.tokenizer, ServiceSettings(
        model_name=env.agent_settings.model_name, default_max_tokens=response_length,
        forced=forced))


def episode_bounds(env) -> EpisodeBounds:
    """The gateway's bounds of one episode of `env` (its `AgentEnvConfig`)."""
    return EpisodeBounds(max_calls=env.agent_settings.max_calls,
                         max_total_tokens=env.max_total_tokens,
                         timeout_s=env.agent_settings.agent_timeout_s)


def score_agents(env, engine, indices: Sequence[int], samples_per_problem: int,
                 sampling: SamplingParams, num_problems: int):
    """Held-out evaluation of an agent env: the agent solves each problem of `indices`
    `samples_per_problem` times through a gateway sampling as `sampling` says; returns the
    `EvalShard` of the verdicts."""
    k = samples_per_problem
    infos = [env.reset(options={PROMPT_INDEX: i})[1] for i in indices]
    gateway = make_gateway(env, engine, temperature=sampling.temperature, top_p=sampling.top_p,
                           response_length=sampling.max_tokens)
    try:
        runs = run_agents(env.agent, gateway, [env.problem(i) for i in infos for _ in range(k)],
                          episode_bounds(env), max_threads=env.agent_settings.max_agent_threads)
    finally:
        gateway.stop()
    outcomes = [_outcome(env, indices[j // k], run) for j, run in enumerate(runs)]
    right = [not isinstance(o, str) and is_correct(o[1], o[0]) for o in outcomes]
    correct = [sum(right[j * k:(j + 1) * k]) for j in range(len(indices))]
    tokens = sum(len(c.completion_ids) for r in runs for c in r.record.calls)
    return EvalShard(list(indices), correct, k, tokens, num_problems)


def sample_agent_episodes(env, gateway, reset_infos: Sequence[Mapping[str, Any]], n: int, *,
                          group_ids: Sequence[str]) -> tuple[list[SingleAgentEpisode],
                                                             AgentCounts]:
    """`n` agent episodes per prompt (`reset_infos[g]`, group `group_ids[g]`), problem-major;
    groups with a failed episode are left out (module docstring)."""
    problems = [env.problem(info) for info in reset_infos for _ in range(n)]
    runs = run_agents(env.agent, gateway, problems, episode_bounds(env),
                      max_threads=env.agent_settings.max_agent_threads)
    outcomes = [_outcome(env, info[PROMPT_INDEX], run)
                for info, run in zip([i for i in reset_infos for _ in range(n)], runs)]
    failures = [o for o in outcomes if isinstance(o, str)]
    if failures:
        logger.warning("openai_agent: %d of %d episodes produced nothing (their groups are "
                       "left out); the first: %s", len(failures), len(outcomes), failures[0])
    episodes, dropped, breaks = [], 0, 0
    for g, info in enumerate(reset_infos):
        group = outcomes[g * n:(g + 1) * n]
        if any(isinstance(o, str) for o in group):
            dropped += 1
            continue
        for reward, final_info, run in group:
            sequences, prefix_breaks = stitch(run.record.calls)
            breaks += prefix_breaks
            episodes.append(to_episode(
                [s for s in sequences if s.actions], reset_info=info, group_id=group_ids[g],
                reward=reward, truncated=run.record.truncated_by is not None,
                final_info={**final_info, AGENT_TRUNCATED_BY: run.record.truncated_by,
                            PREFIX_BREAKS: prefix_breaks, AGENT_CALLS: len(run.record.calls)},
                env=env))
    counts = AgentCounts(
        episodes=len(runs),
        errors=sum(isinstance(o, str) and not r.timed_out for r, o in zip(runs, outcomes)),
        timeouts=sum(r.timed_out for r in runs), dropped_groups=dropped, prefix_breaks=breaks,
        malformed_tool_calls=sum(r.record.malformed_tool_calls for r in runs),
        calls=sum(len(r.record.calls) for r in runs),
        first_error=failures[0] if failures else None)
    return episodes, counts


def _outcome(env, prompt_index: int, run: AgentRun) -> tuple[float, dict, AgentRun] | str:
    """(reward, final info, run) of a kept episode, or why it is dropped."""
    if run.timed_out:
        return f"the agent ran past agent_timeout_s={env.agent_settings.agent_timeout_s:g}"
    if not run.record.calls:
        return run.error or "the agent never called the model"
    if run.error is not None:
        if run.record.truncated_by is None:
            return run.error
        return env.config.wrong_score, {}, run  # a bound refused its call, and it gave up
    try:
        reward, final_info = env.score(prompt_index, run.result)
    except TypeError as e:
        return str(e)
    return reward, final_info, run


def to_episode(sequences: Sequence[TokenSequence], *, reset_info: Mapping[str, Any],
               group_id: str, reward: float, truncated: bool, final_info: Mapping[str, Any],
               env) -> SingleAgentEpisode:
    """An episode's sequences as RLlib's episode: actions (T,) = the sampled tokens of every
    sequence, one after the other, observations (T+1,); in the step infos the tokens between
    calls as env tokens, and at the last action of each sequence but the last the next one's
    prompt (`NEXT_PROMPT_IDS`); the reward on the last action."""
    actions = np.asarray([t for s in sequences for t in s.actions], dtype=np.int64)  # (T,)
    infos: list[dict[str, Any]] = [EMPTY_INFO] * len(actions)
    observations = actions.copy()
    start = 0  # the first action of the sequence at hand
    for sequence, following in zip(sequences, [*sequences[1:], None]):
        for i, between in sequence.env_tokens.items():
            infos[start + i] = {ENV_TOKENS: list(between)}
            observations[start + i] = between[-1]
        start += len(sequence.actions)
        if following is not None:  # (no env tokens follow a sequence's last action)
            infos[start - 1] = {NEXT_PROMPT_IDS: list(following.prompt_ids)}
            observations[start - 1] = following.prompt_ids[-1]
    infos[-1] = {**infos[-1], **final_info}
    rewards = np.zeros(len(actions), dtype=np.float64)
    rewards[-1] = reward
    first = sequences[0]
    return SingleAgentEpisode(
        observations=np.concatenate([[first.prompt_ids[-1]], observations]),
        infos=[{**reset_info, PROMPT_IDS: list(first.prompt_ids), GROUP_ID: group_id}, *infos],
        actions=actions,
        rewards=rewards,
        terminated=not truncated,
        truncated=truncated,
        extra_model_outputs={
            ACTION_LOGP: np.asarray([lp for s in sequences for lp in s.logprobs],
                                    dtype=np.float32),
            WEIGHT_VERSION: np.asarray([v for s in sequences for v in s.weight_versions],
                                       dtype=np.int64),
        },
        observation_space=env.observation_space,
        action_space=env.action_space,
        len_lookback_buffer=0,
    )
