"""The batch contract: every column name rollout and learning share. The env runner writes the
episode data into episodes, the learner connector reads them back and builds the learner batch,
and the learner and its RLModule read the batch's columns: all by these names, none spelled out
elsewhere. Each learner batch column also declares its layout (`LAYOUTS`): how a micro-batch
cuts it. (The env's own reset and step info keys are `envs.token_mdp`'s, re-exported here, with
its two episode conventions both sides read: the shared empty step info and what makes a
response correct.)"""

from __future__ import annotations

import enum

from rllib_llm.envs.token_mdp import EMPTY_INFO, ENV_TOKENS, PROMPT_IDS, PROMPT_INDEX, is_correct

# (Re-exported: the env's info keys, its shared empty step info, and the verdict of an episode's
# final info that the runner's accuracy and the learner's CORRECT column both read.)
__all__ = ["EMPTY_INFO", "ENV_TOKENS", "PROMPT_IDS", "PROMPT_INDEX", "is_correct"]

# Episode data the env runner adds to what the environment returns.
GROUP_ID = "group_id"  # reset info: one id shared by the responses to the same prompt
ACTION_LOGP = "action_logp"  # extra model output, (T,) float32: the sampler's log-prob per action
WEIGHT_VERSION = "weight_version"  # extra model output, (T,) int64: the weights that sampled it
# Step info: the episode's next sequence starts after this action, from these prompt ids. An
# agent that rewrote its history (rollout/agent_rollouts.py) sampled several sequences in one
# episode; the learner trains each as its own row, all sharing the episode's reward.
NEXT_PROMPT_IDS = "next_prompt_ids"

# Learner batch columns: B responses, each a left-padded prompt of P tokens then a right-padded
# response of T tokens (learner/packing.py).
INPUT_IDS = "input_ids"  # (B, P + T) int64: prompt and response tokens
ATTENTION_MASK = "attention_mask"  # (B, P + T) int64: 1 on real tokens
RESPONSE_IDS = "response_ids"  # (B, T) int64: the response tokens (agent and env)
ACTION_MASK = "action_mask"  # (B, T) float32: 1 on the agent's tokens, 0 on padding/env tokens
OLD_LOGP = "old_logp"  # (B, T) float32: log pi_old (the sampler's, or recomputed)
ROLLOUT_LOGP = "rollout_logp"  # (B, T) float32: the sampler's own, when old_logp is recomputed
REF_LOGP = "ref_logp"  # (B, T) float32: the reference model's (a KL term)
SCORES = "scores"  # (B,) float32: each episode's final reward
ADVANTAGES = "advantages"  # (B, T) float32
VALUES = "values"  # (B, T) float32: the critic's V_old at rollout time (adv_estimator='gae')
RETURNS = "returns"  # (B, T) float32: GAE's returns, the critic's targets
MC_RETURNS = "mc_returns"  # (B, T) float32: Monte-Carlo returns, value pretraining's targets
VALUE_TARGETS = "value_targets"  # (B, T) float32: RETURNS or MC_RETURNS, whichever trains now
CORRECT = "correct"  # (B,) float32, 1.0 where the response is correct (is_correct)

# The RLModule's forward_train outputs the learner's loss reads (VALUES too, with a critic).
LOGP = "logp"  # (B, T): log pi(response token) under the current weights
ENTROPY = "entropy"  # (B, T): the policy's entropy at each response position
# (B,) float32, 1.0 where the episode was truncated: cut off at the response limit without EOS.
TRUNCATED = "truncated"
# (B, T) float32: rewards a multi-turn env paid before an episode's last step, on the agent token
# they came with; present only when some episode has them (core.AdvantageInputs.turn_rewards).
TURN_REWARDS = "turn_rewards"
# (B,) int64: the episode of each row, 0, 1, ... in batch order (an episode's rows are
# consecutive, a group's K episodes too); present only when some episode spans several rows
# (`NEXT_PROMPT_IDS`). Group baselines and reward normalisation then count each episode once
# (core.AdvantageInputs.episode_index) and mini-batches keep groups whole by it.
EPISODE_INDEX = "episode_index"


class Layout(enum.Enum):
    """How a learner batch column lies along its second axis, which says what a micro-batch
    cut to its longest prompt P' and response T' keeps of it (learner/micro_batches.take)."""

    PER_ROW = "per row"  # (B, ...): one value per response; the micro-batch's rows
    RESPONSE = "response"  # (B, T, ...): response-aligned; the first T' columns
    SEQUENCE = "sequence"  # (B, P + T, ...): prompt then response; columns P - P' .. P + T'


# Every learner batch column's layout, declared rather than read off its shape: a per-row vector
# of T (or P + T) values looks like a response (or sequence) column and would be cut as one,
# without an error, and a (B, T) column cannot be told from a (B, P + T) one when P = 0.
LAYOUTS: dict[str, Layout] = {
    INPUT_IDS: Layout.SEQUENCE,
    ATTENTION_MASK: Layout.SEQUENCE,
    RESPONSE_IDS: Layout.RESPONSE,
    ACTION_MASK: Layout.RESPONSE,
    OLD_LOGP: Layout.RESPONSE,
    ROLLOUT_LOGP: Layout.RESPONSE,
    REF_LOGP: Layout.RESPONSE,
    ADVANTAGES: Layout.RESPONSE,
    VALUES: Layout.RESPONSE,
    RETURNS: Layout.RESPONSE,
    MC_RETURNS: Layout.RESPONSE,
    VALUE_TARGETS: Layout.RESPONSE,
    TURN_REWARDS: Layout.RESPONSE,
    SCORES: Layout.PER_ROW,
    CORRECT: Layout.PER_ROW,
    TRUNCATED: Layout.PER_ROW,
    EPISODE_INDEX: Layout.PER_ROW,
}
