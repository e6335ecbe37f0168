"""What an env runner's share of an evaluation returns (`EvalShard`): the type the scorers of
single-turn, multi-turn (`held_out_sampling`) and agent envs (`agent_rollouts.score_agents`)
build, and the driver merges (`rllib_llm.algorithm.held_out_evaluation`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvalShard:
    """What one runner scored.

    Attributes:
        prompt_indices: the held-out problems it scored (indices into the held-out data set).
        num_correct: correct responses per problem, aligned with `prompt_indices`.
        samples_per_problem: responses sampled per problem (n).
        response_tokens: tokens generated over all its responses.
        num_problems: problems the whole evaluation covers, every shard's together.
    """

    prompt_indices: list[int]
    num_correct: list[int]
    samples_per_problem: int
    response_tokens: int
    num_problems: int
