"""load_roll_config: ROLL's field names and meanings mapped onto RLVRConfig, hand-checked against
ROLL's code (roll/configs/base_config.py, roll/utils/functionals.py's reward_postprocess,
roll/pipeline/rlvr/actor_worker.py), and the report of what it could not map."""

from __future__ import annotations

from pathlib import Path

import pytest

from rllib_llm.algorithm.presets import preset_settings
from rllib_llm.algorithm.roll_config import ROLL_DEFAULTS, load_roll_config, roll_reward_norm

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ROLL_PPO = EXAMPLES / "roll_ppo.yaml"
ROLL_TOPR = EXAMPLES / "roll_topr.yaml"


def settings(**roll_fields):
    return load_roll_config(roll_fields).settings


def test_fields_of_the_same_name_map_as_they_are():
    given = {"rollout_batch_size": 64, "prompt_length": 100, "response_length": 20,
             "adv_estimator": "reinforce", "num_return_sequences_in_group": 4, "ppo_epochs": 2,
             "use_kl_loss": True, "kl_loss_coef": 0.01, "loss_agg_mode": "token-mean",
             "whiten_advantages": True, "advantage_clip": 3.0, "reward_clip": None,
             "lambd": 0.95, "gamma": 0.99, "pg_clip": 0.3, "value_clip": 0.5,
             "kl_penalty": "abs", "target_kl": 0.1, "init_kl_coef": 0.1, "kl_horizon": 500,
             "add_token_level_kl": False, "norm_mean_type": "batch", "norm_std_type": None,
             "rl_loss_coef": 0.5, "use_topr_neg_loss_coef": 0.25, "pg_variant": "tis"}
    got = settings(**given)
    assert {k: got[k] for k in given} == given


def test_roll_names_of_ours_under_another_name():
    got = settings(entropy_loss_coef=0.01, max_grad_norm=0.5, pretrain="/models/qwen",
                   postive_loss_coef=0.7, max_new_tokens=12)
    assert (got["entropy_coef"], got["grad_clip"], got["model_name_or_path"],
            got["positive_loss_coef"], got["response_length"]) == (0.01, 0.5, "/models/qwen",
                                                                   0.7, 12)


def test_fields_the_file_leaves_out_take_rolls_defaults_not_ours():
    roll = load_roll_config({})
    assert roll.settings == dict(ROLL_DEFAULTS) == roll.defaults
    # ROLL's PPOConfig: no whitening, no advantage clip, no KL loss, GAE with one response.
    assert (roll.settings["whiten_advantages"], roll.settings["advantage_clip"],
            roll.settings["use_kl_loss"], roll.settings["kl_loss_coef"],
            roll.settings["adv_estimator"], roll.settings["num_return_sequences_in_group"]) == (
        False, None, False, 0.0, "gae", 1)
    assert "whiten_advantages" not in load_roll_config({"whiten_advantages": True}).defaults


# ROLL's reward_postprocess (before commit 7b97eef): group/batch subtract the mean and divide by
# the std unless reward_shift (mean only), ignoring reward_scale; running: shift -> mean only,
# else scale -> std only, else both; null -> nothing.
@pytest.mark.parametrize("roll, ours", [
    ((None, False, False), (None, None)),
    ((None, True, True), (None, None)),
    (("group", True, False), ("group", None)),
    (("group", False, False), ("group", "group")),
    (("group", False, True), ("group", "group")),
    (("batch", True, False), ("batch", None)),
    (("batch", False, False), ("batch", "batch")),
    (("running", True, False), ("running", None)),
    (("running", True, True), ("running", None)),
    (("running", False, True), (None, "running")),
    (("running", False, False), ("running", "running")),
])
def test_reward_norm_shift_scale_as_roll_applied_them(roll, ours):
    assert roll_reward_norm(*roll) == ours
    kind, shift, scale = roll
    got = settings(reward_norm=kind, reward_shift=shift, reward_scale=scale,
                   num_return_sequences_in_group=4)
    assert (got["norm_mean_type"], got["norm_std_type"]) == ours


def test_an_ignored_reward_flag_is_said_in_the_report():
    roll = load_roll_config({"reward_norm": "group", "reward_scale": True,
                             "num_return_sequences_in_group": 4})
    assert "ROLL ignores reward_scale with reward_norm='group'" in roll.report()


def test_grpo_normalises_by_group_itself():
    roll = load_roll_config({"adv_estimator": "grpo", "num_return_sequences_in_group": 8,
                             "reward_norm": "batch", "reward_shift": False})
    assert (roll.settings["norm_mean_type"], roll.settings["norm_std_type"]) == (None, None)
    assert "ROLL's grpo normalises by group itself" in roll.report()


def test_dual_clip_constant_is_rolls_one_plus_twice_pg_clip():
    assert settings(dual_clip_loss=True, pg_clip=0.3)["dual_clip_c"] == pytest.approx(1.6)
    assert settings(dual_clip_loss=True)["dual_clip_c"] == pytest.approx(1.4)
    assert "dual_clip_c" not in settings(dual_clip_loss=False, pg_clip=0.3)


def test_overrides_are_read_with_the_file_before_its_rules_and_derivations():
    text = ROLL_TOPR.read_text().replace("positive_loss_coef: 1.0", "positive_loss_coef: x_1")
    roll = load_roll_config(text, overrides={"positive_loss_coef": 2.0, "pg_clip": 0.3})
    # the placeholder filled, dual_clip_c derived from the final pg_clip (ROLL: 1 + 2 pg_clip)
    assert roll.settings["positive_loss_coef"] == 2.0
    assert roll.settings["dual_clip_c"] == pytest.approx(1.6)
    report = roll.report()
    assert "pg_clip=0.3  (an override of the file)" in report
    assert "dual_clip_loss=True, pg_clip=0.3 -> dual_clip_c=1.6" in report
    # an override under another name replaces the file's field of that setting
    assert load_roll_config(ROLL_PPO, overrides={"max_new_tokens": 9}).settings[
        "response_length"] == 9
    assert "dual_clip_c" not in load_roll_config(ROLL_PPO, overrides={
        "dual_clip_loss": False}).settings


def test_to_rlvr_config_derives_dual_clip_c_again_from_the_final_pg_clip():
    roll = load_roll_config(ROLL_PPO)
    assert roll.to_rlvr_config().dual_clip_c == pytest.approx(1.4)
    assert roll.to_rlvr_config(pg_clip=0.3).dual_clip_c == pytest.approx(1.6)
    assert roll.to_rlvr_config(pg_clip=0.3, dual_clip_c=2.5).dual_clip_c == 2.5  # given: kept
    assert roll.to_rlvr_config(max_new_tokens=9).response_length == 9  # an alias, no conflict


def test_a_flattened_learning_rate_maps_to_lr_under_its_own_name():
    # ROLL's off-policy guide with its indentation lost: actor_train's learning_rate on top.
    roll = load_roll_config("pg_variant: topr\nadv_estimator: reinforce\nlearning_rate: 1e-6\n")
    assert roll.settings["lr"] == 1e-6
    assert roll.source_of("lr") == "learning_rate"
    assert "learning_rate=1e-06 -> lr=1e-06" in roll.report()
    assert not roll.unmapped


def test_clip_range_counts_only_with_use_pg_clip_range():
    on = settings(use_pg_clip_range=True, pg_clip_high=0.28)
    assert (on["pg_clip_low"], on["pg_clip_high"]) == (0.2, 0.28)
    off = load_roll_config({"use_pg_clip_range": False, "pg_clip_low": 0.1, "pg_clip_high": 0.3})
    assert "pg_clip_low" not in off.settings and "pg_clip_high" not in off.settings
    assert "only with use_pg_clip_range: true" in off.report()


def test_report_lists_every_unmapped_field_with_its_reason():
    roll = load_roll_config({"ppo_epochs": 1, "actor_train": {"strategy_args": {}},
                             "num_gpus_per_node": 8, "max_steps": 500, "critic_warmup": 5,
                             "frobnicate": 1})
    reasons = {u.name: u.reason for u in roll.unmapped}
    assert list(reasons) == ["actor_train", "num_gpus_per_node", "max_steps", "critic_warmup",
                             "frobnicate"]
    assert reasons["actor_train"].startswith("a ROLL worker role")
    assert reasons["num_gpus_per_node"].startswith("GPU and cluster placement")
    assert reasons["max_steps"].startswith("run management")
    assert "value_pretrain_steps" in reasons["critic_warmup"]
    assert reasons["frobnicate"].startswith("unknown to rllib_llm")
    report = roll.report()
    assert "not mapped (5)" in report and "  ppo_epochs=1" in report
    assert all(f"  {name}: {reason}" in report for name, reason in reasons.items())


@pytest.mark.parametrize("fields, message", [
    ({"positive_loss_coef": "x_1"}, r"positive_loss_coef='x_1' is invalid: it must be a number "
                                    r">= 0\. It is a placeholder of ROLL's documentation"),
    ({"use_topr_neg_loss_coef": "x_2"}, r"use_topr_neg_loss_coef='x_2' is invalid"),
    ({"postive_loss_coef": -1.0}, r"postive_loss_coef=-1.0 \(RLVRConfig.positive_loss_coef\) "
                                  r"is invalid: it must be a number >= 0"),
    ({"loss_agg_mode": "bogus"}, r"loss_agg_mode='bogus' is invalid: it must be one of"),
    ({"max_grad_norm": 0}, r"max_grad_norm=0 \(RLVRConfig.grad_clip\) is invalid"),
    ({"reward_norm": "groups"}, r"reward_norm='groups' is invalid"),
    ({"reward_norm": "group", "reward_shift": "yes"}, r"reward_shift='yes' is invalid"),
    ({"use_pg_clip_range": 1}, r"use_pg_clip_range=1 is invalid"),
    ({"use_pg_clip_range": True, "pg_clip_high": -0.1}, r"pg_clip_high=-0.1 is invalid"),
    # ROLL documents "kl", "abs", "mse", "full": the last is refused as not implemented
    ({"kl_penalty": "full"}, r"^ROLL config field kl_penalty='full' is invalid: it is not "
                             r"implemented in rllib_llm: .*use 'kl' \(k1\), 'mse' \(k2\), 'k3' "
                             r"or 'abs'\.$"),
    ({"learning_rate": 0}, r"learning_rate=0 \(RLVRConfig.lr\) is invalid: it must be a number "
                           r"> 0"),
])
def test_placeholders_and_invalid_values_fail_naming_field_and_value(fields, message):
    with pytest.raises(ValueError, match=message):
        load_roll_config(fields)


@pytest.mark.parametrize("fields, message", [
    ({"postive_loss_coef": 0.5, "positive_loss_coef": 0.5},
     r"two fields set RLVRConfig.positive_loss_coef \(0.5 and 0.5\); keep one"),
    ({"reward_norm": "batch", "norm_mean_type": "batch"},
     r"reward_norm='batch' and norm_mean_type/norm_std_type both set reward normalisation"),
    ({"adv_estimator": "grpo", "reward_norm": "group", "reward_shift": True},
     r"adv_estimator='grpo' with reward_shift=True subtracts the group mean only"),
    ({"adv_estimator": "grpo", "norm_mean_type": "batch"},
     r"adv_estimator='grpo' with norm_mean_type='batch'.*ROLL's grpo overrides them"),
    ({"reward_clip": 10, "reward_norm": "batch"},
     r"reward_clip=10 with norm_mean_type='batch', norm_std_type='batch': ROLL clamps"),
    ({"reward_clip": 10, "add_token_level_kl": True}, r"reward_clip=10 with add_token_level_kl"),
])
def test_combinations_roll_means_otherwise_fail(fields, message):
    with pytest.raises(ValueError, match=message):
        load_roll_config(fields)


def test_reward_clip_alone_maps():
    assert settings(reward_clip=10)["reward_clip"] == 10


def test_strict_makes_any_unmapped_field_an_error():
    with pytest.raises(ValueError, match=r"strict=True\): fields not mapped: actor_train \(a "
                                         r"ROLL worker role.*; max_steps \(run management"):
        load_roll_config({"ppo_epochs": 1, "actor_train": {}, "max_steps": 5}, strict=True)
    assert load_roll_config(ROLL_PPO, strict=True).settings["ppo_epochs"] == 1


def test_a_path_a_path_string_a_yaml_string_and_a_dict_load_alike():
    import yaml

    text = ROLL_PPO.read_text()
    loaded = [load_roll_config(s).settings
              for s in (ROLL_PPO, str(ROLL_PPO), text, yaml.safe_load(text))]
    assert all(s == loaded[0] for s in loaded)
    with pytest.raises(ValueError, match="must be a YAML mapping of field: value, got list"):
        load_roll_config("- a\n- b\n")


def test_round_trip_into_a_validated_rlvr_config():
    roll = load_roll_config(ROLL_TOPR)
    config = roll.to_rlvr_config(response_length=6, prompt_length=None).environment(
        "math_verify", env_config={"dataset": "arithmetic"})
    config.validate()
    expected = {**roll.settings, "response_length": 6, "prompt_length": None}
    assert {k: getattr(config, k) for k in expected} == expected


def test_the_example_files_load_with_nothing_unmapped():
    ppo, topr = load_roll_config(ROLL_PPO), load_roll_config(ROLL_TOPR)
    assert ppo.unmapped == topr.unmapped == ()
    assert (topr.settings["rl_loss_coef"], topr.settings["positive_loss_coef"],
            topr.settings["use_topr_neg_loss_coef"], topr.settings["loss_agg_mode"]) == (
        0.0, 1.0, 1.0, "seq-mean-token-mean")


def test_rolls_ppo_file_is_the_ppo_preset():
    preset = preset_settings("ppo")
    loaded = load_roll_config(ROLL_PPO).settings
    assert {k: loaded[k] for k in preset} == preset


def test_rolls_topr_doc_with_its_placeholders_fails_naming_the_first():
    text = ROLL_TOPR.read_text().replace("positive_loss_coef: 1.0", "positive_loss_coef: x_1")
    with pytest.raises(ValueError, match=r"positive_loss_coef='x_1' is invalid"):
        load_roll_config(text)


def test_a_roll_yaml_with_a_key_twice_fails_naming_it_and_both_lines():
    # ROLL's off-policy guide flattened: pg_variant in its global block and in actor_train's.
    text = "pg_variant: topr\nadv_estimator: reinforce\npg_variant: topr\n"
    with pytest.raises(ValueError, match=r"key 'pg_variant' is given twice in one mapping "
                                         r"\(lines 1 and 3\); keep one"):
        load_roll_config(text)


def test_a_roll_yaml_reads_1e_minus_6_as_a_number():
    assert load_roll_config("init_kl_coef: 1e-3\n").settings["init_kl_coef"] == 1e-3
