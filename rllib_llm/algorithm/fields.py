"""Every RLVR training setting, declared once: name, default, documentation and rule.

This table is the single source for `RLVRConfig`'s attributes, its `validate()`, the settings
reference (docs/SETTINGS.md) and the CLI's `--help`. Names and defaults follow ROLL's PPO-family
`RLVRConfig` and the papers each doc names; where we differ from ROLL the doc says why.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from rllib_llm.algorithm.field_rules import (
    DEFAULT_GENERATE_TOKENS,
    DEFAULT_MICRO_BATCH_TOKENS,
    CoreNames,
    Field,
    OneOf,
    OrNone,
    Rule,
    annotation_of,
    boolean,
    boolean_or_auto,
    core_names,
    core_tuple,
    is_number,
    kl_kind,
    non_negative,
    non_negative_int,
    number_rule,
    one_of,
    open_unit_interval,
    optional,
    overlong_buffer,
    positive,
    positive_int,
    text,
    token_budget,
    training_temperature,
    unit_interval,
)
from rllib_llm.algorithm.fields_evaluation import EVALUATION_FIELDS
from rllib_llm.algorithm.fields_learning import LEARNING_FIELDS
from rllib_llm.algorithm.fields_model import MODEL_FIELDS
from rllib_llm.algorithm.fields_rewards import REWARD_FIELDS
from rllib_llm.algorithm.fields_sampling import SAMPLING_FIELDS

# The machinery is declared in field_rules.py and re-exported, so `from rllib_llm.algorithm.fields
# import positive` keeps working wherever a setting is declared outside these modules (the CLI's).
__all__ = [
    "FIELDS",
    "FIELDS_BY_NAME",
    "ALIASES",
    "ALIAS_ORIGINS",
    "USUAL_NAMES",
    "close_names",
    "did_you_mean",
    "alias_note",
    "rule_broken",
    "changed_fields",
    "refuse_changed",
    "check_field",
    "SECTIONS",
    "fields_by_section",
    "reference_markdown",
    "CoreNames",
    "DEFAULT_GENERATE_TOKENS",
    "DEFAULT_MICRO_BATCH_TOKENS",
    "Field",
    "OneOf",
    "OrNone",
    "Rule",
    "annotation_of",
    "boolean",
    "boolean_or_auto",
    "core_names",
    "core_tuple",
    "is_number",
    "kl_kind",
    "non_negative",
    "non_negative_int",
    "number_rule",
    "one_of",
    "open_unit_interval",
    "optional",
    "overlong_buffer",
    "positive",
    "positive_int",
    "text",
    "token_budget",
    "training_temperature",
    "unit_interval",
]

# Every setting, section by section (each section's module declares its own).
FIELDS: tuple[Field, ...] = (
    *MODEL_FIELDS,
    *SAMPLING_FIELDS,
    *LEARNING_FIELDS,
    *REWARD_FIELDS,
    *EVALUATION_FIELDS,
)

FIELDS_BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}

# ROLL's names (and RLlib's num_epochs) that map onto ours: alias -> our field.
ALIASES: dict[str, str] = {
    "max_new_tokens": "response_length",
    "postive_loss_coef": "positive_loss_coef",  # ROLL's own spelling
    "num_epochs": "ppo_epochs",  # RLlib's name: passes over the batch, the same meaning
}
# Whose name each alias is, for messages.
ALIAS_ORIGINS: dict[str, str] = {
    "max_new_tokens": "ROLL's name", "postive_loss_coef": "ROLL's spelling",
    "num_epochs": "RLlib's name",
}


# What other libraries call a setting, for the did-you-mean hint only (not accepted: each would
# be a second name to document). In letters "learning_rat" is closer to learner_strategy than
# to lr; through "learning_rate" it finds lr.
USUAL_NAMES: dict[str, str] = {
    "learning_rate": "lr",  # transformers' TrainingArguments, TRL
    "clip_ratio": "pg_clip",  # verl
    "clip_range": "pg_clip",  # Stable-Baselines3
    "clip_coef": "pg_clip",  # CleanRL
    "cliprange": "pg_clip",  # TRL's PPOTrainer
    "ent_coef": "entropy_coef",  # CleanRL, Stable-Baselines3
    "num_generations": "num_return_sequences_in_group",  # TRL's GRPOTrainer
    "max_completion_length": "response_length",  # TRL
    "max_prompt_length": "prompt_length",  # TRL
}


def close_names(key: str, known: Iterable[str]) -> list[str]:
    """Up to three names of `known` that `key` may have meant, best first: close in spelling to
    the name, or to another library's name for it (USUAL_NAMES)."""
    known = list(dict.fromkeys(known))
    usual = {name: meant for name, meant in USUAL_NAMES.items() if meant in known}
    matches = difflib.get_close_matches(key, [*known, *usual], n=6)
    return list(dict.fromkeys(usual.get(m, m) for m in matches))[:3]


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """" Did you mean a, b?" for `close_names`, or "" when none is close."""
    close = close_names(key, known)
    return f" Did you mean {', '.join(close)}?" if close else ""


def alias_note(*keys: str) -> str:
    """'num_epochs is RLlib's name for ppo_epochs' for the aliases among `keys` (one setting's
    names), for messages about an alias given with its field."""
    return "; ".join(f"{k} is {ALIAS_ORIGINS[k]} for {ALIASES[k]}" for k in keys if k in ALIASES)


def rule_broken(name: str, value: Any, *, in_evaluation: bool = False) -> str | None:
    """The rule of field `name` in words if `value` breaks it, else None (the field's evaluation
    rule, if it has one, in an evaluation config)."""
    field = FIELDS_BY_NAME[name]
    rule = field.eval_rule if in_evaluation and field.eval_rule else field.rule
    return rule(value) if rule else None


def changed_fields(config: Any, names: tuple[str, ...]) -> list[str]:
    """`name=value` of each of `names` whose value on `config` is not the field's default (for
    messages about settings that would do nothing)."""
    return [f"{name}={getattr(config, name)!r}" for name in names
            if getattr(config, name) != FIELDS_BY_NAME[name].default]


def refuse_changed(config: Any, names: tuple[str, ...], why: str) -> None:
    """Raise ValueError "RLVRConfig: <name=value, ...> <why>" if any of `names` is not at its
    default: the one form of "these settings would do nothing here"."""
    changed = changed_fields(config, names)
    if changed:
        raise ValueError(f"RLVRConfig: {', '.join(changed)} {why}")


def check_field(name: str, value: Any, *, in_evaluation: bool = False) -> None:
    """Raise ValueError naming the field, the value and the rule, if `value` breaks the rule."""
    why = rule_broken(name, value, in_evaluation=in_evaluation)
    if why is not None:
        raise ValueError(f"RLVRConfig.{name}={value!r} is invalid: it {why}.")


# The sections settings are grouped under for readers (docs/SETTINGS.md, `--help`), in
# order: each Field's `section` is one of these keys.
SECTIONS = {
    "model": "Model",
    "sampling": "Sampling: prompts, responses per prompt, lengths, temperature",
    "engine": "Rollout engine (torch or vLLM), its memory, and the weight sync to it",
    "processes": "Processes: threads",
    "off-policy": "Off-policy: recomputed log-probs, rollout importance sampling, asynchrony",
    "optimisation": "Optimisation: epochs, mini- and micro-batches, memory",
    "learners": "Learners: DeepSpeed ZeRO",
    "loss": "Policy-gradient loss",
    "variant parameters": "Per-variant parameters of the policy-gradient loss",
    "kl": "KL to the reference model",
    "distillation": "On-policy distillation from a teacher model",
    "reward model": "Reward models and LLM judges",
    "advantage": "Rewards and advantages",
    "critic": "The critic (adv_estimator='gae'; with any other estimator these keep defaults)",
    "evaluation": "Evaluation on held-out problems",
}


def fields_by_section() -> dict[str, list[Field]]:
    """Section title -> its fields, sections in `SECTIONS` order, fields in declaration order."""
    return {title: [f for f in FIELDS if f.section == key] for key, title in SECTIONS.items()}


def reference_markdown() -> str:
    """The settings reference, one Markdown table per section (for docs/SETTINGS.md)."""
    parts = []
    for title, fields in fields_by_section().items():
        rows = [f"#### {title}", "", "| field | default | meaning |", "|---|---|---|"]
        rows += [f"| `{f.name}` | `{f.default!r}` | {f.doc} |" for f in fields]
        parts.append("\n".join(rows))
    return "\n\n".join(parts)
