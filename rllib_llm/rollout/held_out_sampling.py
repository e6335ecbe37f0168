"""An env runner's share of an evaluation: sample held-out problems, count correct responses.

Evaluation reads nothing training advances: it resets a held-out env to chosen problems (not the
training env's shuffled order), samples with a seed of its own and builds no episodes (no group
ids drawn). The driver merges the shards of every runner
(`rllib_llm.algorithm.held_out_evaluation`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rllib_llm.exchange.columns import PROMPT_IDS, PROMPT_INDEX, is_correct
from rllib_llm.rollout.agent_rollouts import score_agents
from rllib_llm.rollout.engine import SamplingParams
from rllib_llm.rollout.episode_envs import EpisodeEnvs
from rllib_llm.rollout.eval_shard import EvalShard
from rllib_llm.rollout.turn_loop import run_multi_turn


def shard_indices(num_problems: int, shard: int, num_shards: int) -> list[int]:
    """Problems `0..num_problems-1` dealt out round-robin: those of `shard` (every problem
    lands in exactly one shard)."""
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard={shard} must be in [0, num_shards={num_shards})")
    return list(range(shard, num_problems, num_shards))


class HeldOutEnv:
    """A runner's env of the held-out problems, built on first use and kept while its config
    stays the same (the evaluations of a run build it once)."""

    def __init__(self, make_env: Callable[[dict[str, Any]], Any]) -> None:
        self._make_env = make_env
        self.env: Any = None
        self._env_config: dict[str, Any] | None = None  # what env was built from

    def under(self, env_config: dict[str, Any], episode_envs: EpisodeEnvs):
        """The held-out env of `env_config`; one of another config is closed first, with the
        envs `episode_envs` spawned from it."""
        if self.env is None or self._env_config != env_config:
            if self.env is not None:
                episode_envs.close_spawned(self.env)
                self.env.close()
            self.env = self._make_env(env_config)
            self._env_config = env_config
        return self.env


def score_shard(env, engine, *, shard: int, num_shards: int, num_problems: int,
                samples_per_problem: int, sampling: SamplingParams,
                episode_envs: EpisodeEnvs) -> EvalShard:
    """Score problems `shard, shard + num_shards, ...` of the first `num_problems` of `env`,
    single- or multi-turn (a multi-turn env's episodes run in envs `episode_envs` spawns), or
    by its agent (`openai_agent`: `agent_rollouts.score_agents`)."""
    indices = shard_indices(num_problems, shard, num_shards)
    if getattr(env, "agent_driven", False):  # the same agent, on held-out problems
        return score_agents(env, engine, indices, samples_per_problem, sampling, num_problems)
    if getattr(env, "multi_turn", False):
        return score_held_out_multi_turn(
            episode_envs.spawn(env, len(indices) * samples_per_problem), engine, indices,
            samples_per_problem, sampling, num_problems, episode_envs.executor)
    return score_held_out(env, engine, indices, samples_per_problem, sampling, num_problems)


def score_held_out(env, engine, indices: list[int], samples_per_problem: int,
                   sampling: SamplingParams, num_problems: int) -> EvalShard:
    """Sample `samples_per_problem` responses to each problem `indices` of `env` with `engine`
    and count the correct ones with the env's verifier (the verdicts its episodes would get)."""
    k = samples_per_problem
    if not indices:
        return EvalShard([], [], k, 0, num_problems)
    prompts = [env.reset(options={PROMPT_INDEX: i})[1][PROMPT_IDS] for i in indices]
    responses = engine.generate(prompts, k, sampling)  # one list of k responses per problem
    tokens = [r.token_ids for group in responses for r in group]  # problem-major, (P * k)
    verdicts = env.verify_responses([i for i in indices for _ in range(k)], tokens)
    correct = [sum(v.correct for v in verdicts[j * k:(j + 1) * k]) for j in range(len(indices))]
    return EvalShard(list(indices), correct, k, sum(map(len, tokens)), num_problems)


def score_held_out_multi_turn(envs, engine, indices: list[int], samples_per_problem: int,
                              sampling: SamplingParams, num_problems: int,
                              executor) -> EvalShard:
    """`score_held_out` for a multi-turn env: run each episode to its end with `envs` (one per
    episode, spawned from the held-out env) and count the final infos' verdicts."""
    k = samples_per_problem
    episodes = run_multi_turn(envs, engine, indices, k, sampling, executor)
    correct = [sum(is_correct(e.chunks[-1].infos[-1], float(e.chunks[-1].rewards[-1]))
                   for e in episodes[j * k:(j + 1) * k]) for j in range(len(indices))]
    tokens = sum(len(c.actions) for e in episodes for c in e.chunks)
    return EvalShard(list(indices), correct, k, tokens, num_problems)
