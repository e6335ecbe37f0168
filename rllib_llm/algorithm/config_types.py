"""`RLVRConfig`'s settings as types people's tools can see, generated from `fields.FIELDS`.

The settings are set on each config by a loop over `FIELDS` (one declaration each), which no
IDE, type checker or `help()` can follow. From the same table this module makes:
- the class's `__annotations__` (`typing.get_type_hints(RLVRConfig)` names every setting);
- a "Settings" section of its docstring (what `help(RLVRConfig)` shows);
- `config.pyi`, the stub IDEs and mypy read: each setting as a typed attribute with its doc, and
  `training()` / `env_runners()` with every setting they take as a typed keyword. A setting with
  a closed set of choices is a `Literal` of the choices its rule declares (`fields.OneOf`, so a
  choice added there reaches the stub when it is regenerated); one named from a core registry is
  the core's `Literal` of the built-in names, or any string (users register their own).

`python -m rllib_llm.algorithm.config_types` writes the stub; a test checks it is up to date.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from rllib_llm.algorithm.fields import FIELDS, CoreNames, Field, OneOf, OrNone, annotation_of

STUB_PATH = Path(__file__).with_name("config.pyi")

# The `Literal` rllib_llm.core declares for the built-in names of a registry kind.
CORE_LITERALS = {"pg_variant": "PgVariant", "adv_estimator": "AdvEstimator",
                 "loss_agg_mode": "AggMode", "norm_type": "NormType"}
# Abbreviations whose full stop ends no sentence.
ABBREVIATIONS = ("e.g.", "i.e.", "vs.", "cf.", "etc.")


def annotations() -> dict[str, str]:
    """Setting name -> its type as source (for `RLVRConfig.__annotations__`)."""
    return {f.name: annotation_of(f) for f in FIELDS}


def settings_doc() -> str:
    """The docstring section listing every setting: name, type, default, first sentence."""
    lines = ["Settings (declared in rllib_llm/algorithm/fields.py; set with .training(), the",
             "engine's also with .env_runners()):", ""]
    for f in FIELDS:
        lines.append(f"    {f.name}: {annotation_of(f)} = {f.default!r}")
        lines.append(textwrap.fill(_first_sentence(f.doc), width=92, initial_indent=" " * 8,
                                   subsequent_indent=" " * 8))
    return "\n".join(lines)


def choices(field: Field) -> tuple[Any, ...] | None:
    """The closed set of values `field`'s rule allows besides None, or None where the set is
    open (a core registry) or the rule lists none."""
    rule, _ = _choice_rule(field)
    if rule is None or isinstance(rule.names, CoreNames):
        return None
    return rule.valid()


def stub_annotation(field: Field) -> str:
    """`field`'s type in the stub: a `Literal` of its choices where they are a closed set, the
    core's `Literal` or any string for a registry's names, else `annotation_of`."""
    rule, allows_none = _choice_rule(field)
    if rule is None:
        return annotation_of(field)
    if isinstance(rule.names, CoreNames):
        core_literal = CORE_LITERALS.get(rule.names.kind)
        base = "str" if core_literal is None else f"{core_literal} | str"
    else:
        base = literal_alias(field)
    return f"{base} | None" if allows_none else base


def literal_alias(field: Field) -> str:
    """The stub's name for the `Literal` of `field`'s choices (model_dtype: `_ModelDtype`)."""
    return "_" + "".join(part.capitalize() for part in field.name.split("_"))


def _literal_aliases() -> list[str]:
    """The stub's `_Name = Literal[...]` line per field with closed choices, wrapped at 100."""
    lines = []
    for f in FIELDS:
        values = choices(f)
        if values is None:
            continue
        line = f"{literal_alias(f)} = Literal[{', '.join(map(repr, values))}]"
        if len(line) > 100:
            items = textwrap.wrap(", ".join(map(repr, values)) + "]", width=96)
            line = "\n".join([f"{literal_alias(f)} = Literal[", *(f"    {i}" for i in items)])
        lines.append(line)
    return lines


def _choice_rule(field: Field) -> tuple[OneOf | None, bool]:
    """(`field`'s `OneOf` rule, looking through `optional`, or None; whether None is allowed)."""
    rule, allows_none = field.rule, False
    if isinstance(rule, OrNone):
        rule, allows_none = rule.rule, True
    return (rule if isinstance(rule, OneOf) else None), allows_none


def render_stub(env_runner_sections: tuple[str, ...]) -> str:
    """The text of config.pyi."""
    attributes = []
    for f in FIELDS:
        attributes.append(f"    {f.name}: {stub_annotation(f)}")
        doc = textwrap.wrap(f'"""{_docstring_text(f)}"""', width=96)
        attributes += [f"    {line}" for line in doc]
    engine = [f for f in FIELDS if f.section in env_runner_sections]
    return "\n".join([
        "# Generated from rllib_llm/algorithm/fields.py by",
        "# `python -m rllib_llm.algorithm.config_types`: do not edit.",
        "# tests/algorithm/test_config_types.py checks that it is up to date.",
        "from typing import Any, Literal", "",
        "from ray.rllib.algorithms.algorithm_config import AlgorithmConfig", "",
        f"from rllib_llm.core import {', '.join(sorted(CORE_LITERALS.values()))}", "",
        "ENV_RUNNER_SECTIONS: tuple[str, ...]", "",
        "# Each setting's closed set of choices (its rule's, in fields.py).",
        *_literal_aliases(), "",
        "class RLVRConfig(AlgorithmConfig):", *attributes,
        "    user_registrations: dict[str, Any]",
        "    def __init__(self, algo_class: Any = None) -> None: ...",
        "    @classmethod",
        "    def preset(cls, name: str, **overrides: Any) -> RLVRConfig: ...",
        *_method("training", FIELDS), *_method("env_runners", engine),
        "    def evaluation(self, **kwargs: Any) -> RLVRConfig: ...",
        "    # The rest of RLVRConfig's methods, untyped here.",
        "    def __getattr__(self, name: str) -> Any: ...", ""])


def _method(name: str, fields) -> list[str]:
    """A builder method taking `fields` as typed keywords (and RLlib's own as **kwargs)."""
    keywords = [f"        {f.name}: {stub_annotation(f)} = ...," for f in fields]
    return [f"    def {name}(", "        self,", "        *,", *keywords,
            "        **kwargs: Any,", "    ) -> RLVRConfig: ..."]


def _first_sentence(doc: str) -> str:
    """`doc`'s first sentence: up to the first full stop and space that ends no abbreviation."""
    text = " ".join(doc.split())
    end = text.find(". ")
    while end >= 0 and text[:end + 1].endswith(ABBREVIATIONS):
        end = text.find(". ", end + 1)
    return text if end < 0 else text[:end + 1]


def _docstring_text(field: Field) -> str:
    """The field's doc as a docstring body (no closing quotes or backslashes inside)."""
    return _first_sentence(field.doc).replace("\\", "\\\\").replace('"""', "'''")


if __name__ == "__main__":
    from rllib_llm.algorithm.config_keys import ENV_RUNNER_SECTIONS

    STUB_PATH.write_text(render_stub(ENV_RUNNER_SECTIONS))
    print(f"wrote {STUB_PATH}")
