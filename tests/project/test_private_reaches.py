"""Tests use public seams (docs/STYLE.md habit 15): a test that reaches into `x._name` of the
library, or of Ray's objects, is telling us which seam the library lacks.

Counted: each attribute access `x._name` in tests/ (read by the AST, so strings and comments do not
count) whose `_name` is defined in rllib_llm/ or envs/, or in Ray's RLlib (a private attribute of
the objects Ray hands back, such as `EnvRunnerGroup._worker_manager`). Not counted: dunders, names
the test module defines itself (its own helpers), and private names of other libraries (torch's
CPU feature probes, transformers' `config._attn_implementation`), which no seam of ours replaces.
"""
import ast
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The recorded bound: lower it when a reach goes, never raise it; add a public seam instead.
# The 3 left are the learner's stages that the `watch_learner` fixture (tests/conftest.py) wraps:
# RLlib's `Learner._update` (the batch after the learner connector) and our `_optimizer_step` and
# `_apply_step`. RLlib gives a learner no public hook between its connector and its optimizer;
# a hook of our own would be learner code that only tests call.
MAX_PRIVATE_REACHES = 3


def _private(name):
    return name.startswith("_") and not name.startswith("__")


def _own_names(tree):
    """Private names a test module defines: functions, classes, names, arguments, self.<attr>."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id == "self"):
            names.add(node.attr)
    return {n for n in names if _private(n)}


def _defined_in(folders, candidates):
    """Which of `candidates` the sources under `folders` define: a def, a class, an attribute
    set on self, or a module-level name. Text, not AST: it reads Ray's RLlib in well under 1 s."""
    if not candidates:
        return set()
    names = "|".join(sorted(map(re.escape, candidates)))
    pattern = re.compile(rf"(?:\bdef |\bclass |\bself\.|^)({names})\b", re.MULTILINE)
    found = set()
    for folder in folders:
        for path in folder.rglob("*.py"):
            found.update(pattern.findall(path.read_text(errors="replace")))
    return found


def _ray_rllib():
    # find_spec, not `import ray`: importing Ray costs seconds, reading its sources does not.
    return Path(importlib.util.find_spec("ray").origin).parent / "rllib"


def _attribute_reaches(source):
    """(line, attr, expression) of each `x._name` in `source` that the module does not define."""
    if not re.search(r"\._[A-Za-z]", source):
        return []
    tree = ast.parse(source)
    own = _own_names(tree)
    return [(node.lineno, node.attr, ast.unparse(node)) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own]


def private_reaches():
    """Every counted reach, as `path:line: expression`."""
    found = [(path.relative_to(ROOT), *reach)
             for path in sorted((ROOT / "tests").rglob("*.py"))
             for reach in _attribute_reaches(path.read_text())]
    candidates = {attr for _, _, attr, _ in found}
    library = _defined_in([ROOT / "rllib_llm", ROOT / "envs"], candidates)
    ray_names = _defined_in([_ray_rllib()], candidates - library)
    return [f"{path}:{line}: {expr}" for path, line, attr, expr in sorted(found)
            if attr in library | ray_names]


def test_private_reaches_do_not_grow():
    reaches = private_reaches()
    assert len(reaches) <= MAX_PRIVATE_REACHES, (
        f"{len(reaches)} private reaches in tests/, over the bound of {MAX_PRIVATE_REACHES}: "
        "use or add a public seam (a method with a docstring, or a helper in "
        "tests/helpers.py) instead of `x._name`:\n" + "\n".join(reaches))


def test_counter_counts_a_library_reach_and_not_own_helpers():
    source = "def _mine(): pass\nalgo._sample_rewarded()\nobj._mine\nx.__dict__\nt._no_such\n"
    reached = sorted(attr for _, attr, _ in _attribute_reaches(source))
    assert reached == ["_no_such", "_sample_rewarded"]
    assert _defined_in([ROOT / "rllib_llm"], {"_sample_rewarded", "_no_such"}) == {
        "_sample_rewarded"}
    assert _defined_in([_ray_rllib()], {"_worker_manager", "_no_such"}) == {"_worker_manager"}


if __name__ == "__main__":
    print("\n".join(private_reaches()))
