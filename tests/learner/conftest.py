"""Fixtures the learner tests share: the learner's module of the embedded model at a small batch
shape, and one training iteration's update."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_llm.learner.module import RLVRModule
from rllib_llm.recipes.embedded import embedded_config

SPACES = dict(observation_space=gym.spaces.Discrete(2), action_space=gym.spaces.Discrete(2))
SMALL = dict(rollout_batch_size=4, num_return_sequences_in_group=4, response_length=6)


@pytest.fixture
def small_module():
    """build(inference_only=False, **settings): the RLVRModule of the embedded model a learner
    (or, inference_only, an env runner) builds, PPO at SMALL's shape with `settings` on top."""

    def build(inference_only: bool = False, **settings) -> RLVRModule:
        spec = embedded_config("ppo", **SMALL, **settings).get_default_rl_module_spec()
        return RLVRModule(**SPACES, model_config=spec.model_config, inference_only=inference_only)

    return build


@pytest.fixture
def one_iteration():
    """run(**settings): one training iteration of PPO on the embedded task at seed 5, SMALL's
    shape with `settings` on top (needs a Ray session); (its learner metrics, the weights
    before, the weights after)."""

    def run(**settings):
        algo = embedded_config("ppo", seed=5, **{**SMALL, **settings}).build_algo()
        try:
            before = _weights(algo)
            metrics = algo.train()["learners"][DEFAULT_MODULE_ID]
            return metrics, before, _weights(algo)
        finally:
            algo.stop()

    return run


def _weights(algo) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v).clone()
            for k, v in algo.learner_group.get_weights()[DEFAULT_MODULE_ID].items()}
