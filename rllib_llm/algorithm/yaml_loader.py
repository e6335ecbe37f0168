"""The one YAML reader of config files (`rllib-llm train` / `sweep` files, ROLL files, `--set`
values, a run directory's settings): PyYAML's safe loader with two changes.

- YAML 1.2's floats: `1e-5` is a number, as every user means it (YAML 1.1 reads a string).
- A key given twice in one mapping is an error naming the key and both lines (PyYAML keeps the
  last silently, so which value counts would depend on the order of lines).
- A document whose aliases (`*name`) expand it past `MAX_EXPANDED_VALUES` values, or make a
  value hold itself, is refused before any object is built: PyYAML shares an alias's object,
  so nine lines of `&a [*b, *b, ...]` load in microseconds, and then whatever walks the values
  (a repr, a JSON dump, Ray's config copies) meets 10^9 of them and runs out of memory.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_MERGE_TAG = "tag:yaml.org,2002:merge"


# No config file comes near this (the largest example holds ~200 values); an alias bomb passes it
# at its third level.
MAX_EXPANDED_VALUES = 10_000


class DuplicateKeyError(yaml.YAMLError, ValueError):
    """A mapping that gives one key twice."""


class AliasExpansionError(yaml.YAMLError, ValueError):
    """A document that its aliases expand past `MAX_EXPANDED_VALUES` values, or into itself."""


class NestingError(yaml.YAMLError, ValueError):
    """A document nested deeper than PyYAML's recursive reader can go."""


class ConfigLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2's floats that refuses a key given twice in one mapping, and a
    document its aliases expand past `MAX_EXPANDED_VALUES` values or into itself."""

    def get_single_node(self) -> yaml.Node | None:
        # Checked on the composed nodes, where an alias is one shared node: before construction.
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node)
        return node

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


def _check_expansion(root: yaml.Node) -> None:
    """Raise AliasExpansionError if `root`, its aliases written out, holds more than
    `MAX_EXPANDED_VALUES` nodes, or holds itself. Each shared node is counted once (its size
    memoised), and iteratively: the walk is linear in the text, whatever the nesting."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # entered, children not all counted: a way back is a cycle
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            if sizes[key] > MAX_EXPANDED_VALUES:
                raise AliasExpansionError(
                    f"its aliases (*name) expand it to more than {MAX_EXPANDED_VALUES} values "
                    f"(at line {node.start_mark.line + 1}): an alias bomb, or a mistake; write "
                    "the values out, or refer to fewer")
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise AliasExpansionError(
                f"the value at line {node.start_mark.line + 1} holds itself through an alias "
                "(*name inside the value &name anchors); a setting cannot contain itself: write "
                "the value out")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def parse_yaml(text: str) -> Any:
    """`text` read with ConfigLoader (raises yaml.YAMLError; DuplicateKeyError for a key given
    twice, AliasExpansionError for an alias bomb, NestingError for a value nested too deep:
    each also a ValueError)."""
    try:
        return yaml.load(text, Loader=ConfigLoader)  # noqa: S506 (a SafeLoader subclass)
    except RecursionError:
        # PyYAML composes and constructs nested values recursively: `[[[[...]]]]` a few
        # thousand deep ends in Python's recursion limit.
        raise NestingError("its values are nested too deep to read (thousands of levels of "
                           "[...] or {...}); no setting nests that deep: fix the file") from None
