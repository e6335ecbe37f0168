"""The examples type-check against RLVRConfig's stub (rllib_llm/algorithm/config.pyi, generated
from the fields), and a wrongly typed setting is a type error: mypy, configured in
pyproject.toml's [tool.mypy], as a user's editor or CI would run it on their code (issue 51)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    # One cache for both runs: the second reads the stub's analysis from it (~1 s instead of ~5).
    return tmp_path_factory.mktemp("mypy_cache")


def mypy(*paths: Path, cache_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(cache_dir), *map(str, paths)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_examples_type_check(cache_dir):
    examples = sorted((ROOT / "examples").glob("*.py"))
    assert examples
    result = mypy(*examples, cache_dir=cache_dir)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wrongly_typed_setting_is_a_type_error(tmp_path, cache_dir):
    user_code = tmp_path / "user_code.py"
    user_code.write_text(textwrap.dedent("""\
        from rllib_llm import RLVRConfig
        from rllib_llm.algorithm.config import RLVRConfig as Config

        RLVRConfig().training(rollout_batch_size="eight")
        Config().training(model_dtype="float64")
        RLVRConfig().training(rollout_batch_size=8, model_dtype="bfloat16", pg_variant="topr")
    """))
    result = mypy(user_code, cache_dir=cache_dir)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert result.returncode == 1, result.stdout + result.stderr
    assert [int(line.split(":")[1]) for line in errors] == [4, 5], result.stdout
    assert '"rollout_batch_size"' in errors[0] and 'expected "int"' in errors[0], errors[0]
    assert '"model_dtype"' in errors[1] and "'float64'" in errors[1], errors[1]
