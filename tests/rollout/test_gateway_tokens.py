"""Token in, token out (issue 48, item 3): what the gateway records is what the engine sampled,
and an assistant message the gateway produced keeps its sampled ids in later prompts even where
re-tokenizing its text gives other ids (a BPE merge). Calls stitch into one token-level sequence
whose state tokens (template markers, the user's and tool's messages) carry mask 0; a rewritten
history starts another sequence (`prefix_breaks`)."""

from __future__ import annotations

import pytest
from gateway_fakes import ScriptedEngine, bpe_chat_tokenizer

openai = pytest.importorskip("openai")

from rllib_llm.rollout.gateway.server import Gateway  # noqa: E402
from rllib_llm.rollout.gateway.trajectories import Call, stitch  # noqa: E402

TOK = bpe_chat_tokenizer()
EOS = TOK.eos_token_id
A, B, C = (TOK.convert_tokens_to_ids(t) for t in "abc")


def test_the_trap_is_real():
    """Re-tokenizing the sampled text "ab" gives one merged id, not the two sampled ones."""
    assert TOK.encode("ab", add_special_tokens=False) != [A, B]
    assert TOK.decode([A, B]) == "ab"


def chat(client, episode, messages):
    return client.chat.completions.create(model=episode.model, messages=messages)


def test_later_calls_reuse_the_sampled_ids_and_stitch_into_one_sequence():
    first, second = ([A, B, EOS], [-0.5, -0.25, -0.125]), ([C, EOS], [-1.5, -0.75])
    engine = ScriptedEngine([first, second])
    with Gateway(engine, TOK, window_s=0.0) as gateway:
        episode = gateway.open_episode()
        client = openai.OpenAI(base_url=episode.base_url, api_key=episode.api_key, max_retries=0)
        messages = [{"role": "user", "content": "q"}]
        reply = chat(client, episode, messages).choices[0].message
        assert reply.content == "ab"
        # The agent sends the reply back as the openai client gives it (with its extra fields).
        messages += [reply.model_dump(exclude_none=True), {"role": "user", "content": "go"}]
        assert chat(client, episode, messages).choices[0].message.content == "c"
        record = gateway.close_episode(episode)
    prompt_1 = TOK.encode(TOK.apply_chat_template(messages[:1], add_generation_prompt=True,
                                                  tokenize=False), add_special_tokens=False)
    between = TOK.encode("\n<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n",
                         add_special_tokens=False)
    assert engine.prompts == [prompt_1, [*prompt_1, A, B, EOS, *between]]
    assert record.reused_messages == 2  # the second prompt kept the sampled ids of the reply
    (sequence,), breaks = stitch(record.calls)
    assert breaks == 0
    # What is trained is what was sampled: the actions are the sampled ids with the engine's
    # log-probs and version; every other token is state.
    assert sequence.prompt_ids == prompt_1
    assert sequence.actions == [A, B, EOS, C, EOS]
    assert sequence.logprobs == [*first[1], *second[1]]
    assert sequence.weight_versions == [7] * 5
    assert sequence.tokens() == [*prompt_1, A, B, EOS, *between, C, EOS]
    assert sequence.action_mask() == [0] * len(prompt_1) + [1, 1, 1] + [0] * len(between) + [1, 1]


def test_a_reply_cut_before_its_end_of_turn_gets_the_end_of_turn_as_state():
    engine = ScriptedEngine([([A, B], [-0.5, -0.5]), ([C, EOS], [-1.0, -1.0])])
    with Gateway(engine, TOK, window_s=0.0) as gateway:
        episode = gateway.open_episode()
        client = openai.OpenAI(base_url=episode.base_url, api_key=episode.api_key, max_retries=0)
        messages = [{"role": "user", "content": "q"}]
        reply = chat(client, episode, messages).choices[0].message
        chat(client, episode, [*messages, {"role": "assistant", "content": reply.content},
                               {"role": "user", "content": "go"}])
        (sequence,), _ = stitch(gateway.close_episode(episode).calls)
    assert sequence.actions == [A, B, C, EOS]
    assert sequence.env_tokens[1][0] == EOS  # the template's end of turn, not the model's


def test_a_rewritten_history_starts_another_sequence_counted_as_a_prefix_break():
    engine = ScriptedEngine([([A, EOS], [-0.5, -0.5]), ([B, EOS], [-0.5, -0.5]),
                             ([C, EOS], [-0.5, -0.5])])
    with Gateway(engine, TOK, window_s=0.0) as gateway:
        episode = gateway.open_episode()
        client = openai.OpenAI(base_url=episode.base_url, api_key=episode.api_key, max_retries=0)
        messages = [{"role": "user", "content": "q"}]
        reply = chat(client, episode, messages).choices[0].message
        messages += [{"role": "assistant", "content": reply.content},
                     {"role": "user", "content": "go"}]
        chat(client, episode, messages)
        # The agent summarises: the first exchange is replaced by a note.
        chat(client, episode, [{"role": "user", "content": "summary: a. go"}])
        record = gateway.close_episode(episode)
    sequences, breaks = stitch(record.calls)
    assert breaks == 1 and [s.actions for s in sequences] == [[A, EOS, B, EOS], [C, EOS]]


def test_stitch_continues_the_longest_sequence_the_prompt_extends():
    calls = [Call((1, 2), (3,), (-0.1,), 0), Call((9,), (4,), (-0.2,), 0),
             Call((1, 2, 3, 5), (6,), (-0.3,), 1)]
    sequences, breaks = stitch(calls)
    assert breaks == 1
    assert sequences[0].tokens() == [1, 2, 3, 5, 6] and sequences[0].env_tokens == {0: [5]}
    assert sequences[0].weight_versions == [0, 1] and sequences[1].actions == [4]
