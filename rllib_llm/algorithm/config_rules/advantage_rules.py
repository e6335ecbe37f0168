"""The rules of the advantage estimator's settings: the critic's settings only with a critic
(adv_estimator='gae'), and prompt groups of several responses wherever a rule compares a
response with its group (a group baseline, group normalisation, dynamic sampling)."""

from __future__ import annotations

from rllib_llm import core
from rllib_llm.algorithm.config_rules.learner_rules import check_lr
from rllib_llm.algorithm.fields import changed_fields, refuse_changed

# Settings only the critic (adv_estimator='gae') reads: with a critic-free estimator they must
# keep their defaults. (gamma stays free: REINFORCE discounts with it too.)
CRITIC_FIELDS = ("lambd", "critic_lambd", "length_adaptive_alpha", "value_clip",
                 "critic_model_name_or_path", "critic_shares_trunk", "critic_lr",
                 "value_loss_coef", "value_pretrain_steps")


def check_critic(cfg) -> None:
    """Critic settings need an estimator that reads a critic, and must fit together."""
    if not core.adv_estimator_info(cfg.adv_estimator).needs_critic:
        refuse_changed(cfg, CRITIC_FIELDS,
                       f"configure the critic (or GAE), but adv_estimator={cfg.adv_estimator!r} "
                       "uses no critic, so they would do nothing. Set adv_estimator='gae', or "
                       "leave them at their defaults.")
        return
    if cfg.critic_lr is not None:
        check_lr(cfg.critic_lr, "critic_lr")
    if cfg.critic_shares_trunk and cfg.critic_model_name_or_path is not None:
        raise ValueError(
            f"RLVRConfig.critic_model_name_or_path={cfg.critic_model_name_or_path!r} with "
            "critic_shares_trunk=True: a value head on the policy's trunk starts from the "
            "policy's checkpoint. Drop one of the two."
        )
    if not cfg.critic_shares_trunk and changed_fields(cfg, ("value_loss_coef",)):
        raise ValueError(
            f"RLVRConfig.value_loss_coef={cfg.value_loss_coef!r} only weighs the value loss "
            "against the actor loss on a shared trunk (critic_shares_trunk=True); a separate "
            "critic has its own Adam optimizer, which a loss scale does not change. Set "
            "critic_lr instead, or critic_shares_trunk=True."
        )


def check_groups(cfg) -> None:
    """A group baseline, and group normalisation, need several responses per prompt."""
    n = cfg.num_return_sequences_in_group
    if core.adv_estimator_info(cfg.adv_estimator).needs_groups and n < 2:
        raise ValueError(
            f"RLVRConfig.num_return_sequences_in_group={n} is too small for "
            f"adv_estimator={cfg.adv_estimator!r}: a group baseline needs >= 2 responses "
            "per prompt. Set num_return_sequences_in_group >= 2."
        )
    if "group" in (cfg.norm_mean_type, cfg.norm_std_type) and n < 2:
        raise ValueError(
            f"RLVRConfig.norm_mean_type/norm_std_type='group' needs "
            f"num_return_sequences_in_group >= 2, got {n}."
        )


def check_dynamic_sampling(cfg) -> None:
    """Dynamic sampling filters prompt groups, so there must be groups; its cap must be read."""
    if cfg.dynamic_sampling and cfg.num_return_sequences_in_group < 2:
        raise ValueError(
            "RLVRConfig.dynamic_sampling=True keeps prompt groups whose rewards differ, which "
            f"needs num_return_sequences_in_group >= 2 (got "
            f"{cfg.num_return_sequences_in_group}).")
    if not cfg.dynamic_sampling and changed_fields(cfg, ("dynamic_sampling_max_rounds",)):
        raise ValueError(
            f"RLVRConfig.dynamic_sampling_max_rounds={cfg.dynamic_sampling_max_rounds} has no "
            "effect without dynamic_sampling=True; set that too.")
