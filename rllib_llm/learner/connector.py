"""The learner connector: episodes → packed (B, T) batch with advantages.

Runs once per training iteration on the whole rollout batch, before RLlib splits it into
mini-batches, because batch whitening, group baselines and running reward statistics are
properties of the whole batch (docs/ALGORITHMS.md, "Rewards and advantages"). With several learners
each one runs it on the whole batch, scoring only its share of the prompt groups
(`data_parallel.py`), so all of them hold the same advantages and statistics.

The work is `STAGES`, small functions `stage(batch, module, settings) -> metrics` run in order, as
`config_rules.CHECKS` runs its rules: each reads and changes the `ConnectorBatch`, returns the
metrics it computed, and returns at once when its setting is off. `settings` is the frozen
`ConnectorSettings`, built once from the config; the connector keeps the state that lasts across
iterations (the adaptive KL coefficient, the running score statistics) and logs the metrics once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
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
from rllib_llm.learner.pass_labels import OLD_LOGP as OLD_LOGP_PASS
from rllib_llm.learner.pass_labels import REFERENCE_LOGP as REFERENCE_LOGP_PASS
from rllib_llm.learner.pass_labels import label

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


def advantage_settings(config) -> core.AdvantageSettings:
    """The advantage pipeline's settings (steps 1–6) read from an RLVRConfig."""
    return core.AdvantageSettings(
        adv_estimator=config.adv_estimator,
        group_size=config.num_return_sequences_in_group,
        gamma=config.gamma,
        lambd=config.lambd,
        critic_lambd=config.critic_lambd,
        length_adaptive_alpha=config.length_adaptive_alpha,
        reward_clip=config.reward_clip,
        norm_mean_type=config.norm_mean_type,
        norm_std_type=config.norm_std_type,
        whiten_advantages=config.whiten_advantages,
        advantage_clip=config.advantage_clip,
    )


@dataclass(frozen=True)
class ConnectorSettings:
    """What the stages read of the config, read once (`from_config`); each field is the config
    setting of the same name (docs/SETTINGS.md) unless said otherwise.

    Attributes:
        pad_token_id: the tokenizer's pad id.
        group_size: num_return_sequences_in_group.
        recompute_old_logp: recompute_old_logp with its None resolved (`recomputes_old_logp`).
        add_token_level_kl, kl_penalty: KL of the behaviour policy to the reference in the
            reward, and its estimator.
        response_length, overlong_buffer_len, overlong_penalty_factor: DAPO's overlong shaping;
            overlong_buffer_len in tokens ('auto' resolved), None when off.
        distillation_coef, verifier_advantage_coef: on-policy distillation's weights.
        rollout_rs_level, rollout_rs_threshold, rollout_rs_threshold_lower: masked importance
            sampling; rollout_rs_level None when off.
        mask_truncated_completions: DAPO's overlong filtering.
        advantages: the advantage pipeline's settings (`advantage_settings`).
    """

    pad_token_id: int
    group_size: int
    recompute_old_logp: bool
    add_token_level_kl: bool
    kl_penalty: str
    response_length: int
    overlong_buffer_len: int | None
    overlong_penalty_factor: float
    distillation_coef: float
    verifier_advantage_coef: float
    rollout_rs_level: str | None
    rollout_rs_threshold: float
    rollout_rs_threshold_lower: float | None
    mask_truncated_completions: bool
    advantages: core.AdvantageSettings

    @classmethod
    def from_config(cls, config, pad_token_id: int) -> ConnectorSettings:
        """The settings of an RLVRConfig, with the tokenizer's pad id."""
        return cls(
            pad_token_id=pad_token_id,
            group_size=config.num_return_sequences_in_group,
            recompute_old_logp=config.recomputes_old_logp,
            add_token_level_kl=config.add_token_level_kl,
            kl_penalty=config.kl_penalty,
            response_length=config.response_length,
            overlong_buffer_len=config.resolved_overlong_buffer_len,
            overlong_penalty_factor=config.overlong_penalty_factor,
            distillation_coef=config.distillation_coef,
            verifier_advantage_coef=config.verifier_advantage_coef,
            rollout_rs_level=config.rollout_rs_level,
            rollout_rs_threshold=config.rollout_rs_threshold,
            rollout_rs_threshold_lower=config.rollout_rs_threshold_lower,
            mask_truncated_completions=config.mask_truncated_completions,
            advantages=advantage_settings(config),
        )


@dataclass
class ConnectorBatch:
    """What the stages of one iteration read and change.

    Attributes:
        episodes: the iteration's episodes (`pack` reads them).
        kl_coef: β of KL in the reward this iteration (the connector's AdaptiveKLController).
        running_stats: the running score statistics of `running` normalisation, or None.
        columns: the learner batch by column name (exchange/columns.py); `pack` fills it.
        token_kl: [B, T] KL(old ‖ ref) per mask token, charged in the reward; `token_kl` sets it
            when add_token_level_kl is on.
    """

    episodes: list
    kl_coef: float
    running_stats: core.RunningMeanStd | None = None
    columns: dict[str, torch.Tensor] = field(default_factory=dict)
    token_kl: torch.Tensor | None = None


Stage = Callable[[ConnectorBatch, Any, ConnectorSettings], dict[str, float]]


def pack(batch: ConnectorBatch, module, settings: ConnectorSettings) -> dict[str, float]:
    """The episodes as padded columns, each prompt's group together (learner/packing.py)."""
    batch.columns = pack_episodes(batch.episodes, settings.group_size, settings.pad_token_id)
    return {}


def old_log_probs(batch: ConnectorBatch, module, settings: ConnectorSettings) -> dict[str, float]:
    """With recompute_old_logp, the responses scored by the learner's own model, once, before the
    first epoch.

    A sampler with other kernels (vLLM) reports slightly different log-probs than the learner
    computes with the same weights; ratios against them would start off 1. The sampler's are kept
    as `rollout_logp` for the rollout importance weights and the logged mismatch (docs/DESIGN.md,
    "Learner details that bite").
    """
    if not settings.recompute_old_logp:
        return {OLD_LOGP_RECOMPUTED: 0.0}
    data = batch.columns
    mask = data[ACTION_MASK]
    data[ROLLOUT_LOGP] = data[OLD_LOGP]
    with label(OLD_LOGP_PASS):  # (pass_labels: a profiler's names, free without one)
        old_logp = _score(lambda rows: module.score_tokens(rows, reference=False), data,
                          settings)
    old_logp = old_logp.to(mask.device).float()  # (B, T)
    data[OLD_LOGP] = torch.where(mask.bool(), old_logp, torch.zeros_like(old_logp))
    mismatch = core.rollout_mismatch_kl(data[OLD_LOGP], data[ROLLOUT_LOGP], mask)
    return {OLD_LOGP_RECOMPUTED: 1.0, **{name: value.item() for name, value in mismatch.items()}}


def reference_log_probs(batch: ConnectorBatch, module,
                        settings: ConnectorSettings) -> dict[str, float]:
    """The reference model's log-probs, when the module has one (a KL term needs them)."""
    if module.has_reference:
        with label(REFERENCE_LOGP_PASS):
            batch.columns[REF_LOGP] = _score(
                lambda rows: module.score_tokens(rows, reference=True), batch.columns, settings)
    return {}


def critic_values(batch: ConnectorBatch, module, settings: ConnectorSettings) -> dict[str, float]:
    """V_old: the critic's values at rollout time, when the module has a critic
    (adv_estimator gae)."""
    if module.has_critic:
        mask = batch.columns[ACTION_MASK]
        values = _score(module.score_values, batch.columns, settings)
        batch.columns[VALUES] = values.to(mask.device).float() * mask  # (B, T)
    return {}


def token_kl(batch: ConnectorBatch, module, settings: ConnectorSettings) -> dict[str, float]:
    """With add_token_level_kl, the KL of the behaviour policy to the reference, charged in the
    reward (REINFORCE++); its mean is what the connector's adaptive KL controller follows."""
    if not settings.add_token_level_kl:
        return {}
    data = batch.columns
    mask = data[ACTION_MASK]
    batch.token_kl = core.kl_estimate(data[OLD_LOGP], data[REF_LOGP], settings.kl_penalty) * mask
    mean_kl = (batch.token_kl.sum() / mask.sum().clamp(min=1)).item()
    return {KL_IN_REWARD: mean_kl, KL_COEF: batch.kl_coef}


def overlong_shaping(batch: ConnectorBatch, module,
                     settings: ConnectorSettings) -> dict[str, float]:
    """DAPO's soft overlong punishment added to the scores, by each response's length as
    response_length bounds it: every response token, the agent's and any env tokens."""
    if settings.overlong_buffer_len is None:
        return {}
    data = batch.columns
    lengths = data[ATTENTION_MASK][:, -data[ACTION_MASK].shape[1]:].sum(dim=-1)  # (B,)
    penalty = core.overlong_penalty(lengths, settings.response_length,
                                    settings.overlong_buffer_len,
                                    settings.overlong_penalty_factor)
    data[SCORES] = data[SCORES] + penalty.to(data[SCORES].device)
    return {OVERLONG_PENALTY: penalty.mean().item()}


def advantages(batch: ConnectorBatch, module, settings: ConnectorSettings) -> dict[str, float]:
    """`core.compute_advantages` on the scores, and for a critic its targets: GAE's returns
    (with critic_lambd if set) and value pretraining's Monte-Carlo returns (GAE's with
    lambda = 1)."""
    data = batch.columns
    mask = data[ACTION_MASK]
    inputs = core.AdvantageInputs(
        scores=data[SCORES], mask=mask, values=data.get(VALUES), token_kl=batch.token_kl,
        kl_coef=batch.kl_coef if batch.token_kl is not None else 0.0,
        turn_rewards=data.pop(TURN_REWARDS, None),  # the loss does not read them
        # An agent's rewritten history: several rows, one episode in its group's baseline.
        episode_index=data.get(EPISODE_INDEX),
    )
    adv, returns, token_rewards = core.compute_advantages(inputs, settings.advantages,
                                                          batch.running_stats)
    data[ADVANTAGES] = adv.float()
    if inputs.values is not None:
        data[RETURNS] = returns.float()
        data[MC_RETURNS] = core.discounted_returns(token_rewards, mask,
                                                   gamma=settings.advantages.gamma).float()
    return {}


def distillation(batch: ConnectorBatch, module, settings: ConnectorSettings) -> dict[str, float]:
    """With a teacher, on-policy distillation's per-token term (core/distillation.py):
    verifier_advantage_coef x advantages - distillation_coef x (old_logp - teacher_logp), after
    the estimator's normalisation and clipping. old_logp are the student's log-probs of its
    samples: the sampler's, or recomputed by the learner (recompute_old_logp)."""
    if not module.has_teacher:
        return {}
    data = batch.columns
    mask = data[ACTION_MASK]
    teacher_logp = _score(module.score_teacher_tokens, data, settings).to(mask.device).float()
    reverse_kl = core.reverse_kl_per_token(data[OLD_LOGP], teacher_logp, mask)  # (B, T)
    data[ADVANTAGES] = core.distillation_advantages(
        data[ADVANTAGES], reverse_kl, mask, distillation_coef=settings.distillation_coef,
        verifier_coef=settings.verifier_advantage_coef).float()
    return {DISTILLATION_REVERSE_KL: core.mean_reverse_kl(reverse_kl, mask).item()}


def advantage_statistics(batch: ConnectorBatch, module,
                         settings: ConnectorSettings) -> dict[str, float]:
    """The mean score (an episode of several rows counted once) and the advantages' mean and
    mean magnitude over the loss tokens, before any leave the mask."""
    data = batch.columns
    mask, adv = data[ACTION_MASK], data[ADVANTAGES]
    once = data[SCORES] if EPISODE_INDEX not in data else \
        data[SCORES][core.episode_last_rows(data[EPISODE_INDEX])]  # an episode's rows: once
    n = mask.sum().clamp(min=1)
    return {SCORE_MEAN: once.mean().item(),
            ADVANTAGE_MEAN: ((adv * mask).sum() / n).item(),
            ADVANTAGE_ABS_MEAN: ((adv.abs() * mask).sum() / n).item()}


def rejection_mask(batch: ConnectorBatch, module, settings: ConnectorSettings) -> dict[str, float]:
    """Masked IS (rollout_rs_level): tokens whose ratio pi_old / pi_rollout leaves the bounds
    leave the loss mask. After the advantages: the rejected tokens' responses still count in
    their group's baseline; the loss's counts then leave them out."""
    if settings.rollout_rs_level is None:
        return {}
    data = batch.columns
    keep, rs_metrics = core.rollout_rejection_mask(
        data[OLD_LOGP], data[ROLLOUT_LOGP], data[ACTION_MASK], level=settings.rollout_rs_level,
        upper=settings.rollout_rs_threshold, lower=settings.rollout_rs_threshold_lower)
    data[ACTION_MASK] = data[ACTION_MASK] * keep.to(data[ACTION_MASK].dtype)
    return {name: value.item() for name, value in rs_metrics.items()}


def truncation_mask(batch: ConnectorBatch, module, settings: ConnectorSettings) -> dict[str, float]:
    """DAPO's overlong filtering (mask_truncated_completions): after the advantages (a truncated
    response still counts in its group's baseline), its tokens leave the loss mask; the
    aggregation counts only rows with mask tokens, so these rows change no normaliser either."""
    data = batch.columns
    metrics = {TRUNCATED_FRACTION: data[TRUNCATED].mean().item()}
    if settings.mask_truncated_completions:
        data[ACTION_MASK] = data[ACTION_MASK] * (1.0 - data[TRUNCATED])[:, None]
    return metrics


# Every stage, in the order the connector runs them: scoring before the advantages that read the
# scores, the masks after them (a masked token's response still counts in its group's baseline).
STAGES: tuple[Stage, ...] = (
    pack,
    old_log_probs,
    reference_log_probs,
    critic_values,
    token_kl,
    overlong_shaping,
    advantages,
    distillation,
    advantage_statistics,
    rejection_mask,
    truncation_mask,
)


def run_stages(batch: ConnectorBatch, module, settings: ConnectorSettings) -> dict[str, float]:
    """Run `STAGES` in order on `batch`; the metrics of all of them."""
    metrics: dict[str, float] = {}
    for stage in STAGES:
        metrics.update(stage(batch, module, settings))
    return metrics


def _score(fn, data: dict[str, torch.Tensor], settings: ConnectorSettings) -> torch.Tensor:
    """fn(data) (B, T), each learner scoring its share of the prompt groups."""
    return score_rows(fn, data, group_size=settings.group_size)


class PackAndComputeAdvantages(ConnectorV2):
    """Builds the learner batch of one module from RLVR episodes by running `STAGES`.

    Args:
        config: the RLVRConfig (read once here, into `ConnectorSettings`).
        pad_token_id: the tokenizer's pad id.
    """

    def __init__(self, input_observation_space=None, input_action_space=None, *, config,
                 pad_token_id: int, **kwargs):
        super().__init__(input_observation_space, input_action_space, **kwargs)
        self.settings = ConnectorSettings.from_config(config, pad_token_id)
        self.kl_controller = core.AdaptiveKLController(
            config.init_kl_coef, config.target_kl, config.kl_horizon
        )
        uses_running = "running" in (config.norm_mean_type, config.norm_std_type)
        self.running_stats = core.RunningMeanStd() if uses_running else None

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None,
                 metrics=None, **kwargs) -> Any:
        module = rl_module[DEFAULT_MODULE_ID].unwrapped()  # not DDP's wrapper: it only scores
        work = ConnectorBatch(episodes=episodes, kl_coef=self.kl_controller.value,
                              running_stats=self.running_stats)
        results = run_stages(work, module, self.settings)
        if KL_IN_REWARD in results:
            self.kl_controller.update(results[KL_IN_REWARD], len(episodes))
        if metrics is not None:
            for name, value in results.items():
                metrics.log_value((DEFAULT_MODULE_ID, name), value, window=1)
        device = next(module.parameters()).device
        return {DEFAULT_MODULE_ID: {k: v.to(device) for k, v in work.columns.items()}}

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
