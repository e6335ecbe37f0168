"""The rules of evaluation: RLlib's evaluation settings that RLVR honours or refuses, the
`evaluation_config` overrides (known names, valid values, a valid evaluation config), and the
held-out problems (never the training ones; RLVR and `rllib-llm eval` check that too, for the
evaluation config they score with)."""

from __future__ import annotations

from pathlib import Path
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


def check_held_out(config, eval_config) -> None:
    """Raise ValueError if `eval_config`'s held-out problems are `config`'s training problems
    (the same data set and split; a local file has no splits)."""
    train = _problem_source(config.env_config)
    held_out = _problem_source({**eval_config.env_config, **eval_config.held_out_env_overrides()})
    if held_out != train:
        return
    dataset, split = train
    if split is None:
        raise ValueError(
            f"RLVRConfig.eval_dataset={eval_config.eval_dataset!r}: evaluation would score the "
            f"training problems, the local file {dataset!r} (a file has no splits). Set "
            "eval_dataset to a file of held-out problems."
        )
    raise ValueError(
        f"RLVRConfig.eval_split={eval_config.eval_split!r}: evaluation would score the training "
        f"problems, split {split!r} of {dataset!r}. Set eval_split to a held-out split (e.g. "
        "'test') or eval_dataset to a held-out data set."
    )


def _problem_source(env_config: dict[str, Any]) -> tuple[str, str | None]:
    """(data set, split) an env config reads problems from; split None for a local file."""
    from rllib_llm.envs.datasets import FILE_SUFFIXES
    from rllib_llm.envs.env_config import MathVerifyEnvConfig

    dataset = env_config.get("dataset", MathVerifyEnvConfig.dataset)
    if isinstance(dataset, str) and dataset.endswith(FILE_SUFFIXES):
        return str(Path(dataset).resolve()), None
    return dataset, env_config.get("split", MathVerifyEnvConfig.split)
