"""Every ValueError of rllib_llm.core: it names the field, the value, the rule and the fix."""

from __future__ import annotations

import re

import pytest
import torch

from rllib_llm import core

B, T = 2, 3
LOGP = -torch.ones(B, T)
MASK = torch.ones(B, T)
SCORES = torch.ones(B)


def pl(variant="ppo", **params):
    return core.policy_loss(variant, LOGP, LOGP, LOGP, MASK, scores=SCORES, **params)


def ca(inputs: core.AdvantageInputs | None = None, **settings):
    args = {"adv_estimator": "reinforce"} | settings
    return core.compute_advantages(inputs or core.AdvantageInputs(SCORES, MASK),
                                   core.AdvantageSettings(**args))


CASES = [
    # Unknown names list the valid ones and how to add one.
    (lambda: pl("ppo2"), (r"pg_variant='ppo2' is not registered; valid names: 'cispo', 'gspo', "
     r"'kimi15', 'ppo', 'tis', 'topr', 'vanilla'\. .*@register_pg_variant\('ppo2'\)")),
    (lambda: core.kl_estimate(LOGP, LOGP, "k4"),
     (r"kind='k4' is not registered; valid names: 'abs', 'k1', 'k2', 'k3', 'kl', 'low_var_kl', "
     r"'mse'.*@register_kl_estimator")),
    (lambda: core.group_advantages(SCORES, 2, "ppo"),
     r"estimator='ppo' is not registered; valid names: 'grpo', .*'rloo'"),
    (lambda: ca(adv_estimator="vtrace"),
     (r"adv_estimator='vtrace' is not registered; valid names: 'gae', 'grpo', 'reinforce', "
     r"'reinforce_baseline', 'rloo'.*@register_adv_estimator")),
    (lambda: core.PG_VARIANT_REGISTRY.check("x", field="config.pg_variant"),
     r"config\.pg_variant='x' is not registered"),
    (lambda: core.agg_loss(LOGP, MASK, "token-sum"),
     (r"loss_agg_mode='token-sum' is not valid; valid names: 'token-mean', 'seq-mean-token-sum', "
     r"'seq-mean-token-mean', 'seq-mean-token-sum-norm'\. Pick one of them")),
    (lambda: core.registered_names("optimizer"),
     r"kind='optimizer' is not a name-valued option; valid kinds: 'pg_variant'"),
    (lambda: core.register_pg_variant("ppo")(lambda *a, **k: None),
     (r"pg_variant='ppo' is already registered \(by ppo_loss\); names must be unique.*"
     r"override=True")),
    # Parameters of a variant.
    (lambda: pl("ppo", tis_upper_bound=2.0),
     (r"pg_variant='ppo' got unknown parameter 'tis_upper_bound'; its valid parameters are "
     r"\['dual_clip_c', 'dual_clip_loss', 'pg_clip', 'pg_clip_high', 'pg_clip_low'\]\. "
     r"It belongs to pg_variant 'tis'\. Remove it or change pg_variant\.")),
    (lambda: pl("vanilla", pg_clip=0.2),
     (r"pg_variant='vanilla' got unknown parameter 'pg_clip'; its valid parameters are none\. "
     r"It belongs to pg_variant 'gspo', 'ppo'")),
    (lambda: pl("ppo", topr_positive_weight=1.0),
     (r"pg_variant='ppo' got unknown parameter 'topr_positive_weight'.*belongs to pg_variant "
     r"'topr'")),
    # ROLL's positive_loss_coef is a loss term of the learner, not a TOPR variant parameter.
    (lambda: pl("topr", positive_loss_coef=1.0),
     r"pg_variant='topr' got unknown parameter 'positive_loss_coef'"),
    (lambda: pl("ppo", pg_clip_low=-0.1),
     r"pg_clip_low=-0\.1 and pg_clip_high=0\.2 must be >= 0.*set non-negative"),
    (lambda: pl("ppo", dual_clip_loss=True, dual_clip_c=1.0),
     r"dual_clip_c=1\.0 must be > 1 .*use e\.g\. the paper's 3\.0"),
    (lambda: pl("tis", tis_lower_bound=2.0, tis_upper_bound=1.0),
     r"tis_lower_bound=2\.0 must be <= tis_upper_bound=1\.0; swap or fix the bounds"),
    (lambda: pl("topr", topr_ratio_level="batch"),
     r"topr_ratio_level='batch' is not valid; valid values: 'token', 'sequence'"),
    (lambda: core.policy_loss("topr", LOGP, LOGP, LOGP, MASK),
     r"pg_variant='topr' needs scores of shape \[B\]=\(2,\).*got None; pass scores=\.\.\."),
    (lambda: core.policy_loss("topr", LOGP, LOGP, LOGP, MASK, scores=torch.ones(3)),
     r"pg_variant='topr' needs scores .*got \(3,\)"),
    # Shapes.
    (lambda: core.policy_loss("ppo", LOGP, LOGP[:, :2], LOGP, MASK),
     (r"policy_loss: logp \(2, 3\), old_logp \(2, 2\), advantages \(2, 3\), mask \(2, 3\) must "
     r"all have the same shape \[B, T\]; pad every tensor")),
    (lambda: core.gae(LOGP, LOGP, MASK, gamma=1.0, lambd=torch.ones(3)),
     r"lambd has shape \(3,\); it must be a float or a \[B\]=\[2\] tensor"),
    (lambda: core.group_advantages(torch.ones(2, 2), 2, "grpo"),
     r"group_advantages: scores must be \[B\] \(one per response\), got \(2, 2\)"),
    (lambda: core.group_advantages(torch.ones(4), 1, "grpo"),
     r"group_size=1 must be an int >= 2 for group baselines.*sample at least 2"),
    (lambda: core.group_advantages(torch.ones(5), 2, "rloo"),
     (r"group_advantages: batch of 5 responses is not a multiple of group_size=2; keep whole "
     r"groups together")),
    (lambda: core.positive_nll_loss(LOGP, MASK, torch.ones(3)),
     r"positive_nll_loss: scores has shape \(3,\), expected \[B\]=\(2,\)"),
    # Option values.
    (lambda: core.agg_loss(LOGP, MASK, "seq-mean-token-sum-norm", norm_length=0),
     (r"norm_length=0 must be > 0 for loss_agg_mode='seq-mean-token-sum-norm'; set it to the "
     r"max response length")),
    (lambda: core.kl_estimate(LOGP, LOGP, "full"),
     (r"kl_loss_kind='full' is the exact KL over the vocabulary and needs logits.*call "
     r"kl_full\(logits, ref_logits\)")),
    (lambda: core.AdaptiveKLController(0.2, target_kl=0.0),
     r"target_kl=0\.0 must be > 0, or None for a fixed KL coefficient"),
    (lambda: core.AdaptiveKLController(0.2, target_kl=1.0, kl_horizon=0),
     r"kl_horizon=0 must be > 0"),
    (lambda: core.length_adaptive_lambda(torch.ones(2), 0.0),
     r"length_adaptive_alpha=0\.0 must be > 0 \(VAPO uses 0\.05\), or None"),
    (lambda: core.reward_norm(SCORES, 2, mean_type="global", std_type=None),
     r"norm_mean_type='global' is not valid; valid values: 'batch', 'group', 'running', None"),
    (lambda: core.reward_norm(SCORES, 2, mean_type=None, std_type="std"),
     r"norm_std_type='std' is not valid"),
    (lambda: core.reward_norm(SCORES, 2, mean_type="running", std_type=None),
     r"norm_mean_type/norm_std_type='running' needs running_stats: pass a RunningMeanStd\(\)"),
    (lambda: core.value_loss(LOGP, LOGP, LOGP, MASK, value_clip=-1.0, agg_mode="token-mean"),
     r"value_clip=-1\.0 must be >= 0, or None for no clipping"),
    # The advantage pipeline.
    (lambda: ca(adv_estimator="gae"),
     r"adv_estimator='gae' needs values \[B, T\] from a critic; pass values=\.\.\. or choose"),
    (lambda: ca(core.AdvantageInputs(torch.ones(3), MASK), adv_estimator="grpo"),
     (r"compute_advantages: scores has shape \(3,\) but mask is \(2, 3\); pass one score per "
     r"response")),
    (lambda: ca(core.AdvantageInputs(SCORES, MASK, values=torch.ones(2, 4))),
     r"compute_advantages: mask \(2, 3\), values \(2, 4\) must all have the same shape"),
    (lambda: ca(reward_clip=0.0), r"reward_clip=0\.0 must be > 0, or None to turn clipping off"),
    (lambda: ca(advantage_clip=-2.0), r"advantage_clip=-2\.0 must be > 0"),
    (lambda: ca(core.AdvantageInputs(SCORES, MASK, kl_coef=0.1)),
     (r"kl_coef=0\.1 puts KL in the reward but token_kl is None; pass token_kl=kl_estimate\("
     r"old_logp, ref_logp, kl_penalty\), or set kl_coef=0")),
    (lambda: ca(adv_estimator="grpo", group_size=1),
     r"group_size=1 must be an int >= 2"),
    (lambda: ca(norm_mean_type="group", group_size=3),
     r"reward_norm: batch of 2 responses is not a multiple of group_size=3"),
]


@pytest.mark.parametrize(("call", "message"), CASES,
                         ids=[f"{i:02d}-{re.sub(r'[^a-z_]', '', m[:24])}"
                              for i, (_, m) in enumerate(CASES)])
def test_value_error_message(call, message):
    with pytest.raises(ValueError, match=message):
        call()
