"""The rules across settings (rllib_llm/algorithm/config_rules/): one list says which exist and in
which order they run, and the first broken one in that order is the error a user sees."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from rllib_llm import RLVRConfig
from rllib_llm.algorithm import config_rules
from rllib_llm.algorithm.config_rules import CHECKS

# Rules that a listed rule (or the builder) calls with more than the config: they run where their
# caller does, so they are not listed themselves.
CALLED_BY_A_LISTED_RULE = {
    "check_lr",  # by RLVRConfig.validate (lr) and check_critic (critic_lr)
    "check_evaluation_config",  # by check_evaluation
    "check_evaluation_config_keys",  # by check_evaluation_config and RLVRConfig.evaluation()
    "check_held_out",  # by check_evaluation, RLVR and `rllib-llm eval`
}


def test_every_rule_of_the_package_is_listed_once_or_called_by_a_listed_one():
    listed = [check.__name__ for check in CHECKS]
    assert len(set(listed)) == len(listed), listed
    found = set()
    for info in pkgutil.iter_modules(config_rules.__path__):
        module = importlib.import_module(f"{config_rules.__name__}.{info.name}")
        found |= {name for name, f in inspect.getmembers(module, inspect.isfunction)
                  if name.startswith("check_") and f.__module__ == module.__name__}
    assert found - CALLED_BY_A_LISTED_RULE == set(listed)


@pytest.mark.parametrize("first,second,settings,message", [
    # check_tis_bounds before check_model_dtype
    ("check_tis_bounds", "check_model_dtype",
     dict(tis_lower_bound=2.0, tis_upper_bound=1.0, model_dtype="float16"), "lower <= upper"),
    # check_groups before check_dynamic_sampling
    ("check_groups", "check_dynamic_sampling",
     dict(adv_estimator="grpo", num_return_sequences_in_group=1, dynamic_sampling=True),
     "a group baseline needs >= 2 responses"),
])
def test_the_first_broken_rule_in_the_listed_order_is_raised(first, second, settings, message):
    listed = [check.__name__ for check in CHECKS]
    assert listed.index(first) < listed.index(second)
    with pytest.raises(ValueError, match=message):
        RLVRConfig().environment("math_verify").training(**settings).validate()
