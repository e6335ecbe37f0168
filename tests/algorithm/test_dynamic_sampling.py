"""DAPO's dynamic sampling (`algorithm/dynamic_sampling.py`): rounds until the batch holds
`rollout_batch_size` informative groups, the cap, the shortfall filled, the metrics by hand; and
the real sampler with the local runner, a remote one and asynchronous training."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_llm.algorithm.async_sampling import Batch, group_of
from rllib_llm.algorithm.dynamic_sampling import (
    RESPONSES_SAMPLED,
    ROUNDS,
    SAMPLES_PER_INFORMATIVE_GROUP,
    SHORTFALL_GROUPS,
    UNINFORMATIVE_FRACTION,
    fill_batch,
    groups_in_order,
    is_informative,
    next_round_size,
)
from rllib_llm.recipes.embedded import embedded_config

SPACE = gym.spaces.Discrete(10)


def episode(group: str, reward: float) -> SingleAgentEpisode:
    return SingleAgentEpisode(
        observations=[0, 1, 2], actions=[1, 2], rewards=[0.0, reward],
        infos=[{"group_id": group}, {}, {}], terminated=True, observation_space=SPACE,
        action_space=SPACE, len_lookback_buffer=0).to_numpy()


def batch(groups: dict[str, list[float]], tag: str) -> Batch:
    return Batch([episode(g, r) for g, rewards in groups.items() for r in rewards],
                 [{"round": tag}], {"first": 1.0 if tag == "a" else 0.0},
                 [{"reward_round": tag}])


class Sampler:
    """Hands out the given batches one round at a time, recording the prompts each round asked
    for (the algorithm's sampler draws that many; these batches are fixed in advance)."""

    def __init__(self, *batches: Batch):
        self.queue, self.asked = list(batches), []

    def __call__(self, num_prompts: int) -> Batch:
        self.asked.append(num_prompts)
        return self.queue.pop(0)


def sampler(*batches: Batch) -> Sampler:
    return Sampler(*batches)


def test_a_group_is_informative_when_its_final_rewards_differ():
    assert is_informative([episode("g", 0.0), episode("g", 1.0)])
    assert not is_informative([episode("g", 1.0), episode("g", 1.0)])
    assert not is_informative([episode("g", 0.0), episode("g", 0.0)])


def test_rounds_until_enough_informative_groups_in_arrival_order():
    rounds = sampler(batch({"a1": [1, 1], "a2": [0, 1], "a3": [0, 0]}, "a"),
                     batch({"b1": [1, 0], "b2": [1, 1], "b3": [0, 1]}, "b"),
                     batch({"c1": [0, 1]}, "c"))
    got, metrics = fill_batch(rounds, num_groups=3, max_rounds=5)
    # Round 2 asks for the 2 missing groups over the informative share so far (1 of 3): 6, at
    # most a batch of 3.
    assert rounds.asked == [3, 3]
    assert [group_of(g[0]) for g in groups_in_order(got.episodes)] == ["a2", "b1", "b3"]
    assert got.runner_metrics == [{"round": "a"}, {"round": "b"}]  # both rounds' samples count
    # Each round's reward-model metrics ride in its batch, and every round's reach the step.
    assert got.reward_rounds == [{"reward_round": "a"}, {"reward_round": "b"}]
    assert got.metrics == {"first": 1.0}
    assert metrics == {ROUNDS: 2.0, RESPONSES_SAMPLED: 12.0, UNINFORMATIVE_FRACTION: 3 / 6,
                       SHORTFALL_GROUPS: 0.0, SAMPLES_PER_INFORMATIVE_GROUP: 12 / 3}


def test_a_later_round_asks_for_what_is_missing_over_the_informative_share():
    assert next_round_size(missing=8, informative=56, sampled=64, batch=64) == 10  # 8 x 64/56
    assert next_round_size(missing=1, informative=63, sampled=64, batch=64) == 2
    assert next_round_size(missing=30, informative=2, sampled=64, batch=64) == 64  # a batch
    assert next_round_size(missing=64, informative=0, sampled=64, batch=64) == 64
    rounds = sampler(batch({f"a{i}": [0, 1] for i in range(7)} | {"a7": [1, 1]}, "a"),
                     batch({"b0": [0, 1], "b1": [1, 0]}, "b"))
    got, metrics = fill_batch(rounds, num_groups=8, max_rounds=4)
    assert rounds.asked == [8, 2]  # 1 missing x 8/7, rounded up
    assert len(groups_in_order(got.episodes)) == 8 and metrics[ROUNDS] == 2.0
    assert metrics[SAMPLES_PER_INFORMATIVE_GROUP] == (16 + 4) / 8


def test_the_cap_fills_the_batch_with_uninformative_groups_and_says_so():
    rounds = sampler(batch({"a1": [1, 1], "a2": [0, 1]}, "a"),
                     batch({"b1": [0, 0], "b2": [1, 1]}, "b"))
    got, metrics = fill_batch(rounds, num_groups=3, max_rounds=2)
    assert [group_of(g[0]) for g in groups_in_order(got.episodes)] == ["a2", "a1", "b1"]
    assert metrics[ROUNDS] == 2.0 and metrics[SHORTFALL_GROUPS] == 2.0
    assert metrics[SAMPLES_PER_INFORMATIVE_GROUP] == 8 / 1


def test_dynamic_sampling_needs_groups_and_its_cap_needs_it():
    with pytest.raises(ValueError, match="num_return_sequences_in_group >= 2"):
        embedded_config("ppo", dynamic_sampling=True, num_return_sequences_in_group=1,
                        adv_estimator="reinforce").validate()
    with pytest.raises(ValueError, match="dynamic_sampling_max_rounds=2 has no effect"):
        embedded_config("ppo", dynamic_sampling_max_rounds=2).validate()


def informative_batch_of(algo) -> tuple[list, dict]:
    batch = algo.sample_batch(0)
    groups = groups_in_order(batch.episodes)
    return groups, batch


@pytest.mark.parametrize("placement", [
    pytest.param({}, id="local runner"),
    pytest.param({"num_env_runners": 1}, id="remote runner"),
    pytest.param({"num_env_runners": 1, "async_generation_ratio": 1}, id="asynchronous",
                 marks=pytest.mark.slow),
])
def test_the_sampler_trains_on_informative_groups_only(ray_session, placement):
    runners = {k: placement.pop(k) for k in list(placement) if k == "num_env_runners"}
    config = embedded_config("ppo", seed=0, adv_estimator="grpo", rollout_batch_size=8,
                             num_return_sequences_in_group=4, dynamic_sampling=True,
                             dynamic_sampling_max_rounds=8, **placement)
    if runners:
        config.env_runners(num_cpus_per_env_runner=0.5, **runners)
    algo = config.build_algo()
    try:
        # The embedded model answers about a third right: about half its groups of 4 are mixed.
        result = algo.train()
        stats = result["dynamic_sampling"]
        assert stats[SHORTFALL_GROUPS] == 0 and 1 <= stats[ROUNDS] <= 8
        assert 0 < stats[UNINFORMATIVE_FRACTION] < 1
        groups = groups_in_order(algo.sample_batch().episodes)
        assert len(groups) == 8 and all(len(g) == 4 for g in groups)
        assert all(is_informative(g) for g in groups)
        assert len({group_of(g[0]) for g in groups}) == 8
        np.testing.assert_array_less(0, result["learners"]["default_policy"]["advantage_abs_mean"])
    finally:
        algo.stop()
