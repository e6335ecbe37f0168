"""Layers import only downward (docs/DESIGN.md, "Layers"): rollout and learning never import each
other, and what both need lives in `rllib_llm.exchange`, which imports neither."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "rllib_llm"

# package -> rllib_llm packages its modules must not import (not even lazily inside a function).
FORBIDDEN = {
    "rollout": {"learner", "algorithm"},
    "learner": {"rollout", "algorithm"},
    "exchange": {"rollout", "learner", "algorithm"},
}
MODULES = sorted(p for name in FORBIDDEN for p in (PACKAGE / name).glob("*.py"))


def imported_packages(path: Path) -> set[str]:
    """The `rllib_llm.<package>` names a module imports, absolute or relative, at any depth."""
    package = path.parent.name
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            # `from rllib_llm import learner` names the package in the imported names.
            modules = [node.module] if node.module != "rllib_llm" else \
                [f"rllib_llm.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            # Relative: level 1 is this package, level 2 is rllib_llm itself.
            base = ["rllib_llm", package][: 3 - node.level]
            tail = [node.module] if node.module else [alias.name for alias in node.names]
            modules = [".".join([*base, t]) for t in tail]
        else:
            continue
        found |= {m.split(".")[1] for m in modules if m.startswith("rllib_llm.")}
    return found


@pytest.mark.parametrize("path", MODULES, ids=[f"{p.parent.name}/{p.name}" for p in MODULES])
def test_module_imports_no_layer_beside_or_above_it(path):
    crossing = imported_packages(path) & FORBIDDEN[path.parent.name]
    assert not crossing, (
        f"rllib_llm/{path.parent.name}/{path.name} imports rllib_llm.{sorted(crossing)}; move "
        "what both layers need to rllib_llm/exchange"
    )


def test_the_check_sees_every_kind_of_import(tmp_path):
    """The parser catches absolute, `from rllib_llm import x`, relative and lazy imports."""
    module = tmp_path / "rollout" / "m.py"
    module.parent.mkdir()
    module.write_text(
        "import rllib_llm.learner.packing\n"
        "from rllib_llm import algorithm\n"
        "from ..exchange import columns\n"
        "def f():\n    from .engine import Response\n"
    )
    assert imported_packages(module) == {"learner", "algorithm", "exchange", "rollout"}
