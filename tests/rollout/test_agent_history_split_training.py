"""An agent that rewrites its history trains through the whole learner (issue 48, item 3): one
RLVR iteration where every episode of one kind splits into three sequences; each optimizer step
holds one whole prompt group, all its episodes' sequences, and the update is finite."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("openai")

from test_agent_history_split import rewriting_agent  # noqa: E402

from rllib_llm.algorithm import RLVRConfig  # noqa: E402
from rllib_llm.exchange.columns import ACTION_MASK, EPISODE_INDEX  # noqa: E402

pytestmark = pytest.mark.usefixtures("ray_session")  # tests/conftest.py


def test_one_iteration_trains_every_sequence_of_the_split_episodes(watch_learner):
    steps = []
    watch_learner("optimizer_step", lambda learner, batch, **kwargs: steps.append(
        (batch[ACTION_MASK].shape[0], batch[EPISODE_INDEX].tolist())))
    config = (RLVRConfig()
              .environment("openai_agent", env_config={
                  "agent": rewriting_agent, "dataset": "arithmetic",
                  "dataset_kwargs": {"ops": "*"}, "max_calls": 4, "max_total_tokens": 256})
              .training(model_name_or_path="embedded_tool", rollout_batch_size=2,
                        num_return_sequences_in_group=2, mini_batch_size=2, ppo_epochs=1,
                        response_length=64, pg_variant="ppo")
              .debugging(seed=0, log_level="ERROR"))
    algo = config.build_algo()
    try:
        result = algo.train()
    finally:
        algo.stop()
    runners, learner = result["env_runners"], result["learners"]["default_policy"]
    assert runners["agent_prefix_breaks_mean"] == 1.0  # 2 breaks in one of each group's two
    # One step per prompt group (mini_batch_size 2 = one group of 2 episodes), each with all
    # four sequences of its group: the split episode's three rows, then the other's one.
    assert [rows for rows, _ in steps] == [4, 4]
    assert all(len(set(episodes)) == 2 for _, episodes in steps)
    assert learner["num_optimizer_steps"] == 2 and math.isfinite(learner["total_loss"])
    assert learner["score_mean"] == 0.5  # per episode (1 and 0); per row it would be 0.75
