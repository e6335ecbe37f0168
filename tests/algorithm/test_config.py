"""RLVRConfig: every field validated with a message naming field, value and rule, at build time."""

from __future__ import annotations

import re

import pytest

from rllib_llm import RLVRConfig
from rllib_llm.algorithm.fields import (
    FIELDS,
    FIELDS_BY_NAME,
    SECTIONS,
    fields_by_section,
    reference_markdown,
)


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
    cfg = config(pg_variant=variant)
    cfg.validate()  # raises, naming the rule, on any setting it refuses
    # Validated as given, and trained without a critic (the default estimator needs none).
    assert cfg.pg_variant == variant and cfg.critic_spec is None


@pytest.mark.parametrize(
    "field, value, rule",
    [
        ("pg_variant", "ppo2", "must be one of"),
        ("loss_agg_mode", "mean", "must be one of"),
        ("adv_estimator", "vtrace", "must be one of"),
        ("kl_loss_kind", "k4", "must be one of"),
        ("kl_penalty", "k9", "must be one of"),
        # ROLL's documented option, refused as what it is
        ("kl_penalty", "full", r"it is not implemented in rllib_llm: 'full' \(ROLL's exact KL "
                               r"over the whole vocabulary\) needs every token's logits.*use 'kl'"),
        ("kl_loss_kind", "full", "is not implemented in rllib_llm"),
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
        (dict(critic_lambd=1.0), r"critic_lambd=1.0 configure the critic .* "
                                 "adv_estimator='grpo' uses no critic"),
        (dict(lambd=0.9, value_pretrain_steps=3), r"lambd=0.9, value_pretrain_steps=3 configure"),
        (dict(length_adaptive_alpha=0.05), "Set adv_estimator='gae'"),
        (dict(value_clip=0.2), "uses no critic"),
        (dict(critic_shares_trunk=True), "uses no critic"),
        (dict(adv_estimator="gae", critic_shares_trunk=True, critic_model_name_or_path="embedded"),
         "starts from the policy's checkpoint"),
        (dict(adv_estimator="gae", value_loss_coef=0.5), "only weighs the value loss"),
        (dict(adv_estimator="gae", critic_lr=0.0), r"critic_lr=0.0 is invalid"),
        (dict(adv_estimator="gae", critic_lr=[[5, 1e-5]]), r"critic_lr=\[\[5, 1e-05\]\] is invalid"),
        (dict(adv_estimator="grpo", num_return_sequences_in_group=1), "a group baseline needs >= 2"),
        (dict(adv_estimator="rloo", num_return_sequences_in_group=1), "a group baseline needs >= 2"),
        (dict(adv_estimator="reinforce", num_return_sequences_in_group=1,
              norm_mean_type="group"), "'group' needs num_return_sequences_in_group >= 2"),
        (dict(tis_lower_bound=2.0, tis_upper_bound=1.0), "lower <= upper"),
        (dict(mini_batch_size=5), "must be a multiple of num_return_sequences_in_group=8"),
        (dict(mini_batch_size=24), "divide the 64 responses"),
        (dict(mini_batch_size=16, micro_batch_size=32), "micro_batch_size=32 exceeds"),
        (dict(rollout_batch_size=2**18), "responses per iteration is over the limit"),
        (dict(model_dtype="float16"), "'float16' is not supported for training"),
        (dict(prompt_length=100, response_length=64), "exceeds the model's context of 128"),
        (dict(response_length=128), "leaves no room for a prompt"),
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


@pytest.mark.parametrize(("key", "meant"), [
    ("learning_rat", "lr"),  # was: learner_strategy (closest in spelling, not in meaning)
    ("learning_rate", "lr"),
    ("clip_ratio", "pg_clip"),
    ("num_generations", "num_return_sequences_in_group"),
])
def test_unknown_setting_suggests_the_setting_its_usual_name_means(key, meant):
    with pytest.raises(ValueError, match=rf"unknown setting '{key}'\. Did you mean {meant}[,?]"):
        config(**{key: 0.1})


@pytest.mark.parametrize("runners", [-1, 1.5, True])
def test_num_env_runners_must_be_a_count(runners):
    # -1 was accepted, and trained (sampling in the driver, as 0 does).
    with pytest.raises(ValueError, match=re.escape(
            f"RLVRConfig.num_env_runners={runners!r} is invalid: it must be an integer >= 0 (0 "
            "samples in the driver process, N >= 1 in N remote env runners)")):
        config().env_runners(num_env_runners=runners).validate()


def test_roll_names_mean_what_they_mean_in_roll():
    # ROLL's TOPR coefficients are loss terms of their own, not the variant's weights; ROLL's
    # own spelling "postive_loss_coef" is accepted too.
    cfg = config(postive_loss_coef=0.5, use_topr_neg_loss_coef=0.25, max_new_tokens=12)
    assert (cfg.positive_loss_coef, cfg.use_topr_neg_loss_coef) == (0.5, 0.25)
    assert (cfg.topr_positive_weight, cfg.topr_negative_weight) == (1.0, 1.0)
    assert cfg.response_length == 12
    from_dict = RLVRConfig().update_from_dict({"postive_loss_coef": 0.75, "pg_variant": "topr"})
    assert from_dict.positive_loss_coef == 0.75 and from_dict.pg_variant == "topr"


@pytest.mark.parametrize("training, message", [
    ({"response_length": 6, "max_new_tokens": 9},
     r"^RLVRConfig.training\(\) got response_length=6 and max_new_tokens=9, which both set "
     r"response_length \(max_new_tokens is ROLL's name for response_length\); set only "
     r"response_length\.$"),
    ({"max_new_tokens": 9, "response_length": 6}, r"got max_new_tokens=9 and response_length=6"),
    ({"num_epochs": 2, "ppo_epochs": 3},
     r"got num_epochs=2 and ppo_epochs=3, which both set ppo_epochs \(num_epochs is RLlib's name "
     r"for ppo_epochs\); set only ppo_epochs"),
    ({"postive_loss_coef": 1.0, "positive_loss_coef": 1.0},
     r"got postive_loss_coef=1.0 and positive_loss_coef=1.0, which both set positive_loss_coef"),
])
def test_an_alias_and_its_field_in_one_call_are_an_error_naming_both(training, message):
    # Which one won depended on the order of the keyword arguments.
    with pytest.raises(ValueError, match=message):
        RLVRConfig().training(**training)


def test_a_later_call_overrides_an_earlier_one_under_either_name():
    # Builder calls apply in turn, as for every setting (a preset, then the caller's overrides).
    assert RLVRConfig().training(ppo_epochs=3).training(num_epochs=2).ppo_epochs == 2
    assert RLVRConfig.preset("ppo", max_new_tokens=9).response_length == 9


def test_rllib_num_epochs_sets_ppo_epochs_and_its_step_units_are_rejected():
    assert config(num_epochs=3).ppo_epochs == 3
    assert RLVRConfig().update_from_dict({"num_epochs": 2}).ppo_epochs == 2
    # A to_dict() round trip carries RLlib's num_epochs at its default: ppo_epochs survives.
    assert RLVRConfig().update_from_dict(config(ppo_epochs=4).to_dict()).ppo_epochs == 4
    for name, value, ours in [("minibatch_size", 64, "set mini_batch_size"),
                              ("train_batch_size_per_learner", 256, "set rollout_batch_size"),
                              ("train_batch_size", 256, "set rollout_batch_size")]:
        with pytest.raises(ValueError, match=f"RLVRConfig.{name}={value} is RLlib's setting.*{ours}"):
            config(**{name: value}).validate()
    cfg = config()
    cfg.num_epochs = 2  # set behind training()'s back: still caught
    with pytest.raises(ValueError, match="num_epochs=2 is RLlib's setting.*ppo_epochs"):
        cfg.validate()


@pytest.mark.parametrize("lr, rule", [
    (-1e-4, "a learning rate <= 0"), (0.0, "a learning rate <= 0"), (float("nan"), "use a number > 0"),
    ([[0, 1e-4], [100, -1e-4]], "values > 0"), ([[10, 1e-4]], "timesteps from 0"),
    ([[0, 1e-4], [100, 2e-4], [50, 1e-4]], "timesteps from 0 upwards"), ("fast", "use a number"),
])
def test_learning_rate_must_be_positive_including_schedules(lr, rule):
    with pytest.raises(ValueError, match=re.escape(f"RLVRConfig.lr={lr!r} is invalid")) as err:
        config(lr=lr).validate()
    assert err.match(rule)
    config(lr=[[0, 1e-5], [1000, 1e-4]]).validate()


@pytest.mark.parametrize("grad_clip", [-1.0, 0, float("inf")])
def test_grad_clip_must_be_positive_or_none(grad_clip):
    with pytest.raises(ValueError, match=re.escape(f"RLVRConfig.grad_clip={grad_clip!r}")):
        config(grad_clip=grad_clip).validate()
    config(grad_clip=None).validate()


@pytest.mark.parametrize(("temperature", "rule"), [
    (float("inf"), "must be a finite number > 0"),  # (not "a number > 0": inf is one, and > 0)
    (float("nan"), "must be a finite number > 0"),
    (-1.0, "must be a number > 0"),
])
def test_temperature_must_be_finite_and_positive(temperature, rule):
    with pytest.raises(ValueError, match=f"RLVRConfig.temperature=.*{rule}"):
        config(temperature=temperature).validate()


def test_prompt_length_defaults_to_what_the_model_context_leaves():
    cfg = config(response_length=16)
    assert cfg.prompt_length is None
    assert cfg.model_context_length == 128  # the embedded model's max_position_embeddings
    assert cfg.resolved_prompt_length == 112


@pytest.mark.parametrize("key, value, field", [
    ("response_length", 32, "response_length"), ("prompt_length", 40, "prompt_length"),
    ("seed", 7, r"seed \(.debugging"), ("model", "other", "model_name_or_path"),
])
def test_env_config_cannot_silently_lose_to_the_training_fields(key, value, field):
    cfg = config(response_length=16, prompt_length=64).environment(
        "math_verify", env_config={key: value})
    with pytest.raises(ValueError, match=rf"env_config\['{key}'\]={value!r} conflicts with "
                                         rf"RLVRConfig.{field}"):
        cfg.validate()
    # Equal values are no conflict.
    same = {"response_length": 16, "prompt_length": 64, "seed": None, "model": "embedded"}[key]
    config(response_length=16, prompt_length=64).environment(
        "math_verify", env_config={key: same}).validate()


@pytest.mark.parametrize("field, value", [("temperature", -1), ("rollout_batch_size", -1),
                                          ("kl_loss_coef", -1), ("eval_num_problems", -1)])
def test_minus_one_is_kept_and_rejected_never_swapped_for_the_default(field, value):
    # RLlib drops -1 (its DEPRECATED_VALUE) from the state it copies configs with.
    cfg = config(**{field: value})
    copied = RLVRConfig.from_state(cfg.get_state())
    assert getattr(copied, field) == value
    with pytest.raises(ValueError, match=re.escape(f"RLVRConfig.{field}={value!r}")):
        copied.validate()


def test_rlllib_training_arguments_still_work():
    cfg = config(lr=3e-4, grad_clip=0.5)
    assert cfg.lr == 3e-4 and cfg.grad_clip == 0.5


def test_tune_style_dict_round_trip_keeps_every_field():
    cfg = config(pg_variant="cispo", cispo_use_unified_mask=True, lr=1e-3)
    again = RLVRConfig().update_from_dict(cfg.to_dict())
    for f in FIELDS:
        assert getattr(again, f.name) == getattr(cfg, f.name), f.name


def test_every_field_is_in_one_section_of_the_reference():
    assert {f.section for f in FIELDS} <= set(SECTIONS)
    grouped = [f.name for fields in fields_by_section().values() for f in fields]
    assert sorted(grouped) == sorted(f.name for f in FIELDS)
    assert all(fields for fields in fields_by_section().values())  # no empty section


def test_reference_table_lists_every_field_once():
    table = reference_markdown()
    for f in FIELDS:
        assert table.count(f"| `{f.name}` |") == 1
    assert len({f.name for f in FIELDS}) == len(FIELDS)


def test_bad_config_fails_at_build_time_not_at_step_one():
    with pytest.raises(ValueError, match="RLVRConfig.pg_variant='nope'"):
        config(pg_variant="nope").build_algo()


@pytest.mark.parametrize("training, message", [
    (dict(lr=-1e-3), "RLVRConfig.lr=-0.001 is invalid"),
    (dict(temperature=-1), "RLVRConfig.temperature=-1"),
    (dict(grad_clip=-1.0), "RLVRConfig.grad_clip=-1.0"),
    (dict(prompt_length=120, response_length=16), "exceeds the model's context"),
])
def test_build_algo_validates_like_validate(training, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        config(**training).build_algo()


def test_a_missing_model_path_fails_validation_at_once(tmp_path):
    import time

    start = time.perf_counter()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        config(model_name_or_path=str(tmp_path / "nope")).validate()
    assert time.perf_counter() - start < 5


def test_every_variant_parameter_is_declared_once_with_its_signature_default():
    """A pg variant's parameters are config fields of the same name (the learner matches them
    by name), each with the variant function's own default: one value, not two that may drift."""
    from rllib_llm import core

    for variant in core.registered_names("pg_variant"):
        for name, default in core.pg_variant_params(variant).items():
            assert name in FIELDS_BY_NAME, (variant, name)
            assert FIELDS_BY_NAME[name].default == default, (variant, name)


def test_only_topr_splits_by_correct_among_the_built_in_variants():
    from rllib_llm import core

    splits = {v for v in core.registered_names("pg_variant")
              if core.pg_variant_info(v).splits_by_correct}
    assert splits == {"topr"}
