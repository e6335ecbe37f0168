"""The rules of evaluation: RLlib's evaluation settings that RLVR honours or refuses, and the
`evaluation_config` overrides (known names, valid values, a valid evaluation config)."""

from __future__ import annotations

from typing import Any

from rllib_llm.algorithm.fields import (
    ALIASES,
    FIELDS_BY_NAME,
    did_you_mean,
    non_negative_int,
    rule_broken,
)


def check_evaluation(cfg) -> None:
    """RLlib's evaluation settings that RLVR.evaluate honours or rejects (see there), and the
    evaluation config: its overrides' names and values (by the same rules as the training
    config's, in their evaluation form: temperature 0 is greedy there)."""
    if cfg.in_evaluation:
        return
    interval = cfg.evaluation_interval
    if interval is not None and non_negative_int(interval) is not None:
        raise ValueError(
            f"RLVRConfig.evaluation_interval={interval!r} is invalid: it must be an integer >= 1 "
            "(evaluate every that many iterations), or 0 or None (never evaluate)."
        )
    check_evaluation_config(cfg)
    if cfg.evaluation_duration != 10 or cfg.evaluation_duration_unit != "episodes":
        raise ValueError(
            f"RLVRConfig.evaluation_duration={cfg.evaluation_duration!r} "
            f"(evaluation_duration_unit={cfg.evaluation_duration_unit!r}) is not used: RLVR "
            "evaluates a fixed set of held-out problems. Leave evaluation_duration at its "
            "default and set eval_num_problems (and eval_num_samples responses per problem)."
        )
    if cfg.evaluation_interval:  # evaluation will run: its problems must be held out
        from rllib_llm.algorithm.held_out_evaluation import check_held_out

        check_held_out(cfg, cfg.get_evaluation_config_object())


def check_evaluation_config(cfg) -> None:
    """`evaluation_config`'s overrides: known names, values by their evaluation rules, and the
    evaluation config they make valid as a whole (what building the algorithm would check)."""
    overrides = cfg.evaluation_config
    if overrides is None or (isinstance(overrides, dict) and not overrides):
        return
    if isinstance(overrides, dict):
        check_evaluation_config_keys(cfg, overrides)
        for key, value in overrides.items():
            name = ALIASES.get(key, key)
            why = rule_broken(name, value, in_evaluation=True) if name in FIELDS_BY_NAME else None
            if why is not None:
                raise ValueError(f"RLVRConfig.evaluation_config[{key!r}]={value!r} is invalid: "
                                 f"it {why}.")
    try:
        cfg.get_evaluation_config_object().validate()
    except ValueError as e:
        raise ValueError(f"RLVRConfig.evaluation_config makes an invalid evaluation config: "
                         f"{e}") from e


def check_evaluation_config_keys(cfg, overrides: dict[str, Any]) -> None:
    """Every key of an `evaluation_config` dict names a setting: one of ours (or an alias), or
    one of RLlib's config attributes (RLlib would set any name silently, and ignore it)."""
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
    from ray.tune.result import TRIAL_INFO

    known = vars(cfg)
    for key in overrides:
        if key in ALIASES or key in FIELDS_BY_NAME or key in (TRIAL_INFO, "multiagent") or \
                AlgorithmConfig._translate_special_keys(key, warn_deprecated=False) in known:
            continue
        names = list(dict.fromkeys([*FIELDS_BY_NAME, *ALIASES,
                                    *(k for k in known if not k.startswith("_"))]))
        raise ValueError(
            f"RLVRConfig.evaluation_config has an unknown setting {key!r}."
            f"{did_you_mean(key, names)} It takes "
            "RLVRConfig's settings (rllib_llm/algorithm/fields.py) and RLlib's."
        )
