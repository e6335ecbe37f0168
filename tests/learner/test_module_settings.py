"""The RLModule is built from one frozen, typed value (ModuleSettings), not a dict of string
keys: the config makes it, RLlib carries it as a dict, the module reads it back whole."""

from __future__ import annotations

import dataclasses
import inspect

from rllib_llm.learner import module as module_file
from rllib_llm.learner.module_settings import CriticSpec, ModuleSettings
from rllib_llm.recipes.embedded import embedded_config


def test_the_config_builds_the_modules_settings_and_they_survive_rllibs_dict():
    spec = embedded_config("ppo", adv_estimator="gae", num_return_sequences_in_group=1,
                           lora_rank=4, max_tokens_per_micro_batch=256,
                           entropy_coef=0.01).get_default_rl_module_spec()
    settings = spec.model_config
    assert isinstance(settings, ModuleSettings)
    assert settings.critic == CriticSpec("embedded", shares_trunk=False)
    assert settings.lora["rank"] == 4 and settings.entropy_grad
    assert settings.micro_batch_tokens == 256
    # RLlib turns a dataclass into a dict and merges keys of its own in (spec._get_model_config).
    carried = {"max_seq_len": 20, **dataclasses.asdict(settings)}
    assert ModuleSettings.of(carried) == settings
    assert ModuleSettings.of(settings) is settings


def test_the_module_reads_no_string_keys():
    """Before, 15 keys were read with cfg.get("...") 21 times across the module."""
    source = inspect.getsource(module_file)
    assert "cfg.get(" not in source and "cfg[" not in source
    assert source.count("self.model_config") == 1  # in setup: ModuleSettings.of
