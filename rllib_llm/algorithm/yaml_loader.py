"""The one YAML reader of config files (`rllib-llm train` / `sweep` files, ROLL files, `--set`
values, a run directory's settings): PyYAML's safe loader with two changes.

- YAML 1.2's floats: `1e-5` is a number, as every user means it (YAML 1.1 reads a string).
- A key given twice in one mapping is an error naming the key and both lines (PyYAML keeps the
  last silently, so which value counts would depend on the order of lines).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.YAMLError, ValueError):
    """A mapping that gives one key twice."""


class ConfigLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2's floats that refuses a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            first_line: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:  # `<<: *anchor` overrides on purpose
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    seen = first_line.get(key)
                except TypeError:  # an unhashable key: the base class says what is wrong
                    continue
                if seen is not None:
                    raise DuplicateKeyError(
                        f"key {key!r} is given twice in one mapping (lines {seen} and {line}); "
                        "keep one")
                first_line[key] = line
        return super().construct_mapping(node, deep=deep)


ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                   |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                   |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                   |[-+]?\.(?:inf|Inf|INF)
                   |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)


def parse_yaml(text: str) -> Any:
    """`text` read with ConfigLoader (raises yaml.YAMLError; DuplicateKeyError for a key given
    twice, which is also a ValueError)."""
    return yaml.load(text, Loader=ConfigLoader)  # noqa: S506 (a SafeLoader subclass)
