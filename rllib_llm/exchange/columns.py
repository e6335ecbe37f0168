"""Column names rollout and learning share: the env runner writes them into episodes, the learner
connector reads them back, and the learner reads the batch columns built from them."""

from __future__ import annotations

# Episode data the env runner adds to what the environment returns.
GROUP_ID = "group_id"  # reset info: one id shared by the responses to the same prompt
ACTION_LOGP = "action_logp"  # extra model output, (T,) float32: the sampler's log-prob per action
WEIGHT_VERSION = "weight_version"  # extra model output, (T,) int64: the weights that sampled it

# Learner batch columns.
CORRECT = "correct"  # (B,) float32, 1.0 where the response is correct (token_mdp.is_correct)
# (B, T) float32: rewards a multi-turn env paid before an episode's last step, on the agent token
# they came with; present only when some episode has them (core.compute_advantages' turn_rewards).
TURN_REWARDS = "turn_rewards"
