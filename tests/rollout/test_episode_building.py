"""Vectorised episode building and packing give exactly what a plain per-token loop gives.

The reference below is the straightforward implementation (and the code before the vectorised
one): step the env token by token into lists, let RLlib stack them, walk every step's info for
env tokens, and copy each row into the batch with `torch.tensor`.
"""

from __future__ import annotations

import copy
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from rllib_llm.envs import MathVerifyEnv
from rllib_llm.envs.token_mdp import EMPTY_INFO, ENV_TOKENS, PROMPT_IDS, is_correct

from rllib_llm.exchange.columns import ACTION_LOGP, CORRECT, GROUP_ID, TRUNCATED, WEIGHT_VERSION
from rllib_llm.learner.packing import episode_tokens, pack_episodes
from rllib_llm.models import load_tokenizer
from rllib_llm.rollout.engine import Response
from rllib_llm.rollout.replay import replay_response

RESPONSE_LENGTH = 12
SMALL = {"max_operand": 9, "test_size": 10}


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("embedded")


def make_env(tokenizer) -> MathVerifyEnv:
    return MathVerifyEnv({"tokenizer": tokenizer, "dataset_kwargs": SMALL,
                          "response_length": RESPONSE_LENGTH})


# --- the reference: per-token loops -------------------------------------------------------------
def reference_episode(env, prompt_index, response, group_id, version) -> SingleAgentEpisode:
    obs, info = env.reset(options={"prompt_index": prompt_index})
    observations, rewards, infos = [obs], [], [{**info, GROUP_ID: group_id}]
    for token in response.token_ids:
        obs, reward, terminated, truncated, step_info = env.step(token)
        observations.append(obs)
        rewards.append(reward)
        infos.append(step_info)
    k = len(rewards)
    return SingleAgentEpisode(
        observations=observations, infos=infos, actions=list(response.token_ids),
        rewards=rewards, terminated=terminated, truncated=truncated,
        extra_model_outputs={ACTION_LOGP: [np.float32(x) for x in response.logprobs],
                             WEIGHT_VERSION: [version] * k},
        observation_space=env.observation_space, action_space=env.action_space,
        len_lookback_buffer=0,
    ).to_numpy()


def reference_tokens(episode) -> dict:
    infos = episode.get_infos()
    response, mask, behaviour = [], [], []
    for t, (a, lp) in enumerate(zip(episode.get_actions().tolist(),
                                    episode.get_extra_model_outputs(ACTION_LOGP).tolist())):
        response.append(a)
        mask.append(1)
        behaviour.append(lp)
        for x in infos[t + 1].get(ENV_TOKENS, ()):
            response.append(x)
            mask.append(0)
            behaviour.append(0.0)
    score = float(sum(episode.get_rewards().tolist()))
    verdict = infos[-1].get("verifier")
    correct = verdict["correct"] if verdict is not None else score > 0
    # Truncated: the response limit reached without EOS (these episodes have no env tokens).
    actions = episode.get_actions().tolist()
    truncated = len(actions) == RESPONSE_LENGTH and actions[-1] != load_tokenizer("embedded").eos_token_id
    return {"prompt": list(infos[0][PROMPT_IDS]), "response": response, "mask": mask,
            "logp": behaviour, "score": score, "correct": correct, "group": infos[0][GROUP_ID],
            "truncated": truncated}


def reference_pack(episodes, group_size: int, pad: int) -> dict[str, torch.Tensor]:
    groups: dict = {}
    for e in map(reference_tokens, episodes):
        groups.setdefault(e["group"], []).append(e)
    items = [e for g in groups.values() for e in g]
    assert all(len(g) == group_size for g in groups.values())
    p = max(len(e["prompt"]) for e in items)
    t = max(len(e["response"]) for e in items)
    batch = {"input_ids": torch.full((len(items), p + t), pad, dtype=torch.long),
             "attention_mask": torch.zeros((len(items), p + t), dtype=torch.long),
             "action_mask": torch.zeros((len(items), t)),
             "old_logp": torch.zeros((len(items), t))}
    for i, e in enumerate(items):
        lp, lr = len(e["prompt"]), len(e["response"])
        batch["input_ids"][i, p - lp : p] = torch.tensor(e["prompt"])
        batch["input_ids"][i, p : p + lr] = torch.tensor(e["response"])
        batch["attention_mask"][i, p - lp : p + lr] = 1
        batch["action_mask"][i, :lr] = torch.tensor(e["mask"], dtype=torch.float32)
        batch["old_logp"][i, :lr] = torch.tensor(e["logp"], dtype=torch.float32)
    batch["response_ids"] = batch["input_ids"][:, p:].clone()
    batch["scores"] = torch.tensor([e["score"] for e in items], dtype=torch.float32)
    batch[CORRECT] = torch.tensor([float(e["correct"]) for e in items], dtype=torch.float32)
    batch[TRUNCATED] = torch.tensor([float(e["truncated"]) for e in items], dtype=torch.float32)
    return batch


# --- random responses ---------------------------------------------------------------------------
def random_responses(env, rng, num_prompts: int, group: int):
    """(prompt index, response) pairs: EOS-terminated at random lengths (EOS on the last allowed
    token too), truncated at RESPONSE_LENGTH, correct answers, and lengths in between."""
    tok = env.tokenizer
    digits = tok.convert_tokens_to_ids(list("0123456789 +-="))
    pairs = []
    for p in rng.choice(env.num_problems, num_prompts, replace=False).tolist():
        answer = env.reset(options={"prompt_index": p})[1]["answer"]
        for j in range(group):
            if j == 0:  # the right answer
                ids = [*tok.convert_tokens_to_ids(list(answer)), tok.eos_token_id]
            elif j == 1 or rng.random() < 0.3:  # truncated
                ids = rng.choice(digits, RESPONSE_LENGTH).tolist()
            else:  # EOS at a random length (j == 2: on the last allowed token)
                length = RESPONSE_LENGTH if j == 2 else int(rng.integers(1, RESPONSE_LENGTH + 1))
                ids = [*rng.choice(digits, length - 1).tolist(), tok.eos_token_id]
            logprobs = (-rng.exponential(size=len(ids))).tolist()
            pairs.append((p, Response(ids, logprobs, "stop" if ids[-1] == tok.eos_token_id
                                      else "length")))
    return pairs


def test_vectorised_building_and_packing_equal_the_per_token_reference(tokenizer):
    fast_env, slow_env = make_env(tokenizer), make_env(tokenizer)
    rng = np.random.default_rng(0)
    pairs = random_responses(fast_env, rng, num_prompts=6, group=4)
    verdicts = fast_env.verify_responses([p for p, _ in pairs],
                                         [r.token_ids for _, r in pairs])
    fast, slow = [], []
    for n, ((p, response), verdict) in enumerate(zip(pairs, verdicts)):
        group_id = f"g{n // 4}"
        fast.append(replay_response(fast_env, p, response, group_id=group_id,
                                    weight_version=7, verification=verdict))
        slow.append(reference_episode(slow_env, p, response, group_id, 7))
    kinds = {(e.is_terminated, e.is_truncated) for e in fast}
    assert kinds == {(True, False), (False, True)} and len({len(e) for e in fast}) > 3
    assert any(e.get_return() == 1.0 for e in fast)
    for a, b in zip(fast, slow):
        assert a.is_numpy and b.is_numpy
        assert (a.is_terminated, a.is_truncated) == (b.is_terminated, b.is_truncated)
        for get in ("get_observations", "get_actions", "get_rewards"):
            x, y = getattr(a, get)(), getattr(b, get)()
            assert x.dtype == y.dtype and np.array_equal(x, y), get
        for key in (ACTION_LOGP, WEIGHT_VERSION):
            x, y = a.get_extra_model_outputs(key), b.get_extra_model_outputs(key)
            assert x.dtype == y.dtype and np.array_equal(x, y), key
        assert a.get_infos() == b.get_infos()
    assert fast_env.verifier_metrics() == slow_env.verifier_metrics()
    # Interleave the groups: packing puts each group back together, as the reference does.
    order = rng.permutation(len(fast)).tolist()
    got = pack_episodes([fast[i] for i in order], 4, tokenizer.pad_token_id)
    want = reference_pack([slow[i] for i in order], 4, tokenizer.pad_token_id)
    assert got.keys() == want.keys()
    for key in want:
        assert got[key].dtype == want[key].dtype and torch.equal(got[key], want[key]), key


def hand_episode(prompt, actions, env_tokens, reward, group, final_info=None):
    """An episode as a multi-turn env would give it: env_tokens {step: ids} in step infos."""
    infos = [{PROMPT_IDS: prompt, GROUP_ID: group}]
    infos += [{ENV_TOKENS: env_tokens[t]} if t in env_tokens else EMPTY_INFO
              for t in range(len(actions))]
    if final_info:
        infos[-1] = {**infos[-1], **final_info}
    space = gym.spaces.Discrete(100)
    logp = -np.arange(1, len(actions) + 1, dtype=np.float32) / 8
    return SingleAgentEpisode(
        observations=[prompt[-1], *actions], infos=infos, actions=actions,
        rewards=[0.0] * (len(actions) - 1) + [reward], terminated=True,
        extra_model_outputs={ACTION_LOGP: logp}, observation_space=space, action_space=space,
        len_lookback_buffer=0,
    ).to_numpy()


@pytest.mark.parametrize("round_trip", [False, True], ids=["local", "pickled"])
def test_env_tokens_anywhere_equal_the_reference(round_trip):
    rng = np.random.default_rng(1)
    episodes = []
    for n in range(12):
        k = int(rng.integers(1, 9))
        steps = sorted(set(rng.integers(0, k, int(rng.integers(0, 4))).tolist()))
        if n == 0:
            steps = [k - 1]  # env tokens after the last action only
        env_tokens = {t: rng.integers(50, 60, int(rng.integers(0, 4))).tolist() for t in steps}
        final = {"verifier": {"correct": bool(n % 3)}} if n % 2 else None
        episodes.append(hand_episode(rng.integers(1, 9, int(rng.integers(1, 5))).tolist(),
                                     rng.integers(10, 40, k).tolist(), env_tokens,
                                     float(n % 4 == 1), f"g{n // 2}", final))
    if round_trip:  # what remote env runners send: EMPTY_INFO is then a copy, not the object
        episodes = pickle.loads(pickle.dumps(episodes))
    for e in episodes:
        got, want = episode_tokens(e), reference_tokens(e)
        assert got.prompt_ids.tolist() == want["prompt"]
        assert got.response_ids.tolist() == want["response"]
        assert got.action_mask.tolist() == [bool(m) for m in want["mask"]]
        assert got.behaviour_logp.tolist() == want["logp"]
        assert (got.score, got.correct) == (want["score"], want["correct"])
    got, want = pack_episodes(episodes, 2, 0), reference_pack(episodes, 2, 0)
    for key in want:
        assert torch.equal(got[key], want[key]), key


# --- the correct flag ---------------------------------------------------------------------------
def test_correct_comes_from_the_verdict_else_from_a_positive_score():
    assert is_correct({"verifier": {"correct": True}}, score=0.0)  # the verdict wins
    assert not is_correct({"verifier": {"correct": False}}, score=0.5)  # e.g. a format bonus
    assert is_correct({}, score=0.5) and not is_correct({}, score=0.0)
    assert not is_correct({}, score=-1.0) and not is_correct(EMPTY_INFO, score=0.0)
    episodes = [hand_episode([1], [10, 11], {}, 0.5, "g", {"verifier": {"correct": False}}),
                hand_episode([1], [10], {}, 0.5, "g"),
                hand_episode([2], [12], {}, 0.0, "h"),
                hand_episode([2], [13], {}, 1.0, "h", {"verifier": {"correct": True}})]
    batch = pack_episodes(episodes, 2, 0)
    assert batch[CORRECT].dtype == torch.float32
    assert batch[CORRECT].tolist() == [0.0, 1.0, 0.0, 1.0]


def test_correct_follows_the_math_verifier(tokenizer):
    env = make_env(tokenizer)
    answer = env.reset(options={"prompt_index": 3})[1]["answer"]
    right = tokenizer.convert_tokens_to_ids(list(answer)) + [tokenizer.eos_token_id]
    wrong = tokenizer.convert_tokens_to_ids(list(str(int(answer) + 1))) + [tokenizer.eos_token_id]
    episodes = [replay_response(env, 3, Response(ids, [-1.0] * len(ids), "stop"),
                                group_id="g", weight_version=0) for ids in (right, wrong)]
    assert pack_episodes(episodes, 2, 0)[CORRECT].tolist() == [1.0, 0.0]


# --- the pieces that make it cheap --------------------------------------------------------------
def test_step_chunk_returns_arrays_and_one_shared_empty_info(tokenizer):
    env = make_env(tokenizer)
    env.reset(options={"prompt_index": 0})
    result = env.step_chunk([19, 20, 21, tokenizer.eos_token_id])
    assert result.actions.tolist() == [19, 20, 21, tokenizer.eos_token_id]
    assert result.actions.dtype == result.observations.dtype == np.int64
    assert result.rewards.dtype == np.float64
    assert result.terminateds.dtype == result.truncateds.dtype == np.bool_
    assert all(info is EMPTY_INFO for info in result.infos[:-1])
    assert "verifier" in result.infos[-1]
    # The arrays are the result's own: changing the caller's array afterwards changes nothing.
    tokens = np.array([19, 20, tokenizer.eos_token_id])
    env.reset(options={"prompt_index": 0})
    result = env.step_chunk(tokens)
    tokens[0] = 5
    assert result.observations.tolist() == result.actions.tolist() == [19, 20, 1]


def test_the_shared_empty_info_refuses_writes_and_survives_copies():
    writes = [lambda i: i.__setitem__("k", 1), lambda i: i.update(k=1),
              lambda i: i.setdefault("k", 1), lambda i: i.pop("k"), lambda i: i.popitem(),
              lambda i: i.clear(), lambda i: i.__delitem__("k"), lambda i: i.__ior__({"k": 1})]
    for write in writes:
        with pytest.raises(TypeError, match="shared read-only EMPTY_INFO of token_mdp; build a "
                                            r"new dict \(e.g. \{\*\*info, key: value\}\)"):
            write(EMPTY_INFO)
    assert EMPTY_INFO == {} and {**EMPTY_INFO, "k": 1} == {"k": 1}
    infos = pickle.loads(pickle.dumps([EMPTY_INFO, EMPTY_INFO]))
    assert infos[0] is infos[1] and infos[0] == {}
    with pytest.raises(TypeError):
        infos[0]["k"] = 1
    assert copy.deepcopy(EMPTY_INFO) == {}


def test_a_verified_response_is_decoded_once(tokenizer, monkeypatch):
    env = make_env(tokenizer)
    calls = []
    decode = tokenizer.decode
    monkeypatch.setattr(tokenizer, "decode", lambda ids, **kw: calls.append(1) or decode(ids, **kw))
    responses = [[19, 20, tokenizer.eos_token_id], [21] * RESPONSE_LENGTH]
    verdicts = env.verify_responses([0, 1], responses)
    assert len(calls) == 2
    texts = []
    for index, response, verdict in zip([0, 1], responses, verdicts):
        env.reset(options={"prompt_index": index})
        texts.append(env.step_chunk(response, verification=verdict).infos[-1]["response"])
    assert len(calls) == 2 and texts == ["01", "2" * RESPONSE_LENGTH]
    env.reset(options={"prompt_index": 0})  # without a verdict: decoded (and verified) here
    assert env.step_chunk(responses[0]).infos[-1]["response"] == "01" and len(calls) == 3


def test_token_lists_of_any_int_kind_and_bad_ones(tokenizer):
    env = make_env(tokenizer)
    env.reset(options={"prompt_index": 0})
    assert env.step_chunk([np.int32(19), True]).observations.tolist() == [19, 1]  # 1 is EOS
    for bad in ([19, [20]], [19, 10**30], [19, 2.0]):
        env.reset(options={"prompt_index": 0})
        with pytest.raises(ValueError, match=r"action=.* is not a token id in \[0, 98\)"):
            env.step_chunk(bad)
