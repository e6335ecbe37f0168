"""The faults a user's run meets, each with what happens: a remote env runner killed between two
iterations makes the next ones wait for RLlib to restart it (or sample with the runners alive),
never fail while it can come back, and stop with one line naming it when it cannot; a bad data
file fails the build with its own message, in the driver, before any remote runner starts; a
learner killed in a data-parallel run stops training with one line naming it, its last checkpoint
intact."""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from types import SimpleNamespace

import pytest
import torch
from ray.exceptions import ActorDiedError
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_llm.algorithm.learner_faults import dead_learners, learners_died
from rllib_llm.algorithm.sync_sampling import sample_remote, share_out
from rllib_llm.recipes.embedded import embedded_config

# 2 prompts x 2 responses, 4 tokens: the cheapest iteration.
TINY = dict(rollout_batch_size=2, num_return_sequences_in_group=2, response_length=4)


# --- sharing out the prompts, by hand (a stand-in EnvRunnerGroup) ------------------------------
def test_prompts_are_shared_out_evenly_among_the_runners_alive():
    assert share_out(8, [1, 2]) == {1: 4, 2: 4}
    assert share_out(5, [1, 3]) == {1: 3, 3: 2}
    assert share_out(1, [1, 2]) == {1: 1}  # no runner is asked for 0 prompts


class Runner:
    def __init__(self, worker_index: int):
        self.worker_index = worker_index

    def sample(self, num_prompts: int) -> list[tuple[int, int]]:
        return [(self.worker_index, p) for p in range(num_prompts)]

    def get_metrics(self) -> dict:
        return {"runner": self.worker_index}


class Group:
    """EnvRunnerGroup's calls sample_remote makes; runner 2 dies in its first sample() call
    (RLlib then marks it unhealthy and returns only the others' results)."""

    def __init__(self):
        self.healthy, self.calls = [1, 2], []

    def num_remote_env_runners(self) -> int:
        return 2

    def healthy_env_runner_ids(self) -> list[int]:
        return list(self.healthy)

    def foreach_env_runner(self, fn, *, remote_worker_ids, local_env_runner):
        self.calls.append(list(remote_worker_ids))
        if len(self.calls) == 1:
            self.healthy.remove(2)
        return [fn(Runner(i)) for i in remote_worker_ids if i in self.healthy]


def test_the_prompts_of_a_runner_that_died_are_sampled_by_the_one_alive():
    group = Group()
    restores = []
    episodes, metrics, resampled = sample_remote(group, None, num_parts=2, part_size=3,
                                                 restore=lambda: restores.append(1),
                                                 timeout_s=0)
    assert group.calls == [[1, 2], [1]]
    assert sorted(episodes) == [(1, 0), (1, 0), (1, 1), (1, 1), (1, 2), (1, 2)]  # all 6 prompts
    assert metrics == [{"runner": 1}, {"runner": 1}] and resampled == 1 and restores == [1]


# --- killed runners on Ray -----------------------------------------------------------------------
pytestmark_ray = pytest.mark.usefixtures("ray_session")  # tests/conftest.py


def one_remote_runner(**fault_tolerance):
    return (embedded_config("topr", **TINY).env_runners(num_env_runners=1)
            .fault_tolerance(**fault_tolerance).build_algo())


@pytestmark_ray  # 17-52 s on 2 shared cores: a build, then the runner's restart
def test_a_plain_loop_survives_its_only_remote_runner_killed(caplog, kill_env_runner):
    """The README's `for _ in range(N): algo.train()` with the one remote runner killed."""
    algo = one_remote_runner()
    try:
        first = algo.train()
        kill_env_runner(algo, 1)
        with caplog.at_level(logging.WARNING, logger="rllib_llm"):
            results = [algo.train() for _ in range(3)]  # none raises: each waits for the runner
        steps = [r["env_runners"]["num_env_steps_sampled_lifetime"] for r in [first, *results]]
        assert steps == sorted(set(steps)), steps  # every iteration sampled and trained
        assert [r["training_iteration"] for r in results] == [2, 3, 4]
        assert results[-1]["fault_tolerance"]["num_healthy_workers"] == 1
        assert results[0]["fault_tolerance"]["num_remote_worker_restarts"] == 1
        assert sum(r["async_sampling"]["num_resampled_parts"] for r in results) == 1
        # The wait is said, with the runner's number.
        assert any(m.startswith("env runner 1 down") and "waiting" in m
                   for m in caplog.messages), caplog.messages
    finally:
        algo.stop()


@pytestmark_ray
def test_a_runner_that_does_not_come_back_stops_training_with_one_line_naming_it(
        kill_env_runner):
    algo = one_remote_runner(env_runner_restore_timeout_s=3.0)
    try:
        algo.train()
        kill_env_runner(algo, 1, restart=False)  # Ray does not restart it: it is gone for good
        start = time.monotonic()
        with pytest.raises(RuntimeError) as error:
            algo.train()
        assert time.monotonic() - start < 30
        message = str(error.value)
        assert "\n" not in message
        assert message.startswith("env runner 1 died; RLlib restored none within "
                                  "env_runner_restore_timeout_s=3.0 s"), message
    finally:
        algo.stop()


# --- a bad data file -----------------------------------------------------------------------------
def data_file_missing_an_answer(tmp_path) -> str:
    """20 problems; record 10 has no "answer"."""
    records = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(20)]
    del records[10]["answer"]
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


@pytestmark_ray
def test_a_bad_data_file_fails_the_build_with_its_own_message_before_a_remote_runner_starts(
        tmp_path):
    # A remote runner whose env fails dies in its constructor, and RLlib used to report only an
    # IndexError (looking for the dead runner's spaces) some 20 s later.
    config = (embedded_config("topr", **TINY)
              .environment("math_verify",
                           env_config={"dataset": data_file_missing_an_answer(tmp_path)})
              .env_runners(num_env_runners=1))
    with pytest.raises(ValueError, match=r"^answer_key='answer' is not a field of "
                                         r".*problems.jsonl \(.*problems.jsonl:11\)"):
        config.build_algo()


# --- a killed learner ----------------------------------------------------------------------------
class Learners:
    """LearnerGroup.foreach_learner's answers after an update that learner 1 died in: learner 0
    answers, learner 2 failed in its collective (a learner's own error), learner 1 is gone."""

    def foreach_learner(self, fn, *, healthy_only, timeout_seconds):
        assert not healthy_only  # RLlib has marked every learner that failed unhealthy
        answers = {0: None, 1: ActorDiedError(), 2: RuntimeError("Connection closed by peer")}
        return [SimpleNamespace(actor_id=i, get=lambda a=a: a) for i, a in answers.items()]


def test_only_the_learners_whose_actor_died_are_named():
    assert dead_learners(Learners()) == [1]
    assert str(learners_died([0, 2], 4)).startswith(
        "learners 0, 2 of 4 (numbered from 0) died during the update (Ray logged why); RLlib "
        "restarts no learner, and a data-parallel group cannot go on without one: resume")
    assert "RLlib restarts no learner: resume" in str(learners_died([0], 1))


def weights(algo) -> dict:
    return {k: torch.as_tensor(v).clone()
            for k, v in algo.learner_group.get_weights()[DEFAULT_MODULE_ID].items()}


@pytestmark_ray
@pytest.mark.slow  # ~40 s on 2 shared cores: two builds of a 2-learner DDP run
def test_a_learner_killed_in_a_data_parallel_run_stops_training_with_one_line_naming_it(
        tmp_path):
    """Learner 1 of a 2-learner DDP run killed between two iterations: the next train() stops
    with one line naming it (not the survivor's gloo error, which Ray raises first), and the
    checkpoint saved before restores with the weights trained."""
    algo = embedded_config("topr", **TINY).learners(num_learners=2).build_algo()
    try:
        initial = weights(algo)
        algo.train()
        algo.save_to_path(tmp_path)
        trained = weights(algo)
        assert any(not torch.equal(trained[k], initial[k]) for k in trained)  # it trained
        pids = {r.actor_id: r.get() for r in
                algo.learner_group.foreach_learner(lambda learner: os.getpid())}
        os.kill(pids[1], signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(RuntimeError) as error:
            algo.train()
        assert time.monotonic() - start < 30
    finally:
        algo.stop()
    message = str(error.value)
    assert "\n" not in message, message
    assert message.startswith("learner 1 of 2 (numbered from 0) died during the update"), message
    assert message.endswith("resume from the last checkpoint (rllib-llm train --resume RUN_DIR, "
                             "or Algorithm.restore)."), message
    resumed = Algorithm.from_checkpoint(tmp_path)
    try:
        for name, value in weights(resumed).items():
            assert torch.equal(value, trained[name]), name
    finally:
        resumed.stop()
