"""`pip install .` (not editable) works: the wheel holds every package and the embedded models, and
an installation outside the repo trains.

The wheel is built from a copy of the source without network access (`--no-index`,
`--no-build-isolation`: the build uses this venv's setuptools) and installed into a fresh venv in
tmp_path. That venv sees this venv's dependencies (torch, Ray, ...) through a `.pth` file but not
its editable rllib_llm: a path listed in a `.pth` file joins `sys.path`, the `.pth` files inside it
(the editable install's finder) are not run.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Source folders that are packages; envs/ installs as rllib_llm.envs (pyproject's package-dir).
PACKAGE_ROOTS = {"rllib_llm": "rllib_llm", "envs": "rllib_llm/envs"}

# Run by the installed copy from a cwd outside the repo: where it was imported from, where the
# embedded model is, and two training iterations of a tiny batch.
TRAIN_TWO_ITERATIONS = """
import json, ray, rllib_llm
from rllib_llm.models import EMBEDDED_DIR
from rllib_llm.recipes.embedded import embedded_config
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
algo = embedded_config("topr", rollout_batch_size=2, num_return_sequences_in_group=2,
                       response_length=4).build_algo()
results = [algo.train() for _ in range(2)]
print(json.dumps({
    "module": rllib_llm.__file__,
    "embedded_dir": str(EMBEDDED_DIR),
    "weight_version": algo.env_runner_group.local_env_runner.engine.weight_version,
    "steps": results[-1]["env_runners"]["num_env_steps_sampled_lifetime"],
}))
algo.stop()
ray.shutdown()
"""


def copy_source(dest: Path) -> Path:
    """The repo without its venv, git data and build outputs (an in-tree build writes build/)."""
    ignore = shutil.ignore_patterns(".venv", ".git", "build", "dist", "runs", "*.egg-info",
                                    "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis")
    shutil.copytree(REPO, dest, ignore=ignore)
    return dest


def build_wheel(source: Path, out: Path) -> tuple[Path, str]:
    """`pip wheel` of `source` into `out`, offline; returns the wheel and the build's output."""
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-index",
         "--no-build-isolation", "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=300,
    )
    log = build.stdout + build.stderr
    assert build.returncode == 0, log[-4000:]
    (wheel,) = out.glob("rllib_llm-*.whl")
    return wheel, log


def source_packages() -> set[str]:
    """Every folder of the source tree with an `__init__.py`, as its path in the wheel."""
    found = set()
    for root, installed in PACKAGE_ROOTS.items():
        for init in (REPO / root).rglob("__init__.py"):
            sub = init.parent.relative_to(REPO / root).as_posix()
            found.add(installed if sub == "." else f"{installed}/{sub}")
    return found


def make_venv_without_rllib_llm(venv: Path) -> Path:
    """A venv whose imports fall back to this venv's site-packages; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
            *site.getsitepackages()}
    (Path(purelib) / "test_venv_dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")
    return python


@pytest.mark.slow
def test_wheel_installs_outside_the_repo_and_trains(tmp_path):
    wheel, log = build_wheel(copy_source(tmp_path / "src"), tmp_path / "wheels")
    # setuptools warns (and plans to stop shipping) folders missing from `packages`.
    assert "absent from the `packages` configuration" not in log
    assert "SetuptoolsDeprecationWarning" not in log

    names = set(zipfile.ZipFile(wheel).namelist())
    for package in source_packages():
        assert f"{package}/__init__.py" in names, package
    for checkpoint in ("embedded", "embedded_tool", "embedded_teacher", "embedded_reward"):
        shipped = {p.name for p in (REPO / "rllib_llm/models" / checkpoint).iterdir()}
        assert {n.rsplit("/", 1)[1] for n in names
                if n.startswith(f"rllib_llm/models/{checkpoint}/")} == shipped, checkpoint
    assert not any(n.startswith(("envs/", "tests/", "examples/")) for n in names)

    venv = tmp_path / "venv"
    python = make_venv_without_rllib_llm(venv)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, timeout=300)

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([str(python), "-c", TRAIN_TWO_ITERATIONS], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert Path(out["module"]).is_relative_to(venv), out
    assert Path(out["embedded_dir"]).is_relative_to(venv), out
    assert (Path(out["embedded_dir"]) / "model.safetensors").is_file()
    assert out["weight_version"] == 2  # two updates reached the sampler
    assert out["steps"] > 0
