"""The keys `RLVRConfig` is given, told apart: our settings (fields.py), ROLL's aliases of them,
and RLlib's own, in `.training()`, `.env_runners()` and the flat dicts Tune passes to
`update_from_dict`; and the values of ours that RLlib's config state would drop.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from ray._common.deprecation import DEPRECATED_VALUE
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from rllib_llm.algorithm.config_rules.rllib_rules import RLLIB_REPLACED
from rllib_llm.algorithm.fields import ALIASES, FIELDS_BY_NAME, alias_note, did_you_mean

# The sections (fields.py) whose settings `env_runners()` takes besides RLlib's own; every
# setting is accepted by `training()`.
ENV_RUNNER_SECTIONS = ("engine",)


def split_training(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(our settings by field name, ROLL's aliases resolved; RLlib's `training()` arguments) of
    the keyword arguments of a `training()` call. An alias given with its field, or a key none of
    them knows, is a ValueError naming it."""
    ours, given_as, rllib = {}, {}, {}
    rllib_params = inspect.signature(AlgorithmConfig.training).parameters
    for key, value in kwargs.items():
        if key in ALIASES or key in FIELDS_BY_NAME:
            name = ALIASES.get(key, key)
            if name in given_as:  # an alias and its field: which one wins must not be order
                raise ValueError(
                    f"RLVRConfig.training() got {given_as[name]}={ours[name]!r} and "
                    f"{key}={value!r}, which both set {name} ("
                    f"{alias_note(given_as[name], key)}); set only {name}."
                )
            ours[name], given_as[name] = value, key
        elif key in rllib_params:
            rllib[key] = value
        else:
            hint = did_you_mean(key, [*FIELDS_BY_NAME, *ALIASES, *rllib_params])
            raise ValueError(
                f"RLVRConfig.training() got an unknown setting {key!r}.{hint} Settings are "
                "listed in rllib_llm/algorithm/fields.py and docs/SETTINGS.md."
            )
    return ours, rllib


def split_env_runners(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(our settings of ENV_RUNNER_SECTIONS, RLlib's `env_runners()` arguments) of the keyword
    arguments of an `env_runners()` call."""
    ours = {k: v for k, v in kwargs.items() if k in FIELDS_BY_NAME
            and FIELDS_BY_NAME[k].section in ENV_RUNNER_SECTIONS}
    return ours, {k: v for k, v in kwargs.items() if k not in ours}


def resolve_aliases(config_dict: dict[str, Any]) -> dict[str, Any]:
    """A flat config dict (Tune's) with ROLL's aliases replaced by our names. A dict made by
    `to_dict()` carries RLlib's num_epochs at its default next to ppo_epochs: that is no alias
    use. An alias and its field both set, to different values, is a ValueError."""
    config_dict = dict(config_dict)
    for alias, name in ALIASES.items():
        if alias not in config_dict:
            continue
        value = config_dict.pop(alias)
        if alias in RLLIB_REPLACED and value == RLLIB_REPLACED[alias][0]:
            continue
        given = config_dict.get(name, FIELDS_BY_NAME[name].default)
        if given not in (value, FIELDS_BY_NAME[name].default):
            raise ValueError(
                f"RLVRConfig: {alias}={value!r} and {name}={given!r} both set {name}; "
                f"set only {name}."
            )
        config_dict[name] = value
    return config_dict


def real_minus_ones(config: AlgorithmConfig) -> dict[str, Any]:
    """The attributes of `config` set to -1 as a real value. RLlib drops every attribute equal
    to -1 (its DEPRECATED_VALUE) from the state it copies configs with, so a field set to -1 came
    back as its default and passed validation; only RLlib's deprecated placeholders may go."""
    return {name: value for name, value in vars(config).items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)
            and value == DEPRECATED_VALUE and name not in _deprecated_attributes()}


@functools.cache
def _deprecated_attributes() -> frozenset[str]:
    """Attributes RLlib's AlgorithmConfig itself sets to DEPRECATED_VALUE (-1)."""
    return frozenset(k for k, v in vars(AlgorithmConfig()).items() if v == DEPRECATED_VALUE)
