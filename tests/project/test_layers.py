"""Layers import only downward (docs/DESIGN.md, "Layers"), checked for every module of every
folder: core, models, envs, exchange, then rollout and learner side by side (never each other:
what both need lives in `rllib_llm.exchange`), algorithm, outputs, recipes, and cli with the
package's own `__init__` on top. Within a layer, no import inside a function closes a cycle of
modules (a lazy import that only hides one)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "rllib_llm"

# The layers from the bottom up; a module may import its own layer's package and the layers
# below it, except that the two of one rank (rollout, learner) never import each other, while
# the top rank (cli and the package's __init__) may import each other.
RANKS = [("core",), ("models",), ("envs",), ("exchange",), ("rollout", "learner"),
         ("algorithm",), ("outputs",), ("recipes",), ("cli", "root")]
RANK = {layer: i for i, rank in enumerate(RANKS) for layer in rank}
TOP = RANKS[-1]


def layer_of(name: str) -> str:
    """The layer of an imported `rllib_llm.<name>`: a package folder, or else a root module (or
    a name the package's __init__ exports)."""
    return name if name in RANK else "root"


def allowed(layer: str) -> set[str]:
    """The layers a module of `layer` may import."""
    below = {other for other, rank in RANK.items() if rank < RANK[layer]}
    return below | ({*TOP} if layer in TOP else {layer})


def module_paths() -> list[tuple[str, Path]]:
    """(layer, path) of every module: each package folder of rllib_llm, the root modules, and
    envs/ (installed as rllib_llm.envs)."""
    found = [("envs", p) for p in sorted((ROOT / "envs").rglob("*.py"))]
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        found.append((rel.parts[0] if len(rel.parts) > 1 else "root", path))
    return found


MODULES = module_paths()


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


@pytest.mark.parametrize("layer,path", MODULES,
                         ids=[str(p.relative_to(ROOT)) for _, p in MODULES])
def test_module_imports_no_layer_beside_or_above_it(layer, path):
    crossing = {layer_of(name) for name in imported_packages(path)} - allowed(layer)
    assert not crossing, (
        f"{path.relative_to(ROOT)} (layer {layer}) imports layer(s) {sorted(crossing)}, beside "
        "or above it (docs/DESIGN.md, \"Layers\"); move what both need below both, e.g. to "
        "rllib_llm/exchange"
    )


def test_every_folder_is_a_layer():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(RANK), sorted(folders - set(RANK))


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


def module_name(path: Path) -> str:
    """The dotted name `path` installs as (envs/ is rllib_llm.envs; a package is its folder)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join(parts if parts[0] == "rllib_llm" else ["rllib_llm", *parts])


NAMES = {module_name(path): path for _, path in MODULES}


def module_imports(name: str) -> list[tuple[str, int, bool]]:
    """(imported rllib_llm module, line, inside a function) for each import of module `name`
    that runs (those under `if TYPE_CHECKING:` never do). `from p import x` imports module p.x
    if there is one, else p."""
    path = NAMES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []

    def visit(node, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                children, in_function = child.orelse, lazy
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                children, in_function = [child], True
            else:
                children, in_function = [child], lazy
            for c in children:
                if isinstance(c, ast.Import):
                    found.extend((a.name, c.lineno, in_function) for a in c.names)
                elif isinstance(c, ast.ImportFrom):
                    base = package.split(".")[:len(package.split(".")) - c.level + 1] \
                        if c.level else []
                    module = ".".join([*base, *([c.module] if c.module else [])])
                    found.extend((f"{module}.{a.name}" if f"{module}.{a.name}" in NAMES
                                  else module, c.lineno, in_function) for a in c.names)
                else:
                    visit(c, in_function)

    visit(ast.parse(path.read_text()), False)
    return [(target, line, lazy) for target, line, lazy in found if target in NAMES]


IMPORTS = {name: module_imports(name) for name in NAMES}


def reaches(start: str, goal: str) -> bool:
    """Whether importing `start` can import `goal`, through imports of either kind."""
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name == goal:
            return True
        if name not in seen:
            seen.add(name)
            todo += [target for target, _, _ in IMPORTS[name]]
    return False


def cycles_closed_lazily() -> list[tuple[str, int, str]]:
    """(a, line, b) for each import, inside a function of module a, of a module b that imports a
    back (directly or through others)."""
    return [(name, line, target) for name, found in IMPORTS.items()
            for target, line, lazy in found if lazy and target != name and reaches(target, name)]


# Cycles still closed by a lazy import, each with why it stays for now; the list only shrinks.
LAZY_CYCLES: set[str] = set()


def test_no_import_inside_a_function_closes_a_cycle():
    """A module that must import another inside a function because that one imports it back is
    one job in two modules, or a shared piece in the wrong one: join them (RLlib keeps PPOConfig
    and PPO in one module) or move what both need into a third (rollout/eval_shard.py)."""
    found = cycles_closed_lazily()
    assert {f"{a} -> {b}" for a, _, b in found} == LAZY_CYCLES, found


def test_the_cycle_check_sees_a_lazy_import_closing_a_cycle(monkeypatch):
    monkeypatch.setitem(IMPORTS, "rllib_llm.core", [*IMPORTS["rllib_llm.core"],
                                                    ("rllib_llm.cli", 1, True)])
    assert ("rllib_llm.core", 1, "rllib_llm.cli") in cycles_closed_lazily()


def column_literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string literal in a module that spells out a batch column or an
    episode key of exchange/columns.py, outside docstrings and UPPER_CASE constant definitions."""
    from rllib_llm.exchange import columns

    names = {v for k, v in vars(columns).items() if k.isupper() and isinstance(v, str)}
    tree = ast.parse(path.read_text())
    skip = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))  # a docstring
        if isinstance(node, ast.Assign) and all(
                isinstance(t, ast.Name) and t.id.isupper() for t in node.targets):
            skip |= {id(n) for n in ast.walk(node.value)}  # NAME = "..." defines a constant
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in skip]


CONTRACT_USERS = [p for layer, p in MODULES if layer in ("rollout", "learner")]


@pytest.mark.parametrize("path", CONTRACT_USERS,
                         ids=[str(p.relative_to(ROOT)) for p in CONTRACT_USERS])
def test_batch_columns_are_named_by_the_contract_not_spelled_out(path):
    """One batch contract (rllib_llm/exchange/columns.py): rollout and learner modules use its
    names, never the strings, so a renamed column cannot leave a reader behind."""
    assert not column_literals(path), column_literals(path)


def test_the_package_root_holds_no_module_but_its_init():
    """Every module belongs to a named layer (a folder); the root is no drawer."""
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py"]
