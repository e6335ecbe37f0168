"""rllib_llm.core is pure torch: its modules import only torch, the standard library and each
other (never Ray, vLLM or transformers), and stay small."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

CORE = Path(__file__).parents[2] / "rllib_llm" / "core"
MODULES = sorted(CORE.glob("*.py"))
ALLOWED_THIRD_PARTY = {"torch"}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_core_module_imports_only_torch_and_the_standard_library(path):
    foreign = {
        root for root in imported_roots(path)
        if root not in sys.stdlib_module_names and root not in ALLOWED_THIRD_PARTY
        and root not in {"__future__", "rllib_llm"}
    }
    assert not foreign, f"{path.name} imports {sorted(foreign)}; core must stay pure torch"


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_core_module_imports_no_other_rllib_llm_package(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rllib_llm"):
            assert node.module.startswith("rllib_llm.core"), f"{path.name}: {node.module}"


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_core_module_is_small(path):
    assert len(path.read_text().splitlines()) < 600
