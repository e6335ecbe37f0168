"""`RLVRConfig`'s settings as types people's tools can see, generated from `fields.FIELDS`.

The settings are set on each config by a loop over `FIELDS` (one declaration each), which no
IDE, type checker or `help()` can follow. From the same table this module makes:
- the class's `__annotations__` (`typing.get_type_hints(RLVRConfig)` names every setting);
- a "Settings" section of its docstring (what `help(RLVRConfig)` shows);
- `config.pyi`, the stub IDEs and mypy read: each setting as a typed attribute with its doc, and
  `training()` / `env_runners()` with every setting they take as a typed keyword.

`python -m rllib_llm.algorithm.config_types` writes the stub; a test checks it is up to date.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from rllib_llm.algorithm.fields import FIELDS, Field, annotation_of

STUB_PATH = Path(__file__).with_name("config.pyi")


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


def render_stub(env_runner_sections: tuple[str, ...]) -> str:
    """The text of config.pyi."""
    attributes = []
    for f in FIELDS:
        attributes.append(f"    {f.name}: {annotation_of(f)}")
        doc = textwrap.wrap(f'"""{_docstring_text(f)}"""', width=96)
        attributes += [f"    {line}" for line in doc]
    engine = [f for f in FIELDS if f.section in env_runner_sections]
    return "\n".join([
        "# Generated from rllib_llm/algorithm/fields.py by",
        "# `python -m rllib_llm.algorithm.config_types`: do not edit.",
        "# tests/algorithm/test_config_types.py checks that it is up to date.",
        "from typing import Any", "",
        "from ray.rllib.algorithms.algorithm_config import AlgorithmConfig", "",
        "ENV_RUNNER_SECTIONS: tuple[str, ...]", "",
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
    keywords = [f"        {f.name}: {annotation_of(f)} = ...," for f in fields]
    return [f"    def {name}(", "        self,", "        *,", *keywords,
            "        **kwargs: Any,", "    ) -> RLVRConfig: ..."]


def _first_sentence(doc: str) -> str:
    text = " ".join(doc.split())
    end = text.find(". ")
    return text if end < 0 else text[:end + 1]


def _docstring_text(field: Field) -> str:
    """The field's doc as a docstring body (no closing quotes or backslashes inside)."""
    return _first_sentence(field.doc).replace("\\", "\\\\").replace('"""', "'''")


if __name__ == "__main__":
    from rllib_llm.algorithm.config import ENV_RUNNER_SECTIONS

    STUB_PATH.write_text(render_stub(ENV_RUNNER_SECTIONS))
    print(f"wrote {STUB_PATH}")
