"""Where a sample() call's time goes (rollout/sample_metrics.py): generating, verifying, replaying
into episodes, each timed apart, none negative, together within the call's own wall time, which
the driver's sample timer holds (the rest of that timer is the episodes' way to the driver)."""

from __future__ import annotations

import time

import pytest

from rllib_llm.outputs import metric_names as names
from rllib_llm.recipes.embedded import embedded_config
from rllib_llm.rollout.sample_metrics import (
    GENERATE_S,
    REPLAY_S,
    SAMPLE_CALL_S,
    VERIFY_S,
    WEIGHT_LOAD_S,
)

SMALL = dict(rollout_batch_size=4, num_return_sequences_in_group=4, response_length=6)
PHASES = (GENERATE_S, VERIFY_S, REPLAY_S)


@pytest.mark.parametrize("training", [{}, {"partial_rollout_max_split": 2}],
                         ids=["whole responses", "partial rollouts"])
def test_the_phases_of_a_call_are_timed_apart_and_fit_in_its_wall_time(training):
    from rllib_llm.rollout.env_runner import RLVREnvRunner

    runner = RLVREnvRunner(config=embedded_config("ppo", seed=0, **SMALL, **training))
    try:
        for _ in range(2):  # the first call also builds the engine
            start = time.perf_counter()
            runner.sample()
            wall = time.perf_counter() - start
            phases = {name: runner.metrics.peek(name) for name in PHASES}
            assert all(seconds >= 0 for seconds in phases.values()), phases
            assert phases[GENERATE_S] > 0
            assert sum(phases.values()) <= runner.metrics.peek(SAMPLE_CALL_S) <= wall
            runner.get_metrics()  # (what RLlib collects each iteration; the next call's anew)
    finally:
        runner.stop()


@pytest.mark.usefixtures("ray_session")
def test_an_iteration_reports_the_phases_within_the_drivers_sample_timer():
    algo = embedded_config("ppo", seed=0, **SMALL).env_runners(num_env_runners=1).build_algo()
    try:
        for _ in range(2):
            result = algo.train()
        runner = result["env_runners"]
        phases = [runner[name] for name in PHASES]
        assert min(phases) >= 0 and runner[WEIGHT_LOAD_S] >= 0  # (the first sync's load)
        call = runner[SAMPLE_CALL_S]
        assert sum(phases) <= call <= result["timers"]["sample"]
        # The stable names (outputs/metric_names.py) are these keys.
        flat = {f"env_runners/{k}": v for k, v in runner.items()}
        for name in (names.SAMPLE_CALL_S, names.GENERATE_S, names.VERIFY_S, names.REPLAY_S):
            assert name in flat
    finally:
        algo.stop()
