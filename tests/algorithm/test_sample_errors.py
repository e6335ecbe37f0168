"""An error raised inside a remote runner's sample() stops training at once with its cause, where
RLlib used to restart the runner after a 60 s delay, three times over (sample_errors.py); a runner
that dies is still restarted and its prompts sampled again (test_faults.py)."""

from __future__ import annotations

import time

import pytest
import ray

from rllib_llm.algorithm.sample_errors import SampleFailedError
from rllib_llm.algorithm.sync_sampling import sample_remote
from rllib_llm.recipes.embedded import embedded_config

MESSAGE = ("env runner 2's sample() raised ValueError: the verifier cannot read 'x' (its "
           "traceback is in that runner's log); an error in sample() itself, in the env, its "
           "data or its verifier, is the same on every try, so training stops here instead of "
           "restarting the runner")


class Runner:
    def __init__(self, worker_index: int):
        self.worker_index = worker_index

    def sample(self, num_prompts: int) -> list[int]:
        if self.worker_index == 2:
            raise ValueError("the verifier cannot read 'x'\n(a second line)")
        return list(range(num_prompts))

    def get_metrics(self) -> dict:
        return {}


class Group:
    """EnvRunnerGroup's calls sample_remote makes, both runners alive."""

    def __init__(self):
        self.calls = []

    def num_remote_env_runners(self) -> int:
        return 2

    def healthy_env_runner_ids(self) -> list[int]:
        return [1, 2]

    def foreach_env_runner(self, fn, *, remote_worker_ids, local_env_runner):
        self.calls.append(list(remote_worker_ids))
        return [fn(Runner(i)) for i in remote_worker_ids]


def test_an_error_in_sample_stops_at_once_naming_the_runner_and_the_cause():
    group, restores = Group(), []
    with pytest.raises(SampleFailedError) as error:
        sample_remote(group, None, num_parts=2, part_size=3,
                      restore=lambda: restores.append(1), timeout_s=0)
    assert str(error.value) == MESSAGE
    assert group.calls == [[1, 2]] and restores == []  # not sampled again, nothing restored


def test_an_error_in_evaluate_is_named_as_such():
    from rllib_llm.algorithm.sample_errors import SampleError, raise_if_failed

    raise_if_failed([{"shard": 0}])  # results: nothing to raise
    with pytest.raises(SampleFailedError) as error:
        raise_if_failed([{"shard": 0}, SampleError(3, "KeyError: 'x'", "evaluate()")])
    assert str(error.value) == (
        "env runner 3's evaluate() raised KeyError: 'x' (its traceback is in that runner's "
        "log); an error in evaluate() itself, in the env, its data or its verifier, is the same "
        "on every try, so training stops here instead of restarting the runner")


@pytest.mark.slow  # a build with one remote runner: 15-50 s on 2 shared cores
@pytest.mark.usefixtures("ray_session")
def test_a_remote_runner_whose_sample_raises_stops_train_in_seconds(env_runner_actor):
    algo = (embedded_config("topr", rollout_batch_size=2, num_return_sequences_in_group=2,
                            response_length=4)
            .env_runners(num_env_runners=1).build_algo())
    try:
        def broken(num_prompts: int):
            raise ValueError("the verifier cannot read 'x'")

        # The runner's own sample() replaced, in its process.
        algo.env_runner_group.foreach_env_runner(
            lambda r: setattr(r, "sample", broken), local_env_runner=False)
        start = time.monotonic()
        with pytest.raises(SampleFailedError, match=r"^env runner 1's sample\(\) raised "
                           r"ValueError: the verifier cannot read 'x' \(its traceback"):
            algo.train()
        assert time.monotonic() - start < 30  # RLlib's restarts took 60 s each
        assert algo.env_runner_group.healthy_env_runner_ids() == [1]  # never restarted
        assert ray.get(env_runner_actor(algo, 1).ping.remote()) == "pong"
        # Held-out evaluation on the same runner, the same way.
        algo.env_runner_group.foreach_env_runner(
            lambda r: setattr(r, "evaluate", lambda **kwargs: broken(0)), local_env_runner=False)
        start = time.monotonic()
        with pytest.raises(SampleFailedError, match=r"^env runner 1's evaluate\(\) raised "
                           r"ValueError: the verifier cannot read 'x' \(its traceback"):
            algo.evaluate_accuracy(num_problems=2)
        assert time.monotonic() - start < 30
    finally:
        algo.stop()


class AsyncGroup(Group):
    """EnvRunnerGroup's calls AsyncSampler makes: requests by tag, results fetched by tag."""

    def __init__(self):
        super().__init__()
        self.sent = {}

    def foreach_env_runner_async(self, fn, *, tag, remote_worker_ids):
        self.calls.append(list(remote_worker_ids))
        self.sent[tag] = [(i, fn(Runner(i))) for i in remote_worker_ids]
        return len(remote_worker_ids)

    def fetch_ready_async_reqs(self, *, tags, timeout_seconds):
        return [result for tag in tags for result in self.sent.pop(tag, [])]


def test_an_error_in_sample_stops_asynchronous_sampling_at_once_too():
    from rllib_llm.algorithm.async_sampling import AsyncSampler

    group, restores = AsyncGroup(), []
    sampler = AsyncSampler(group, ahead=1, max_staleness=1, num_parts=2, num_prompts=2,
                           restore_runners=lambda: restores.append(1) or [],
                           resync_runners=lambda ids: None, restore_timeout_s=0)
    with pytest.raises(SampleFailedError) as error:
        sampler.next_batch(learner_version=0)
    assert str(error.value) == MESSAGE and restores == []
