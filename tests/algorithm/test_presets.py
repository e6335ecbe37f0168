"""Named algorithm presets: each validates, says where it comes from, sets only fields that exist
(never a size), and is overridable field by field."""

from __future__ import annotations

import pytest

from rllib_llm import RLVRConfig
from rllib_llm.algorithm.fields import FIELDS_BY_NAME
from rllib_llm.algorithm.presets import PRESETS, preset_settings, presets_markdown
from rllib_llm.recipes.embedded import EMBEDDED_RESPONSES, embedded_preset_config

SIZES = {"lr", "critic_lr", "rollout_batch_size", "prompt_length", "response_length",
         "mini_batch_size", "micro_batch_size"}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_validates_and_sets_only_algorithm_fields(name):
    preset = PRESETS[name]
    assert set(preset.settings) <= set(FIELDS_BY_NAME) and not set(preset.settings) & SIZES
    assert "arXiv" in preset.source or "ROLL" in preset.source
    config = RLVRConfig.preset(name)
    config.validate()
    for field, value in preset.settings.items():
        assert getattr(config, field) == value, field
    embedded = embedded_preset_config(name)
    embedded.validate()
    assert embedded.rollout_batch_size * embedded.num_return_sequences_in_group == \
        EMBEDDED_RESPONSES


def test_the_critic_presets_carry_their_papers_settings():
    vc_ppo, vapo = preset_settings("vc_ppo"), preset_settings("vapo")
    assert {k: v for k, v in vc_ppo.items() if k not in ("value_pretrain_steps", "critic_lambd")} \
        == preset_settings("ppo")
    assert (vc_ppo["value_pretrain_steps"], vc_ppo["critic_lambd"], vc_ppo["lambd"]) == \
        (50, 1.0, 0.95)
    assert (vapo["length_adaptive_alpha"], vapo["pg_clip_low"], vapo["pg_clip_high"],
            vapo["loss_agg_mode"], vapo["positive_nll_coef"],
            vapo["num_return_sequences_in_group"]) == (0.05, 0.2, 0.28, "token-mean", 0.1, 16)
    ppo = preset_settings("ppo")
    assert (ppo["adv_estimator"], ppo["dual_clip_loss"], ppo["kl_loss_coef"],
            ppo["advantage_clip"], ppo["num_return_sequences_in_group"]) == \
        ("gae", True, 0.001, 2.0, 1)


def test_the_dapo_preset_carries_dynamic_sampling_and_overlong_shaping():
    dapo = RLVRConfig.preset("dapo").training(response_length=20480)
    assert dapo.dynamic_sampling and dapo.resolved_overlong_buffer_len == 4096
    assert dapo.overlong_penalty_factor == 1.0 and not dapo.mask_truncated_completions
    assert "left to you" not in PRESETS["dapo"].doc


def test_overrides_win_field_by_field_and_are_validated():
    config = RLVRConfig.preset("vapo", length_adaptive_alpha=None, lr=2e-6)
    assert config.length_adaptive_alpha is None and config.lr == 2e-6
    assert config.critic_lambd == 1.0  # the rest of the preset stays
    with pytest.raises(ValueError, match="unknown setting 'lambda'.*Did you mean lambd"):
        RLVRConfig.preset("ppo", **{"lambda": 0.9})
    with pytest.raises(ValueError, match="uses no critic"):
        RLVRConfig.preset("grpo", value_pretrain_steps=5).validate()


def test_an_unknown_preset_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown preset 'ppo2'; presets: dapo, dr_grpo, grpo, "
                                         "ppo, reinforce_pp, rloo, topr, vapo, vc_ppo"):
        RLVRConfig.preset("ppo2")


def test_the_presets_table_lists_every_preset_with_its_source():
    table = presets_markdown()
    for preset in PRESETS.values():
        assert f"| `{preset.name}` | {preset.source} |" in table
