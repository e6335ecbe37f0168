"""The learner connector: episodes → packed (B, T) batch with advantages.

Runs once per training iteration on the whole rollout batch, before RLlib splits it into
mini-batches, because batch whitening, group baselines and running reward statistics are
properties of the whole batch (docs/ALGORITHMS.md, "Rewards and advantages"). With several learners
each one runs it on the whole batch, scoring only its share of the prompt groups
(`data_parallel.py`), so all of them hold the same advantages and statistics.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_llm import core
from rllib_llm.exchange.columns import (
    ACTION_MASK,
    ADVANTAGES,
    ATTENTION_MASK,
    EPISODE_INDEX,
    MC_RETURNS,
    OLD_LOGP,
    REF_LOGP,
    RETURNS,
    ROLLOUT_LOGP,
    SCORES,
    TRUNCATED,
    TURN_REWARDS,
    VALUES,
)
from rllib_llm.learner.data_parallel import score_rows
from rllib_llm.learner.packing import pack_episodes

# Metric names this connector logs (under the learner's results).
KL_COEF = "kl_in_reward_coef"
KL_IN_REWARD = "kl_in_reward"
SCORE_MEAN = "score_mean"
ADVANTAGE_MEAN = "advantage_mean"
ADVANTAGE_ABS_MEAN = "advantage_abs_mean"
# 1 when old_logp (the pg_variant's ratio denominator) were recomputed by the learner (then the
# sampler's are rollout_logp), 0 when they are the sampler's behaviour log-probs.
OLD_LOGP_RECOMPUTED = "old_logp_recomputed"
# DAPO's overlong shaping and filtering: the mean penalty added to the scores, and the share of
# responses truncated at the response limit (those that mask_truncated_completions drops).
OVERLONG_PENALTY = "overlong_penalty_mean"
TRUNCATED_FRACTION = "truncated_fraction"
# On-policy distillation: the mean over response tokens of log pi_student - log pi_teacher of the
# sampled token (the per-token reverse-KL estimate; teacher_model_name_or_path).
DISTILLATION_REVERSE_KL = "distillation_reverse_kl"


class PackAndComputeAdvantages(ConnectorV2):
    """Builds the learner batch of one module from RLVR episodes.

    Args:
        config: the RLVRConfig (read once here, so the per-batch code stays pure).
        pad_token_id: the tokenizer's pad id.
    """

    def __init__(self, input_observation_space=None, input_action_space=None, *, config,
                 pad_token_id: int, **kwargs):
        super().__init__(input_observation_space, input_action_space, **kwargs)
        self.cfg = config
        self.pad_token_id = pad_token_id
        self.kl_controller = core.AdaptiveKLController(
            config.init_kl_coef, config.target_kl, config.kl_horizon
        )
        uses_running = "running" in (config.norm_mean_type, config.norm_std_type)
        self.running_stats = core.RunningMeanStd() if uses_running else None

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None,
                 metrics=None, **kwargs) -> Any:
        cfg = self.cfg
        module = rl_module[DEFAULT_MODULE_ID].unwrapped()  # not DDP's wrapper: it only scores
        data = pack_episodes(episodes, cfg.num_return_sequences_in_group, self.pad_token_id)
        mask = data[ACTION_MASK]
        if cfg.recomputes_old_logp:
            self._recompute_old_logp(module, data, metrics)
        self._log(metrics, OLD_LOGP_RECOMPUTED, float(cfg.recomputes_old_logp))
        if module.has_reference:
            data[REF_LOGP] = self._score(lambda rows: module.score_tokens(
                rows, reference=True), data)
        values = None
        if module.has_critic:  # V_old: the critic's values at rollout time (adv_estimator gae)
            values = self._score(module.score_values, data).to(mask.device).float() * mask
        token_kl = None
        if cfg.add_token_level_kl:
            # KL of the behaviour policy to the reference, charged in the reward (REINFORCE++).
            token_kl = core.kl_estimate(data[OLD_LOGP], data[REF_LOGP], cfg.kl_penalty) * mask
            mean_kl = (token_kl.sum() / mask.sum().clamp(min=1)).item()
            self._log(metrics, KL_IN_REWARD, mean_kl)
            self._log(metrics, KL_COEF, self.kl_controller.value)
        scores = data[SCORES]
        if cfg.resolved_overlong_buffer_len is not None:
            # DAPO's soft overlong punishment, by each response's length as response_length
            # bounds it: every response token, the agent's and any env tokens.
            lengths = data[ATTENTION_MASK][:, -mask.shape[1]:].sum(dim=-1)
            penalty = core.overlong_penalty(lengths, cfg.response_length,
                                            cfg.resolved_overlong_buffer_len,
                                            cfg.overlong_penalty_factor)
            scores = scores + penalty.to(scores.device)
            self._log(metrics, OVERLONG_PENALTY, penalty.mean().item())
        self._log(metrics, TRUNCATED_FRACTION, data[TRUNCATED].mean().item())
        advantages, returns, token_rewards = core.compute_advantages(
            scores, mask,
            adv_estimator=cfg.adv_estimator,
            group_size=cfg.num_return_sequences_in_group,
            gamma=cfg.gamma,
            lambd=cfg.lambd,
            critic_lambd=cfg.critic_lambd,
            length_adaptive_alpha=cfg.length_adaptive_alpha,
            values=values,
            reward_clip=cfg.reward_clip,
            norm_mean_type=cfg.norm_mean_type,
            norm_std_type=cfg.norm_std_type,
            running_stats=self.running_stats,
            token_kl=token_kl,
            kl_coef=self.kl_controller.value if token_kl is not None else 0.0,
            whiten_advantages=cfg.whiten_advantages,
            advantage_clip=cfg.advantage_clip,
            turn_rewards=data.pop(TURN_REWARDS, None),  # the loss does not read them
            # An agent's rewritten history: several rows, one episode in its group's baseline.
            episode_index=data.get(EPISODE_INDEX),
        )
        if token_kl is not None:
            self.kl_controller.update(mean_kl, len(episodes))
        if module.has_teacher:
            advantages = self._distil(module, data, advantages, metrics)
        data[SCORES] = scores
        data[ADVANTAGES] = advantages.float()
        if values is not None:
            data[VALUES] = values
            data[RETURNS] = returns.float()  # GAE's returns, with critic_lambd if set
            # Value pretraining's targets: Monte-Carlo returns (GAE's with lambda = 1).
            data[MC_RETURNS] = core.discounted_returns(token_rewards, mask,
                                                         gamma=cfg.gamma).float()
        once = data[SCORES] if EPISODE_INDEX not in data else \
            data[SCORES][core.episode_last_rows(data[EPISODE_INDEX])]  # an episode's rows: once
        self._log(metrics, SCORE_MEAN, once.mean().item())
        n = mask.sum().clamp(min=1)
        self._log(metrics, ADVANTAGE_MEAN, ((advantages * mask).sum() / n).item())
        self._log(metrics, ADVANTAGE_ABS_MEAN, ((advantages.abs() * mask).sum() / n).item())
        if cfg.rollout_rs_level is not None:
            # Masked IS: after the advantages too (the rejected tokens' responses still count in
            # their group's baseline); the loss's counts then leave them out.
            keep, rs_metrics = core.rollout_rejection_mask(
                data[OLD_LOGP], data[ROLLOUT_LOGP], data[ACTION_MASK],
                level=cfg.rollout_rs_level, upper=cfg.rollout_rs_threshold,
                lower=cfg.rollout_rs_threshold_lower)
            data[ACTION_MASK] = data[ACTION_MASK] * keep.to(data[ACTION_MASK].dtype)
            for name, value in rs_metrics.items():
                self._log(metrics, name, value.item())
        if cfg.mask_truncated_completions:
            # DAPO's overlong filtering: after the advantages (a truncated response still counts
            # in its group's baseline), its tokens leave the loss mask; the aggregation counts
            # only rows with mask tokens, so these rows change no normaliser either.
            data[ACTION_MASK] = data[ACTION_MASK] * (1.0 - data[TRUNCATED])[:, None]
        device = next(module.parameters()).device
        return {DEFAULT_MODULE_ID: {k: v.to(device) for k, v in data.items()}}

    def _distil(self, module, data: dict[str, torch.Tensor], advantages: torch.Tensor,
                metrics) -> torch.Tensor:
        """The advantages with on-policy distillation's per-token term (core/distillation.py):
        verifier_advantage_coef x advantages - distillation_coef x (old_logp - teacher_logp),
        after the estimator's normalisation and clipping. old_logp are the student's log-probs
        of its samples: the sampler's, or recomputed by the learner (recompute_old_logp)."""
        mask = data[ACTION_MASK]
        teacher_logp = self._score(module.score_teacher_tokens, data).to(mask.device).float()
        reverse_kl = core.reverse_kl_per_token(data[OLD_LOGP], teacher_logp, mask)  # (B, T)
        self._log(metrics, DISTILLATION_REVERSE_KL, core.mean_reverse_kl(reverse_kl, mask).item())
        return core.distillation_advantages(advantages, reverse_kl, mask,
                                            distillation_coef=self.cfg.distillation_coef,
                                            verifier_coef=self.cfg.verifier_advantage_coef)

    def _recompute_old_logp(self, module, data: dict[str, torch.Tensor], metrics) -> None:
        """Score the responses with the learner's own model, once, before the first epoch.

        A sampler with other kernels (vLLM) reports slightly different log-probs than the
        learner computes with the same weights; ratios against them would start off 1. The
        sampler's are kept as `rollout_logp` for the rollout importance weights and the logged
        mismatch (docs/DESIGN.md, "Learner details that bite").
        """
        mask = data[ACTION_MASK]
        data[ROLLOUT_LOGP] = data[OLD_LOGP]
        old_logp = self._score(lambda rows: module.score_tokens(rows, reference=False), data)
        old_logp = old_logp.to(mask.device).float()  # (B, T)
        data[OLD_LOGP] = torch.where(mask.bool(), old_logp, torch.zeros_like(old_logp))
        mismatch = core.rollout_mismatch_kl(data[OLD_LOGP], data[ROLLOUT_LOGP], mask)
        for name, value in mismatch.items():
            self._log(metrics, name, value.item())

    def _score(self, fn, data: dict[str, torch.Tensor]) -> torch.Tensor:
        """fn(data) (B, T), each learner scoring its share of the prompt groups."""
        return score_rows(fn, data, group_size=self.cfg.num_return_sequences_in_group)

    @staticmethod
    def _log(metrics, name: str, value: float) -> None:
        if metrics is not None:
            metrics.log_value((DEFAULT_MODULE_ID, name), value, window=1)

    def get_state(self, *args, **kwargs) -> dict[str, Any]:
        state = {"kl_coef": self.kl_controller.value}
        if self.running_stats is not None:
            state["running_stats"] = self.running_stats.state_dict()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        if "kl_coef" in state:
            self.kl_controller.value = state["kl_coef"]
        if self.running_stats is not None and "running_stats" in state:
            self.running_stats.load_state_dict(state["running_stats"])
