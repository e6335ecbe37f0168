"""RLVRConfig: every field validated with a message naming field, value and rule, at build time."""

from __future__ import annotations

import re

import pytest

from rllib_llm import RLVRConfig
from rllib_llm.algorithm.fields import FIELDS, reference_markdown


def config(**training):
    return RLVRConfig().environment("math_verify").training(**training)


def test_defaults_validate_and_follow_the_reference():
    cfg = config()
    cfg.validate()
    assert cfg.pg_variant == "ppo" and cfg.loss_agg_mode == "seq-mean-token-mean"
    assert (cfg.pg_clip, cfg.kl_loss_coef, cfg.advantage_clip, cfg.lambd) == (0.2, 0.001, 2.0, 0.95)
    assert cfg.gamma == 1.0 and cfg.use_kl_loss is True and cfg.dual_clip_loss is False


@pytest.mark.parametrize("variant", ["vanilla", "ppo", "tis", "topr", "cispo", "kimi15", "gspo"])
def test_every_critic_free_variant_validates(variant):
    config(pg_variant=variant).validate()


@pytest.mark.parametrize(
    "field, value, rule",
    [
        ("pg_variant", "ppo2", "must be one of"),
        ("loss_agg_mode", "mean", "must be one of"),
        ("adv_estimator", "vtrace", "must be one of"),
        ("kl_loss_kind", "k4", "must be one of"),
        ("kl_penalty", "k9", "must be one of"),
        ("pg_clip", -0.1, "must be a number > 0"),
        ("pg_clip_high", 0.0, r"must be a number > 0 \(or None\)"),
        ("response_length", 0, "must be an integer >= 1"),
        ("rollout_batch_size", 2.5, "must be an integer >= 1"),
        ("temperature", 0, "must be a number > 0"),
        ("top_p", 1.5, r"must be a number in \(0, 1\]"),
        ("gamma", 1.1, r"must be a number in \[0, 1\]"),
        ("dual_clip_c", 1.0, "must be a number > 1"),
        ("whiten_advantages", "yes", "must be True or False"),
        ("norm_mean_type", "global", "must be one of"),
        ("model_dtype", "int8", "must be one of"),
        ("topr_ratio_level", "episode", "must be one of"),
        ("kl_loss_coef", -1.0, "must be a number >= 0"),
        ("pg_variant_kwargs", [1], "must be a dict"),
    ],
)
def test_bad_field_values_name_field_value_and_rule(field, value, rule):
    with pytest.raises(ValueError, match=re.escape(f"RLVRConfig.{field}={value!r}")) as err:
        config(**{field: value}).validate()
    assert err.match(rule)


@pytest.mark.parametrize(
    "training, message",
    [
        (dict(adv_estimator="gae"), "needs a critic"),
        (dict(adv_estimator="grpo", num_return_sequences_in_group=1), "a group baseline needs >= 2"),
        (dict(adv_estimator="rloo", num_return_sequences_in_group=1), "a group baseline needs >= 2"),
        (dict(adv_estimator="reinforce", num_return_sequences_in_group=1,
              norm_mean_type="group"), "'group' needs num_return_sequences_in_group >= 2"),
        (dict(tis_lower_bound=2.0, tis_upper_bound=1.0), "lower <= upper"),
        (dict(mini_batch_size=5), "must divide the 64 responses"),
    ],
)
def test_combination_rules(training, message):
    with pytest.raises(ValueError, match=message):
        config(**training).validate()


def test_rollout_batch_must_split_over_env_runners():
    cfg = config(rollout_batch_size=6).env_runners(num_env_runners=4)
    with pytest.raises(ValueError, match="must be divisible by num_env_runners=4"):
        cfg.validate()


def test_unknown_setting_suggests_the_close_name():
    with pytest.raises(ValueError, match="unknown setting 'pg_varient'.*Did you mean pg_variant"):
        config(pg_varient="topr")


def test_roll_aliases_map_onto_our_fields():
    cfg = config(positive_loss_coef=0.5, use_topr_neg_loss_coef=0.25, max_new_tokens=12)
    assert (cfg.topr_positive_weight, cfg.topr_negative_weight) == (0.5, 0.25)
    assert cfg.response_length == 12
    from_dict = RLVRConfig().update_from_dict({"positive_loss_coef": 0.75, "pg_variant": "topr"})
    assert from_dict.topr_positive_weight == 0.75 and from_dict.pg_variant == "topr"


def test_rlllib_training_arguments_still_work():
    cfg = config(lr=3e-4, grad_clip=0.5)
    assert cfg.lr == 3e-4 and cfg.grad_clip == 0.5


def test_tune_style_dict_round_trip_keeps_every_field():
    cfg = config(pg_variant="cispo", cispo_use_unified_mask=True, lr=1e-3)
    again = RLVRConfig().update_from_dict(cfg.to_dict())
    for f in FIELDS:
        assert getattr(again, f.name) == getattr(cfg, f.name), f.name


def test_reference_table_lists_every_field_once():
    table = reference_markdown()
    for f in FIELDS:
        assert table.count(f"| `{f.name}` |") == 1
    assert len({f.name for f in FIELDS}) == len(FIELDS)


def test_bad_config_fails_at_build_time_not_at_step_one():
    with pytest.raises(ValueError, match="RLVRConfig.pg_variant='nope'"):
        config(pg_variant="nope").build_algo()
