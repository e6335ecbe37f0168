"""Episodes → learner tensors: exact state rebuild, env tokens masked, groups kept whole."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_llm.learner.module import position_ids_for
from rllib_llm.learner.packing import episode_tokens, order_by_group, pack

SPACE = gym.spaces.Discrete(50)


def episode(prompt, actions, logp, reward, group, env_tokens=None):
    """A finished episode as the env runner builds it; env_tokens: {step: [ids]}."""
    env_tokens = env_tokens or {}
    infos = [{"prompt_ids": prompt, "group_id": group}]
    infos += [({"env_tokens": env_tokens[t]} if t in env_tokens else {})
              for t in range(len(actions))]
    rewards = [0.0] * (len(actions) - 1) + [reward]
    return SingleAgentEpisode(
        observations=[prompt[-1], *actions], infos=infos, actions=actions, rewards=rewards,
        terminated=True, extra_model_outputs={"action_logp": np.asarray(logp, np.float32)},
        observation_space=SPACE, action_space=SPACE, len_lookback_buffer=0,
    ).to_numpy()


def test_env_tokens_are_state_but_not_actions():
    ep = episode([1, 2, 3], [10, 11, 12], [-0.5, -0.25, -1.0], 1.0, "g",
                 env_tokens={0: [40, 41]})  # the env appended two tokens after the first action
    tokens = episode_tokens(ep)
    assert tokens.prompt_ids.tolist() == [1, 2, 3]
    assert tokens.response_ids.tolist() == [10, 40, 41, 11, 12]
    assert tokens.action_mask.tolist() == [1, 0, 0, 1, 1]
    assert tokens.behaviour_logp.tolist() == [-0.5, 0.0, 0.0, -0.25, -1.0]
    assert tokens.score == 1.0 and tokens.group_id == "g"


def test_pack_left_pads_prompts_and_right_pads_responses():
    a = episode_tokens(episode([1, 2, 3], [10, 11], [-0.5, -0.25], 1.0, "g"))
    b = episode_tokens(episode([4], [20, 21, 22], [-1.0, -2.0, -3.0], 0.0, "g"))
    batch = pack([a, b], pad_token_id=0)
    assert batch["input_ids"].tolist() == [[1, 2, 3, 10, 11, 0], [0, 0, 4, 20, 21, 22]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]
    assert batch["response_ids"].tolist() == [[10, 11, 0], [20, 21, 22]]
    assert batch["action_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]
    assert batch["old_logp"].tolist() == [[-0.5, -0.25, 0.0], [-1.0, -2.0, -3.0]]
    assert batch["scores"].tolist() == [1.0, 0.0]
    # Left padding does not shift positions: the prompt starts at position 0 in every row.
    assert position_ids_for(batch["attention_mask"])[1, 2:].tolist() == [0, 1, 2, 3]


def test_groups_are_reassembled_and_incomplete_groups_rejected():
    eps = [episode_tokens(episode([1], [5], [-1.0], float(i), g))
           for i, g in enumerate(["x", "y", "x", "y"])]
    ordered = order_by_group(eps, group_size=2)
    assert [e.group_id for e in ordered] == ["x", "x", "y", "y"]
    assert [e.score for e in ordered] == [0.0, 2.0, 1.0, 3.0]
    with pytest.raises(ValueError, match="do not form complete groups of "
                                         "num_return_sequences_in_group=3"):
        order_by_group(eps, group_size=3)


def test_pack_of_nothing_is_a_clear_error():
    with pytest.raises(ValueError, match="got no episodes"):
        pack([], pad_token_id=0)


def test_packed_batch_dtypes():
    batch = pack([episode_tokens(episode([1], [5, 6], [-1.0, -1.0], 1.0, "g"))], 0)
    assert batch["input_ids"].dtype == torch.long and batch["old_logp"].dtype == torch.float32
