"""The functional heart of rllib_llm: pure torch functions of tensors (no Ray, vLLM or
transformers), one per formula of docs/ALGORITHMS.md.

Losses return per-token values; ``agg_loss`` reduces them. Options are registries picked by name
(``PG_VARIANT_REGISTRY``, ``ADV_ESTIMATOR_REGISTRY``, ...); the built-in names are ``Literal``
types and tuples (``PG_VARIANTS``, ``AGG_MODES``, ...) for config validation. See
``rllib_llm.core.masked`` for the dtype and mask rules every function follows.
"""

from rllib_llm.core.advantages import (
    GROUP_ESTIMATOR_REGISTRY,
    GROUP_ESTIMATORS,
    GroupEstimator,
    discounted_returns,
    episode_last_rows,
    gae,
    group_advantages,
    length_adaptive_lambda,
    register_group_estimator,
)
from rllib_llm.core.aggregation import (
    AGG_MODES,
    DEFAULT_AGG_MODE,
    AggCounts,
    AggMode,
    agg_counts,
    agg_loss,
    check_agg_mode,
)
from rllib_llm.core.distillation import (
    distillation_advantages,
    mean_reverse_kl,
    reverse_kl_per_token,
)
from rllib_llm.core.kl import (
    KL_ESTIMATOR_REGISTRY,
    KL_KINDS,
    KL_PENALTIES,
    AdaptiveKLController,
    KlKind,
    KlPenalty,
    kl_estimate,
    kl_full,
    register_kl_estimator,
)
from rllib_llm.core.lm_losses import positive_nll_loss, roll_topr_terms
from rllib_llm.core.masked import masked_mean, masked_sum, masked_var
from rllib_llm.core.names import (
    NameKind,
    Registrations,
    registered_names,
    restore_registrations,
    user_registrations,
)
from rllib_llm.core.normalisation import (
    NORM_TYPES,
    NormType,
    RunningMeanStd,
    check_norm_type,
    reward_norm,
    whiten,
)
from rllib_llm.core.pass_at_k import pass_at_k
from rllib_llm.core.pipeline import (
    ADV_ESTIMATOR_REGISTRY,
    ADV_ESTIMATORS,
    AdvantageInputs,
    AdvantageSettings,
    AdvEstimator,
    AdvEstimatorInfo,
    EstimatorInputs,
    adv_estimator_info,
    compute_advantages,
    group_adv_estimator,
    last_token_rewards,
    process_scores,
    register_adv_estimator,
    token_level_rewards,
)
from rllib_llm.core.policy_losses import (
    PG_VARIANT_REGISTRY,
    PG_VARIANTS,
    TOPR_RATIO_LEVELS,
    PgVariant,
    pg_variant_info,
    pg_variant_params,
    policy_loss,
    register_pg_variant,
)
from rllib_llm.core.registry import Registry
from rllib_llm.core.reward_models import classifier_score, combine_rewards, judge_score
from rllib_llm.core.reward_shaping import overlong_penalty
from rllib_llm.core.rollout_correction import (
    ROLLOUT_IS_LEVELS,
    ROLLOUT_RS_LEVELS,
    RolloutIsLevel,
    rollout_is_weights,
    rollout_mismatch_kl,
    rollout_rejection_mask,
)
from rllib_llm.core.value import (
    explained_variance,
    value_clipfrac,
    value_loss,
    value_loss_per_token,
)

__all__ = [
    "ADV_ESTIMATORS",
    "ADV_ESTIMATOR_REGISTRY",
    "AGG_MODES",
    "DEFAULT_AGG_MODE",
    "GROUP_ESTIMATORS",
    "GROUP_ESTIMATOR_REGISTRY",
    "KL_ESTIMATOR_REGISTRY",
    "KL_KINDS",
    "KL_PENALTIES",
    "NORM_TYPES",
    "PG_VARIANTS",
    "PG_VARIANT_REGISTRY",
    "ROLLOUT_IS_LEVELS",
    "ROLLOUT_RS_LEVELS",
    "TOPR_RATIO_LEVELS",
    "AdaptiveKLController",
    "AdvEstimator",
    "AdvEstimatorInfo",
    "AdvantageInputs",
    "AdvantageSettings",
    "AggCounts",
    "AggMode",
    "EstimatorInputs",
    "GroupEstimator",
    "KlKind",
    "KlPenalty",
    "NameKind",
    "NormType",
    "PgVariant",
    "Registry",
    "Registrations",
    "RolloutIsLevel",
    "RunningMeanStd",
    "adv_estimator_info",
    "agg_counts",
    "agg_loss",
    "check_agg_mode",
    "check_norm_type",
    "compute_advantages",
    "discounted_returns",
    "distillation_advantages",
    "classifier_score",
    "combine_rewards",
    "judge_score",
    "episode_last_rows",
    "explained_variance",
    "gae",
    "group_adv_estimator",
    "group_advantages",
    "kl_estimate",
    "kl_full",
    "last_token_rewards",
    "length_adaptive_lambda",
    "masked_mean",
    "mean_reverse_kl",
    "masked_sum",
    "masked_var",
    "overlong_penalty",
    "pass_at_k",
    "pg_variant_info",
    "pg_variant_params",
    "policy_loss",
    "positive_nll_loss",
    "roll_topr_terms",
    "process_scores",
    "register_adv_estimator",
    "register_group_estimator",
    "register_kl_estimator",
    "register_pg_variant",
    "registered_names",
    "restore_registrations",
    "reverse_kl_per_token",
    "reward_norm",
    "rollout_is_weights",
    "rollout_rejection_mask",
    "rollout_mismatch_kl",
    "token_level_rewards",
    "user_registrations",
    "value_clipfrac",
    "value_loss",
    "value_loss_per_token",
    "whiten",
]
