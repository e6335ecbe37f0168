"""MathVerifyEnv: the token-level MDP, step vs step_chunk, O(T) memory, config errors, registration."""

from __future__ import annotations

import json
import pickle

import gymnasium
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rllib_llm.envs import MathVerifyEnv, register_envs
from rllib_llm.envs.token_mdp import ENV_TOKENS, rebuild_state
from rllib_llm.envs.verifier import METRIC_NAMES
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rllib_llm.models import load_tokenizer

SMALL = {"max_operand": 9, "test_size": 10}  # 155 problems, 145 in train


def stand_in_tokenizer(*, eos: bool = True) -> PreTrainedTokenizerFast:
    """A tiny char tokenizer unlike the embedded one: EOS is the LAST id, and specials are 3."""
    specials = ["<pad>", "<unk>"]
    chars = "0123456789+-= "
    vocab = {tok: i for i, tok in enumerate([*specials, *chars, *(["<eos>"] if eos else [])])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        unk_token="<unk>",
        eos_token="<eos>" if eos else None,
        clean_up_tokenization_spaces=False,
    )


@pytest.fixture(scope="module")
def embedded():
    return load_tokenizer("embedded")


@pytest.fixture(scope="module", params=["stand-in", "embedded"])
def tokenizer(request, embedded):
    return stand_in_tokenizer() if request.param == "stand-in" else embedded


def make_env(tokenizer, /, **overrides) -> MathVerifyEnv:
    config = {"tokenizer": tokenizer, "dataset_kwargs": SMALL, "response_length": 5}
    return MathVerifyEnv({**config, **overrides})


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer.convert_tokens_to_ids(list(text))


# --- the MDP ------------------------------------------------------------------------------------
def test_reset_starts_at_the_prompt(tokenizer):
    env = make_env(tokenizer)
    obs, info = env.reset(options={"prompt_index": 7})
    assert set(info) == {"prompt_ids", "prompt_index", "answer", "prompt"}
    assert info["prompt_index"] == 7
    assert info["prompt_ids"] == ids(tokenizer, info["prompt"])  # no chat template here
    assert obs == info["prompt_ids"][-1] and env.observation_space.contains(obs)
    assert env.observation_space == env.action_space == gymnasium.spaces.Discrete(len(tokenizer))
    assert env.state_token_ids() == info["prompt_ids"]


def test_hand_built_episode_rewards_only_at_the_end(tokenizer):
    env = make_env(tokenizer)
    _, info = env.reset(options={"prompt_index": 0})
    answer = info["answer"]
    steps = [env.step(t) for t in [*ids(tokenizer, answer), tokenizer.eos_token_id]]
    assert [s[0] for s in steps] == [*ids(tokenizer, answer), tokenizer.eos_token_id]
    assert [s[1] for s in steps] == [0.0] * len(answer) + [1.0]
    assert [(s[2], s[3]) for s in steps] == [(False, False)] * len(answer) + [(True, False)]
    assert [s[4] for s in steps[:-1]] == [{}] * len(answer)
    final = steps[-1][4]
    assert final["response"] == answer  # EOS is skipped when decoding
    assert final["verifier"] == {
        "score": 1.0, "correct": True, "extracted": answer, "timed_out": False, "error": None,
        "fast_path": True,
    }  # fmt: skip
    assert env.verifier_metrics() == {"verifications": 1, "timeouts": 0, "errors": 0,
                                      "fast_path": 1}  # fmt: skip
    assert set(env.verifier_metrics()) == set(METRIC_NAMES)


def test_wrong_answer_and_configured_scores(tokenizer):
    env = make_env(tokenizer, wrong_score=-1.0, format_score=0.5)
    _, info = env.reset(options={"prompt_index": 0})
    wrong = str(int(info["answer"]) + 1)
    result = env.step_chunk([*ids(tokenizer, wrong), tokenizer.eos_token_id])
    assert result.rewards[-1] == -0.5 and not result.infos[-1]["verifier"]["correct"]
    env.reset(options={"prompt_index": 0})
    result = env.step_chunk(ids(tokenizer, "+ =") + [tokenizer.eos_token_id])  # no number at all
    assert result.rewards[-1] == -1.0 and result.infos[-1]["verifier"]["extracted"] is None


def test_truncation_at_response_length(tokenizer):
    env = make_env(tokenizer, response_length=3)
    _, info = env.reset(options={"prompt_index": 0})
    digit = ids(tokenizer, "1")[0]
    steps = [env.step(digit) for _ in range(3)]
    assert [(s[2], s[3]) for s in steps] == [(False, False), (False, False), (False, True)]
    assert steps[-1][4]["response"] == "111" and steps[-1][1] == float(info["answer"] == "111")
    # EOS on the last allowed token ends the episode naturally: terminated, not truncated.
    env.reset(options={"prompt_index": 0})
    last = env.step_chunk([digit, digit, tokenizer.eos_token_id])
    assert (last.terminateds[-1], last.truncateds[-1]) == (True, False)


def test_response_length_one(tokenizer):
    env = make_env(tokenizer, response_length=1)
    env.reset()
    _, _, terminated, truncated, info = env.step(ids(tokenizer, "7")[0])
    assert (terminated, truncated) == (False, True) and info["response"] == "7"


def test_stepping_outside_an_episode_is_refused(tokenizer):
    env = make_env(tokenizer)
    message = r"MathVerifyEnv.step\(\) called with no episode running \(before the first reset\(\)"
    with pytest.raises(RuntimeError, match=message + r" or after the episode ended\); call reset"):
        env.step(3)
    env.reset()
    env.step(tokenizer.eos_token_id)
    with pytest.raises(RuntimeError, match=message):
        env.step(3)
    with pytest.raises(RuntimeError, match=r"MathVerifyEnv.step_chunk\(\) called with no episode"):
        env.step_chunk([3])


@pytest.mark.parametrize("action", [-1, 10_000, 1.5, "7", None])
def test_invalid_actions(tokenizer, action):
    env = make_env(tokenizer)
    _, info = env.reset(options={"prompt_index": 0})
    with pytest.raises(ValueError, match=r"action=.* is not a token id in \[0, \d+\); pass an "
                       r"integer token id of the tokenizer's vocabulary"):  # fmt: skip
        env.step(action)
    with pytest.raises(ValueError, match=r"is not a token id in \[0, \d+\)"):
        env.step_chunk([3, action])
    assert env.state_token_ids() == info["prompt_ids"]  # nothing was consumed


def test_numpy_actions_are_accepted(tokenizer):
    env = make_env(tokenizer)
    _, info = env.reset(options={"prompt_index": 0})
    tokens = np.array([*ids(tokenizer, info["answer"]), tokenizer.eos_token_id], dtype=np.int64)
    assert env.step_chunk(tokens).rewards[-1] == 1.0
    env.reset(options={"prompt_index": 0})
    assert env.step(np.int32(tokens[0]))[0] == tokens[0]


def test_invalid_chunks(tokenizer):
    env = make_env(tokenizer)
    env.reset()
    with pytest.raises(ValueError, match="got an empty token sequence; pass at least one token id"):
        env.step_chunk([])
    with pytest.raises(ValueError, match=r"actions must be a 1-D integer array, got shape \(1, 2\) "
                       r"dtype int64; pass the response's token ids"):  # fmt: skip
        env.step_chunk(np.zeros((1, 2), dtype=np.int64))
    with pytest.raises(ValueError, match=r"actions must be a 1-D integer array, got shape \(2,\) "
                       r"dtype float32"):  # fmt: skip
        env.step_chunk(np.zeros(2, dtype=np.float32))


def test_tokens_past_the_end_are_refused_and_nothing_is_consumed(tokenizer):
    env = make_env(tokenizer)
    _, info = env.reset(options={"prompt_index": 0})
    eos, digit = tokenizer.eos_token_id, ids(tokenizer, "1")[0]
    with pytest.raises(ValueError, match=r"step_chunk got 3 tokens but the episode ends at token 2 "
                       r"of the chunk \(EOS\); pass the response up to and including its last"):  # fmt: skip
        env.step_chunk([digit, eos, digit])
    with pytest.raises(ValueError, match=r"got 6 tokens but the episode ends at token 5 of the "
                       r"chunk \(response_length\)"):  # fmt: skip
        env.step_chunk([digit] * 6)
    assert env.state_token_ids() == info["prompt_ids"]
    assert env.step_chunk([digit, eos]).terminateds.tolist() == [False, True]


def _trajectory_by_step(env, index, tokens):
    env.reset(options={"prompt_index": index})
    out = []
    for token in tokens:
        out.append(env.step(token))
        if out[-1][2] or out[-1][3]:
            break
    return out


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_step_chunk_equals_step_by_step(data):
    tokenizer = _HYPOTHESIS_TOKENIZER
    eos, vocab = tokenizer.eos_token_id, len(tokenizer)
    by_step, by_chunk = _HYPOTHESIS_ENVS
    index = data.draw(st.integers(0, by_step.num_problems - 1), label="prompt_index")
    token = st.one_of(
        st.just(eos), st.integers(0, vocab - 1), st.sampled_from(ids(tokenizer, "0123456789"))
    )
    tokens = data.draw(st.lists(token, min_size=1, max_size=8), label="tokens")
    counts = (
        by_step.verifier_metrics()["verifications"],
        by_chunk.verifier_metrics()["verifications"],
    )
    expected = _trajectory_by_step(by_step, index, tokens)
    consumed = tokens[: len(expected)]
    # Any split of the consumed tokens into chunks gives the same per-token results.
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(consumed) - 1))), label="cuts"))
    cuts = [c for c in cuts if c < len(consumed)]
    pieces = [consumed[a:b] for a, b in zip([0, *cuts], [*cuts, len(consumed)])]
    by_chunk.reset(options={"prompt_index": index})
    got = []
    for piece in pieces:
        r = by_chunk.step_chunk(piece)
        got.extend(zip(r.observations, r.rewards, r.terminateds, r.truncateds, r.infos))
    assert got == expected
    assert by_chunk.state_token_ids() == by_step.state_token_ids()
    # One verification per finished episode, however many chunks it took.
    finished = int(expected[-1][2] or expected[-1][3])
    assert by_step.verifier_metrics()["verifications"] == counts[0] + finished
    assert by_chunk.verifier_metrics()["verifications"] == counts[1] + finished
    if len(consumed) < len(tokens):  # tokens past the end: refused, as step() refuses them
        by_chunk.reset(options={"prompt_index": index})
        with pytest.raises(ValueError, match="but the episode ends at token"):
            by_chunk.step_chunk(tokens)


_HYPOTHESIS_TOKENIZER = stand_in_tokenizer()
_HYPOTHESIS_ENVS = (make_env(_HYPOTHESIS_TOKENIZER), make_env(_HYPOTHESIS_TOKENIZER))


def test_precomputed_verdicts_give_the_same_episodes(tokenizer):
    plain, batched = make_env(tokenizer), make_env(tokenizer)
    eos, digit = tokenizer.eos_token_id, ids(tokenizer, "3")[0]
    indices = [0, 1, 2, 3]
    answer = plain.reset(options={"prompt_index": 1})[1]["answer"]
    responses = [[eos], [*ids(tokenizer, answer), eos], [digit] * 5, [digit, eos]]
    verdicts = batched.verify_responses(indices, responses)
    for index, response, verdict in zip(indices, responses, verdicts):
        plain.reset(options={"prompt_index": index})
        batched.reset(options={"prompt_index": index})
        assert batched.step_chunk(response, verification=verdict) == plain.step_chunk(response)
    assert batched.verifier_metrics() == plain.verifier_metrics()
    assert verdicts[1].correct and not verdicts[0].correct


def test_precomputed_verdict_errors(tokenizer):
    env = make_env(tokenizer)
    with pytest.raises(ValueError, match=r"verify_responses got 1 prompt indices and 2 responses; "
                       r"pass one prompt index per response"):  # fmt: skip
        env.verify_responses([0], [[3], [3]])
    verdict = env.verify_responses([0], [[3]])[0]
    _, info = env.reset(options={"prompt_index": 0})
    with pytest.raises(ValueError, match=r"step_chunk got a verification but its tokens do not end "
                       r"the episode; pass verification only with the chunk that ends it"):  # fmt: skip
        env.step_chunk([3], verification=verdict)
    assert env.state_token_ids() == info["prompt_ids"]
    with pytest.raises(ValueError, match=r"prompt_index=999 must be an integer in \[0, 145\)"):
        env.verify_responses([999], [[3]])


# --- O(T) memory and the state ------------------------------------------------------------------
def test_memory_is_linear_in_the_episode_length(tokenizer):
    digit = ids(tokenizer, "1")[0]
    sizes = {}
    for length in (100, 200, 400):
        env = make_env(tokenizer, response_length=length, prompt_length=64)
        _, info = env.reset(options={"prompt_index": 0})
        result = env.step_chunk([digit] * length)
        # What the env keeps: the prompt ids and one int per agent token, nothing per step.
        assert len(env.state_token_ids()) == len(info["prompt_ids"]) + length
        assert env.prompt_ids == tuple(info["prompt_ids"])
        assert env.response_ids.tolist() == [digit] * length
        assert env.response_ids.base.shape == (length,)  # the buffer: response_length tokens
        with pytest.raises(ValueError, match="read-only"):
            env.response_ids[0] = digit
        assert all(i == {} for i in result.infos[:-1])  # no per-step copies of the prefix
        sizes[length] = len(pickle.dumps((env.prompt_ids, env.response_ids, result)))
    # Doubling T doubles the bytes (a padded prefix per step would quadruple them).
    assert sizes[200] / sizes[100] < 2.2 and sizes[400] / sizes[200] < 2.2


def test_rebuild_state_from_prompt_actions_and_infos(tokenizer):
    env = make_env(tokenizer)
    _, info = env.reset(options={"prompt_index": 3})
    actions = [*ids(tokenizer, "12"), tokenizer.eos_token_id]
    result = env.step_chunk(actions)
    assert rebuild_state(info["prompt_ids"], actions, result.infos) == env.state_token_ids()
    # Tokens an environment appends after an action (a tool's output) are state, in order.
    multi_turn = rebuild_state([5, 6], [7, 8, 9], [{ENV_TOKENS: [40, 41]}, {}, {ENV_TOKENS: [42]}])
    assert multi_turn == [5, 6, 7, 40, 41, 8, 9, 42]
    with pytest.raises(ValueError, match=r"rebuild_state got 2 actions and 1 infos; pass one step "
                       r"info per action \(without the reset info\)"):  # fmt: skip
        rebuild_state([5], [7, 8], [{}])


def test_rllib_episode_from_a_chunk(tokenizer):
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    env = make_env(tokenizer)
    obs, info = env.reset(options={"prompt_index": 2})
    actions = [*ids(tokenizer, info["answer"]), tokenizer.eos_token_id]
    result = env.step_chunk(actions)
    episode = SingleAgentEpisode(
        observations=[obs, *result.observations],
        infos=[info, *result.infos],
        actions=actions,
        rewards=result.rewards,
        terminated=result.terminateds[-1],
        truncated=result.truncateds[-1],
        observation_space=env.observation_space,
        action_space=env.action_space,
        len_lookback_buffer=0,
    ).to_numpy()  # stacks Discrete observations; ragged ones would fail here
    infos = episode.get_infos()
    state = rebuild_state(infos[0]["prompt_ids"], episode.get_actions().tolist(), infos[1:])
    assert state == env.state_token_ids() and episode.get_return() == 1.0


# --- reset order --------------------------------------------------------------------------------
def test_reset_walks_a_seeded_shuffled_order_each_epoch(tokenizer):
    env = make_env(tokenizer, seed=3)
    n = env.num_problems
    first = [env.reset()[1]["prompt_index"] for _ in range(n)]
    second = [env.reset()[1]["prompt_index"] for _ in range(n)]
    assert sorted(first) == sorted(second) == list(range(n))
    assert first != second and first != sorted(first)  # reshuffled, not in dataset order
    same_seed = make_env(tokenizer, seed=3)
    assert [same_seed.reset()[1]["prompt_index"] for _ in range(n)] == first
    other_seed = make_env(tokenizer, seed=4)
    assert [other_seed.reset()[1]["prompt_index"] for _ in range(n)] != first


def test_reset_seed_reseeds_and_prompt_index_does_not_advance(tokenizer):
    a, b = make_env(tokenizer, seed=0), make_env(tokenizer, seed=1)
    a.reset()
    walk_a = [a.reset(seed=9)[1]["prompt_index"]] + [a.reset()[1]["prompt_index"] for _ in range(5)]
    walk_b = [b.reset(seed=9)[1]["prompt_index"]]
    b.reset(options={"prompt_index": 0})  # a group member: the order does not move
    walk_b += [b.reset()[1]["prompt_index"] for _ in range(5)]
    assert walk_a == walk_b


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"prompt_index": 145}, r"prompt_index=145 must be an integer in \[0, 145\); use an index"),
        ({"prompt_index": -1}, r"prompt_index=-1 must be an integer in \[0, 145\)"),
        ({"prompt_index": "3"}, r"prompt_index='3' must be an integer in \[0, 145\)"),
        ({"prompt_index": True}, r"prompt_index=True must be an integer"),
        ({"index": 3}, r"reset options \['index'\] are not supported; the valid options are \["),
    ],
)  # fmt: skip
def test_reset_option_errors(tokenizer, options, message):
    with pytest.raises(ValueError, match=message):
        make_env(tokenizer).reset(options=options)


def test_reset_accepts_numpy_prompt_index(tokenizer):
    assert make_env(tokenizer).reset(options={"prompt_index": np.int64(4)})[1]["prompt_index"] == 4


# --- config -------------------------------------------------------------------------------------
class NoEos:
    eos_token_id = None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"model": ""}, r"model='' must be a non-empty string; use e.g. 'embedded' or a checkpoint"),
        ({"tokenizer": NoEos()}, r"tokenizer=NoEos has no eos_token_id; episodes end at EOS: pass"),
        ({"dataset": 3}, r"dataset=3 must be a non-empty string; use e.g. 'arithmetic' or a path"),
        ({"split": ""}, r"split='' must be a non-empty string; use e.g. 'train' or 'test'"),
        ({"prompt_key": ""}, r"prompt_key='' must be a non-empty string; use the field that holds"),
        ({"answer_key": None}, r"answer_key=None must be a non-empty string; use the field that"),
        ({"dataset_kwargs": [1]}, r"dataset_kwargs=\[1\] must be a dict of keyword arguments; use"),
        ({"prompt_length": 0}, r"prompt_length=0 must be an integer >= 1; use e.g. 64"),
        ({"max_dropped_prompt_fraction": 1.5}, r"max_dropped_prompt_fraction=1.5 must be a number in \[0, 1\]; use e.g. 0.1"),
        ({"max_dropped_prompt_fraction": -0.1}, r"max_dropped_prompt_fraction=-0.1 must be a number in \[0, 1\]"),
        ({"max_dropped_prompt_fraction": None}, r"max_dropped_prompt_fraction=None must be a number in \[0, 1\]"),
        ({"response_length": 0}, r"response_length=0 must be an integer >= 1; use e.g. 16"),
        ({"response_length": 2.0}, r"response_length=2.0 must be an integer >= 1"),
        ({"answer_extraction": "x"}, r"answer_extraction='x' is not one of \['auto', 'boxed', "),
        ({"correct_score": float("nan")}, r"correct_score=nan must be a finite number; use e.g. 1"),
        ({"wrong_score": "0"}, r"wrong_score='0' must be a finite number; use e.g. 0.0"),
        ({"format_score": float("inf")}, r"format_score=inf must be a finite number; use e.g. 0"),
        ({"verify_timeout_s": 0}, r"verify_timeout_s=0 must be a finite number of seconds > 0; "),
        ({"verifier_workers": 0}, r"verifier_workers=0 must be an integer >= 1; use e.g. 1"),
        ({"seed": -1}, r"seed=-1 must be an integer >= 0; use e.g. 0, or None for no seed"),
        ({"respnse_length": 8}, r"unknown MathVerifyEnv config keys \['respnse_length'\]; the valid"),
    ],
)  # fmt: skip
def test_config_errors(tokenizer, overrides, message):
    with pytest.raises(ValueError, match=message):
        make_env(tokenizer, **overrides)


def write_prompts(path, prompts: list[str]) -> str:
    path.write_text("".join(json.dumps({"prompt": p, "answer": "0"}) + "\n" for p in prompts))
    return str(path)


def test_prompt_length_drops_long_prompts(tokenizer, tmp_path, caplog):
    # One token per character: nine prompts of 4 tokens, one of 6, a tenth of the data set.
    path = write_prompts(tmp_path / "p.jsonl", [f"{i}+1=" for i in range(1, 10)] + ["11+11="])
    env = make_env(tokenizer, dataset=path, dataset_kwargs={}, prompt_length=4)
    assert (env.num_problems, env.num_dropped_prompts, env.dropped_prompt_fraction) == (9, 1, 0.1)
    assert "dropped 1 of 10 prompts longer than prompt_length=4" in caplog.text
    with pytest.raises(ValueError, match=r"prompt_length=3 drops all 10 prompts of '.*p.jsonl': "
                       r"none has 1..3 tokens; raise prompt_length to at least 4"):  # fmt: skip
        make_env(tokenizer, dataset=path, dataset_kwargs={}, prompt_length=3)
    kept = make_env(tokenizer, dataset=path, dataset_kwargs={}, prompt_length=6)
    assert (kept.num_dropped_prompts, kept.dropped_prompt_fraction) == (0, 0.0)


def test_dropping_more_than_the_allowed_share_fails_the_build(tokenizer, tmp_path):
    path = write_prompts(tmp_path / "p.jsonl", ["1+1=", "2+2=", "11+11=", "111+111="])
    with pytest.raises(ValueError, match=r"prompt_length=4 drops 2 of 4 prompts of '.*p.jsonl' "
                       r"\(split='train'\) \(50.0%\), more than max_dropped_prompt_fraction=0.1; "
                       r"the longest prompt has 8 tokens \(chat template included\): raise "
                       r"prompt_length \(to 8 to keep them all\), or raise "
                       r"max_dropped_prompt_fraction to train on what is left"):  # fmt: skip
        make_env(tokenizer, dataset=path, dataset_kwargs={}, prompt_length=4)
    env = make_env(
        tokenizer, dataset=path, dataset_kwargs={}, prompt_length=4, max_dropped_prompt_fraction=0.5
    )
    assert (env.num_problems, env.num_dropped_prompts, env.dropped_prompt_fraction) == (2, 2, 0.5)
    with pytest.raises(ValueError, match=r"drops 1 of 4 prompts .* \(25.0%\), more than "
                       r"max_dropped_prompt_fraction=0.0; the longest prompt has 8 tokens"):  # fmt: skip
        make_env(tokenizer, dataset=path, dataset_kwargs={}, prompt_length=6,
                 max_dropped_prompt_fraction=0.0)  # fmt: skip


def test_a_prompt_length_hint_is_one_the_models_context_can_follow(tmp_path):
    """The embedded model's context is 128 tokens, one per character: a hint to raise
    prompt_length past what it leaves beside response_length was refused by the config next."""
    from rllib_llm.algorithm.config import RLVRConfig

    def env(prompts: list[str], **settings) -> MathVerifyEnv:
        # A file per call: problem sets are cached per process by path.
        path = write_prompts(tmp_path / f"p{len(list(tmp_path.iterdir()))}.jsonl", prompts)
        return MathVerifyEnv(model="embedded", dataset=path, dataset_kwargs={}, **settings)

    # Every prompt longer than the context: no prompt_length can take them.
    with pytest.raises(ValueError, match=r"drops all 3 prompts .*; the shortest has 130 tokens, "
                       r"more than the model's context of 128 tokens holds beside a response: "
                       r"this model cannot take these prompts; use a model with a longer "
                       r"context, or shorter prompts$"):  # fmt: skip
        env(["1" * 130, "1" * 131, "1" * 140], prompt_length=64, response_length=6)
    # They fit with a shorter response: the hint says both, and following it works.
    with pytest.raises(ValueError, match=r"; raise prompt_length to at least 100 and lower "
                       r"response_length=40 to at most 28 \(prompt_length \+ response_length "
                       r"must fit the model's context of 128 tokens\)$"):  # fmt: skip
        env(["1" * 100] * 3, prompt_length=64, response_length=40)
    assert env(["1" * 100] * 3, prompt_length=100, response_length=28).num_problems == 3
    RLVRConfig().training(prompt_length=100, response_length=28).validate()
    # Too many dropped: the same, for the longest.
    short = ["1+1="] * 8
    with pytest.raises(ValueError, match=r"the longest prompt has 120 tokens \(chat template "
                       r"included\): raise prompt_length to 120 and lower response_length=16 to "
                       r"at most 8 to keep them all \(.*\), or raise max_dropped_prompt_fraction"):  # fmt: skip
        env(short + ["1" * 120] * 2, prompt_length=64, response_length=16)
    with pytest.raises(ValueError, match=r"the longest prompt has 130 tokens \(chat template "
                       r"included\): the model's context of 128 tokens cannot hold the longest "
                       r"beside a response: raise prompt_length to at most 122 \(with "
                       r"response_length=6; lower that for more\), or raise "
                       r"max_dropped_prompt_fraction"):  # fmt: skip
        env(short + ["1" * 130] * 2, prompt_length=64, response_length=6)
    with pytest.raises(ValueError, match=r"cannot hold the longest beside a response: "
                       r"prompt_length cannot rise \(with response_length=6"):  # fmt: skip
        env(short + ["1" * 130] * 2, prompt_length=122, response_length=6)
    # Where the context holds them, the hint is the plain one.
    with pytest.raises(ValueError, match=r"raise prompt_length \(to 100 to keep them all\), or"):
        env(short + ["1" * 100] * 2, prompt_length=64, response_length=6)


def test_tokenizer_by_name_without_eos(tmp_path):
    stand_in_tokenizer(eos=False).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"model='.*' gives a tokenizer without eos_token_id; "
                       r"episodes end at EOS: use a tokenizer with an EOS token"):  # fmt: skip
        MathVerifyEnv(model=str(tmp_path), dataset_kwargs=SMALL)


def test_default_config_uses_the_embedded_tokenizer_and_full_arithmetic(embedded):
    env = MathVerifyEnv()
    assert len(env.tokenizer) == len(embedded) and env.split == "train"
    assert env.num_problems > 10_000 and env.response_length == 16
    _, info = env.reset(options={"prompt_index": 0})
    result = env.step_chunk([*ids(env.tokenizer, info["answer"]), env.eos_token_id])
    assert result.rewards[-1] == 1.0
    env.close()


def test_close_releases_the_shared_verifier(tokenizer):
    a, b = make_env(tokenizer, verify_timeout_s=7.0), make_env(tokenizer, verify_timeout_s=7.0)
    assert a.verifier is b.verifier
    a.close()
    a.close()  # idempotent: b's hold is untouched
    b.reset()
    b.step(tokenizer.eos_token_id)
    b.close()
    assert a.verifier.closed


# --- registration -------------------------------------------------------------------------------
def test_gymnasium_make_with_config_or_keywords(tokenizer):
    register_envs()
    register_envs()  # idempotent
    config = {"tokenizer": tokenizer, "dataset_kwargs": SMALL, "response_length": 5}
    by_config = gymnasium.make("math_verify", config=config)
    by_keywords = gymnasium.make("math_verify", **config)
    both = gymnasium.make("math_verify", config=config, response_length=2)
    assert isinstance(by_config.unwrapped, MathVerifyEnv)
    assert by_keywords.unwrapped.response_length == 5 and both.unwrapped.response_length == 2
    by_config.reset(seed=0)  # through gymnasium's env checker
    _, reward, terminated, _, _ = by_config.step(tokenizer.eos_token_id)
    assert terminated and reward == 0.0
    for env in (by_config, by_keywords, both):
        env.close()


def test_ray_tune_registry_creates_the_env_from_an_env_context(tokenizer):
    from ray.rllib.env.env_context import EnvContext
    from ray.tune.registry import ENV_CREATOR, _global_registry

    register_envs()
    creator = _global_registry.get(ENV_CREATOR, "math_verify")
    context = EnvContext({"tokenizer": tokenizer, "dataset_kwargs": SMALL}, worker_index=1)
    env = creator(context)
    assert isinstance(env, MathVerifyEnv) and env.num_problems == 145
    env.close()


def test_importing_the_package_stays_light():
    import subprocess
    import sys

    code = (
        "import sys, rllib_llm.envs; "
        "heavy = {'vllm', 'sympy', 'math_verify', 'datasets', 'transformers'} & set(sys.modules); "
        "print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- shares of the data (several env runners) ---------------------------------------------------
def test_shards_with_one_seed_draw_disjoint_problems_in_step(embedded):
    envs = [make_env(embedded) for _ in range(3)]
    n = envs[0].num_problems
    for shard, env in enumerate(envs):
        env.shard_order(shard, 3, seed=7)
    per_epoch = n // 3
    for _ in range(2):  # two epochs, each with a fresh shuffle
        draws = [[env.reset()[1]["prompt_index"] for _ in range(per_epoch)] for env in envs]
        flat = [i for d in draws for i in d]
        assert len(set(flat)) == len(flat) == 3 * per_epoch  # disjoint, no repeats
    with pytest.raises(ValueError, match="shard=3 must be in"):
        envs[0].shard_order(3, 3, seed=7)
    with pytest.raises(ValueError, match="would leave some empty"):
        envs[0].shard_order(0, n + 1, seed=7)
