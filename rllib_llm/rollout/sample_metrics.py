"""What an env runner's sample() call reports, under env_runners/ in the results: the metric
names and the functions that log them from a call's finished episodes (single-turn, multi-turn and
partial rollouts alike)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

from rllib_llm.exchange.columns import is_correct
from rllib_llm.rollout.partial_rollouts import InFlight, PartialResponse

# Metric names (under env_runners/ in the results).
EPISODE_RETURN_MEAN = "episode_return_mean"
ACCURACY = "accuracy"
RESPONSE_LENGTH_MEAN = "response_length_mean"
TRUNCATED_FRACTION = "truncated_fraction"
# Where a runner's sample() call goes, in seconds (means over the runners' calls of the iteration):
# the engine generating the responses (multi-turn: with the env's steps and tools between turns);
# the verifier scoring them (multi-turn and partial rollouts: see `log_sample_metrics`);
# replaying them through the env into episodes; and the whole call, which also holds drawing the
# prompts, building the engine at the first call and logging. The driver's timers/sample is the
# call plus carrying the episodes to the driver (Ray's object transfer): the difference is that.
GENERATE_S = "time_generate_s"
VERIFY_S = "time_verify_s"
REPLAY_S = "time_replay_s"
SAMPLE_CALL_S = "time_sample_call_s"
GENERATE_TOKENS_PER_S = "generate_tokens_per_s"
WEIGHT_VERSION_METRIC = "weight_version"
NUM_DROPPED_PROMPTS = "num_dropped_prompts"
# Seconds the last weight sync took inside this runner (loading a state dict from the object
# store, or receiving a broadcast). RLlib's object-store sync does not wait for it, so the
# driver's weight_sync timer leaves it out; it then delays the next sample instead.
WEIGHT_LOAD_S = "time_weight_load_s"
# Seconds from the end of this runner's previous sample() to the start of this one: waiting for
# the learner (synchronous training), receiving weights, evaluating; asynchronous training keeps
# it to the weight loads. 0 for a runner's first sample. The mean over the runners' sample calls
# of the iteration.
IDLE_S = "time_idle_s"
# Multi-turn envs only: means over the batch's episodes (see `log_turn_metrics`).
TURNS_MEAN = "turns_mean"
TOOL_CALLS_MEAN = "tool_calls_mean"
TOOL_ERROR_FRACTION = "tool_error_fraction"  # failed tool calls / tool calls
TOOL_TIMEOUT_FRACTION = "tool_timeout_fraction"  # timed-out tool calls / tool calls
ENV_TOKEN_FRACTION = "env_token_fraction"  # env tokens / all tokens after the prompts
CONTEXT_TRUNCATED_FRACTION = "context_truncated_fraction"  # episodes the budget ended
TURN_LIMIT_FRACTION = "turn_limit_fraction"  # episodes max_turns ended
# Partial rollouts only: groups left unfinished in flight for the next call, and finished waiting
# for it, generation rounds of the call, and the share of the call's responses whose tokens more
# than one weight version sampled.
PARTIAL_GROUPS_IN_FLIGHT = "partial_groups_in_flight"
PARTIAL_GROUPS_FINISHED = "partial_groups_finished_waiting"
PARTIAL_ROUNDS = "partial_rounds"
PARTIAL_MIXED_FRACTION = "partial_mixed_version_fraction"


@dataclass(frozen=True)
class SampleTimes:
    """Seconds of a sample() call's phases (see GENERATE_S): each measured apart, none
    overlapping, so their sum is at most the call's own time (SAMPLE_CALL_S)."""

    generate: float
    verify: float = 0.0
    replay: float = 0.0


def log_sample_metrics(metrics, episodes: Sequence[SingleAgentEpisode], times: SampleTimes,
                       weight_version: int, verifier_counts: Mapping[str, int]) -> int:
    """Log a call's rewards, accuracy, lengths, phase times and the engine's weight version;
    returns the env steps (tokens) of the episodes, which RLlib counts as sampled."""
    lengths = [len(e) for e in episodes]
    returns = [float(e.get_return()) for e in episodes]
    correct = [is_correct(e.get_infos(-1), float(e.get_return())) for e in episodes]
    steps = sum(lengths)
    m = metrics
    m.log_value(EPISODE_RETURN_MEAN, float(np.mean(returns)), window=1)
    m.log_value(ACCURACY, float(np.mean(correct)), window=1)
    m.log_value(RESPONSE_LENGTH_MEAN, float(np.mean(lengths)), window=1)
    m.log_value(TRUNCATED_FRACTION, float(np.mean([e.is_truncated for e in episodes])),
                window=1)
    m.log_value(GENERATE_S, times.generate, window=1)
    m.log_value(VERIFY_S, times.verify, window=1)
    m.log_value(REPLAY_S, times.replay, window=1)
    m.log_value(GENERATE_TOKENS_PER_S, steps / max(times.generate, 1e-9), window=1)
    m.log_value(WEIGHT_VERSION_METRIC, weight_version, window=1)
    m.log_value(NUM_ENV_STEPS_SAMPLED_LIFETIME, steps, reduce="lifetime_sum")
    for name, count in verifier_counts.items():
        # Cumulative counters of this runner's env (timeouts, errors, ...).
        m.log_value(f"verifier_{name}", count, reduce="max", window=1)
    return steps


def log_turn_metrics(metrics, episodes: Sequence[SingleAgentEpisode]) -> None:
    """Multi-turn envs: turns, tool calls and their failures, env tokens, what ended episodes."""
    finals = [e.get_infos(-1) for e in episodes]
    calls = sum(f.get("tool_calls", 0) for f in finals)
    env_tokens = sum(f.get("num_env_tokens", 0) for f in finals)
    m = metrics
    m.log_value(TURNS_MEAN, float(np.mean([f.get("turns", 1) for f in finals])), window=1)
    m.log_value(TOOL_CALLS_MEAN, calls / len(finals), window=1)
    m.log_value(TOOL_ERROR_FRACTION,
                sum(f.get("tool_errors", 0) for f in finals) / max(calls, 1), window=1)
    m.log_value(TOOL_TIMEOUT_FRACTION,
                sum(f.get("tool_timeouts", 0) for f in finals) / max(calls, 1), window=1)
    m.log_value(ENV_TOKEN_FRACTION,
                env_tokens / max(env_tokens + sum(len(e) for e in episodes), 1), window=1)
    m.log_value(CONTEXT_TRUNCATED_FRACTION,
                float(np.mean([bool(f.get("context_truncated")) for f in finals])), window=1)
    m.log_value(TURN_LIMIT_FRACTION,
                float(np.mean([bool(f.get("turn_limit")) for f in finals])), window=1)


def log_partial_metrics(metrics, in_flight: InFlight,
                        responses: Sequence[PartialResponse]) -> None:
    """Partial rollouts: what waits for the next call, the call's rounds, and the share of its
    handed-out responses that several weight versions sampled."""
    metrics.log_value(PARTIAL_GROUPS_IN_FLIGHT, len(in_flight.groups), window=1)
    metrics.log_value(PARTIAL_GROUPS_FINISHED, len(in_flight.finished), window=1)
    metrics.log_value(PARTIAL_ROUNDS, in_flight.rounds, window=1)
    metrics.log_value(PARTIAL_MIXED_FRACTION,
                      float(np.mean([len(set(r.versions)) > 1 for r in responses])), window=1)
