"""Token in, token out (issue 48, item 3): what the gateway records is what the engine sampled,
and an assistant message the gateway produced keeps its sampled ids in later prompts even where
re-tokenizing its text gives other ids (a BPE merge). Calls stitch into one token-level sequence
whose state tokens (template markers, the user's and tool's messages) carry mask 0; a rewritten
history starts another sequence (`prefix_breaks`).

The same holds with the real engines, torch and vLLM (`@pytest.mark.vllm`), sampling from a model
made to fall into the trap (`gateway_models.chain_llama`): the trained ids are the sampled ids,
and the stored log-probs are the engine's, those of a teacher-forced forward at the sampling
temperature, as are the top-k alternatives the client is answered (`top_logprobs`)."""

from __future__ import annotations

import gc

import pytest
import torch
from gateway_fakes import ScriptedEngine, bpe_chat_tokenizer
from gateway_models import chain_llama
from transformers import LlamaForCausalLM

openai = pytest.importorskip("openai")

from rllib_llm.rollout.engine import SamplingParams  # noqa: E402
from rllib_llm.rollout.gateway.episodes import MAX_TOTAL_TOKENS, EpisodeBounds  # noqa: E402
from rllib_llm.rollout.gateway.server import Gateway  # noqa: E402
from rllib_llm.rollout.gateway.service import ServiceSettings  # noqa: E402
from rllib_llm.rollout.gateway.trajectories import Call, stitch  # noqa: E402
from rllib_llm.rollout.torch_engine import TorchRolloutEngine  # noqa: E402

TOK = bpe_chat_tokenizer()
EOS = TOK.eos_token_id
A, B, C = (TOK.convert_tokens_to_ids(t) for t in "abc")
NEWLINE = TOK.convert_tokens_to_ids("\n")


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


# --- the real engines -----------------------------------------------------------------------
# Training forces the config's temperature on every request: the log-probs must be at it.
FORCED = SamplingParams(temperature=0.7)
# vLLM's kernels differ from a Hugging Face forward by ~1e-6 in float32 (vllm_engine.py); the
# torch engine computes as the learner does.
TOLERANCE = {"torch": 1e-5, "vllm": 1e-4}


@pytest.fixture(scope="module")
def chain_model_dir(tmp_path_factory):
    """After the generation prompt's newline the model says "a", then "b", then ends its turn."""
    return chain_llama(tmp_path_factory.mktemp("chain_llama"), TOK,
                       {NEWLINE: A, A: B, B: EOS})


@pytest.fixture(scope="module")
def hf_model(chain_model_dir) -> LlamaForCausalLM:
    return LlamaForCausalLM.from_pretrained(chain_model_dir).eval()


@pytest.fixture(scope="module", autouse=True)
def engines_collected_before_the_next_module():
    """A vLLM engine shuts down when it is collected, and its shutdown tears down vLLM's
    process-wide parallel state: collected later, during another module's tests, it broke that
    module's engine ("pipeline model parallel group is not initialized"). Torn down after the
    engine fixtures (set up first), so their cached engines are released by then."""
    yield
    gc.collect()


@pytest.fixture(scope="module", params=["torch", pytest.param("vllm", marks=pytest.mark.vllm)])
def real_engine(request, chain_model_dir, hf_model):
    if request.param == "vllm":
        pytest.importorskip("vllm")
        from rllib_llm.rollout.vllm_engine import VLLMRolloutEngine

        return request.param, VLLMRolloutEngine(str(chain_model_dir), eos_token_id=EOS)
    model = LlamaForCausalLM.from_pretrained(chain_model_dir)
    return request.param, TorchRolloutEngine(model, eos_token_id=EOS,
                                             pad_token_id=TOK.pad_token_id)


def teacher_forced(model, tokens: list[int], temperature: float) -> torch.Tensor:
    """log_softmax(logits / T) predicting each token from those before it, `(len(tokens) - 1,
    V)`: the learner's quantity."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0, :-1].float()  # (L - 1, V)
    return torch.log_softmax(logits / temperature, dim=-1)


def check_top_logprobs(entries, sampled: list[float], k: int) -> None:
    """k alternatives per token, sorted, the first at least as likely as the sampled token,
    which reports the log-prob the trajectory records."""
    assert [e.logprob for e in entries] == sampled
    for entry in entries:
        alternatives = [t.logprob for t in entry.top_logprobs]
        assert len(alternatives) == k and alternatives == sorted(alternatives, reverse=True)
        assert alternatives[0] >= entry.logprob
        assert all(t.bytes == list(t.token.encode()) for t in entry.top_logprobs)


def test_the_real_engines_train_the_sampled_ids_with_their_logprobs(real_engine, hf_model):
    name, engine = real_engine
    with Gateway(engine, TOK, ServiceSettings(forced=FORCED), window_s=0.0) as gateway:
        episode = gateway.open_episode()
        client = openai.OpenAI(base_url=episode.base_url, api_key=episode.api_key, max_retries=0)
        messages, replies = [{"role": "user", "content": "q"}], []
        for turn in range(2):
            choice = client.chat.completions.create(
                model=episode.model, messages=messages, max_tokens=6, seed=turn,
                temperature=1.3, logprobs=True, top_logprobs=3).choices[0]
            replies.append(choice)
            messages += [choice.message.model_dump(exclude_none=True),
                         {"role": "user", "content": "go"}]
        record = gateway.close_episode(episode)
    # Both replies fell into the trap: "ab" sampled as two ids, which its text re-encodes as one.
    assert [r.message.content for r in replies] == ["ab", "ab"]
    assert [list(c.completion_ids) for c in record.calls] == [[A, B, EOS]] * 2
    (sequence,), breaks = stitch(record.calls)
    assert breaks == 0 and record.reused_messages == 2
    assert sequence.actions == [A, B, EOS, A, B, EOS]
    assert sequence.weight_versions == [engine.weight_version] * 6
    # The stored log-probs are the engine's: what the client was answered, and the learner's
    # teacher-forced log-probs at the forced temperature (not the request's 1.3).
    for reply, call in zip(replies, record.calls, strict=True):
        check_top_logprobs(reply.logprobs.content, list(call.logprobs), k=3)
    tokens, mask = sequence.tokens(), sequence.action_mask()
    teacher = teacher_forced(hf_model, tokens, FORCED.temperature)  # (L - 1, V)
    positions = [i - 1 for i, m in enumerate(mask) if m]
    expected = teacher[positions].gather(-1, torch.tensor(sequence.actions)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(sequence.logprobs), expected, atol=TOLERANCE[name], rtol=0)
    # ... and so are the alternatives: the teacher's top 3 ids and log-probs.
    top = teacher[positions].topk(3, dim=-1)
    answered = [e.top_logprobs for r in replies for e in r.logprobs.content]
    assert [[TOK.convert_tokens_to_ids(t.token) for t in a] for a in answered] == \
        top.indices.tolist()
    assert torch.allclose(torch.tensor([[t.logprob for t in a] for a in answered]), top.values,
                          atol=TOLERANCE[name], rtol=0)


def test_text_completions_answer_top_logprobs_as_dicts(real_engine, hf_model):
    name, engine = real_engine
    with Gateway(engine, TOK, window_s=0.0) as gateway:
        episode = gateway.open_episode()
        client = openai.OpenAI(base_url=episode.base_url, api_key=episode.api_key, max_retries=0)
        # After "xyz" the model's logits are its random ones: alternatives of distinct mass.
        choice = client.completions.create(model=episode.model, prompt="xyz", max_tokens=4,
                                           seed=0, logprobs=5).choices[0]
        (call,) = gateway.close_episode(episode).calls
    logprobs = choice.logprobs
    assert logprobs.token_logprobs == list(call.logprobs)
    teacher = teacher_forced(hf_model, [*call.prompt_ids, *call.completion_ids], 1.0)
    top = teacher[len(call.prompt_ids) - 1:].topk(5, dim=-1)
    for alternatives, ids, values, sampled in zip(logprobs.top_logprobs, top.indices,
                                                  top.values, call.logprobs, strict=True):
        assert list(alternatives) == TOK.batch_decode([[i] for i in ids.tolist()])
        assert torch.allclose(torch.tensor(list(alternatives.values())), values,
                              atol=TOLERANCE[name], rtol=0)
        assert max(alternatives.values()) >= sampled


def test_top_p_leaves_torchs_alternatives_and_cuts_vllms_to_the_nucleus(real_engine, hf_model):
    """Under top-p the torch engine reports log-probs before the filter, as the learner computes
    them; vLLM renormalises over the nucleus (vllm_engine.py), so a token outside it has -inf,
    answered -9999.0 (JSON has no infinity)."""
    name, engine = real_engine
    forced = SamplingParams(temperature=1.0, top_p=0.5)
    with Gateway(engine, TOK, ServiceSettings(forced=forced), window_s=0.0) as gateway:
        episode = gateway.open_episode()
        client = openai.OpenAI(base_url=episode.base_url, api_key=episode.api_key, max_retries=0)
        # After the generation prompt's newline "a" holds ~all the mass: a nucleus of one token.
        first = client.chat.completions.create(
            model=episode.model, messages=[{"role": "user", "content": "q"}], max_tokens=1,
            seed=0, logprobs=True, top_logprobs=2).choices[0].logprobs.content[0]
        (call,) = gateway.close_episode(episode).calls
    assert call.completion_ids == (A,) and [t.token for t in first.top_logprobs][0] == "a"
    if name == "vllm":
        assert first.logprob == 0.0 and first.top_logprobs[1].logprob == -9999.0
    else:
        teacher = teacher_forced(hf_model, [*call.prompt_ids, A], 1.0)[-1].topk(2)
        assert torch.allclose(torch.tensor([t.logprob for t in first.top_logprobs]),
                              teacher.values, atol=TOLERANCE[name], rtol=0)


@pytest.mark.parametrize("real_engine", [pytest.param("vllm", marks=pytest.mark.vllm)],
                         indirect=True)
def test_a_prompt_past_vllms_context_gets_400_not_a_failed_batch(real_engine):
    """vLLM refuses a prompt longer than its max_model_len (the chain model's: 128) by failing
    its whole engine call, every waiting episode's request with it: the gateway answers such a
    prompt 400 itself, as past the episode's bound, and the episode ends truncated."""
    _, engine = real_engine
    with Gateway(engine, TOK, window_s=0.0) as gateway:
        episode = gateway.open_episode(EpisodeBounds(max_total_tokens=10_000))
        client = openai.OpenAI(base_url=episode.base_url, api_key=episode.api_key, max_retries=0)
        with pytest.raises(openai.BadRequestError) as error:
            client.chat.completions.create(model=episode.model, messages=[
                {"role": "user", "content": "x" * engine.max_model_len}])
        record = gateway.close_episode(episode)
    assert error.value.code == "context_length_exceeded" and "128 tokens" in str(error.value)
    assert record.truncated_by == MAX_TOTAL_TOKENS and record.calls == []


@pytest.mark.parametrize("kind, asked", [("chat", {"logprobs": True, "top_logprobs": 21}),
                                         ("chat", {"top_logprobs": 2}),
                                         ("completions", {"logprobs": 6})])
def test_top_logprobs_past_openais_bounds_get_400(kind, asked):
    """OpenAI's bounds: top_logprobs 0..20 with logprobs=true; a text completion's 0..5."""
    engine = ScriptedEngine([])
    with Gateway(engine, TOK, window_s=0.0) as gateway:
        episode = gateway.open_episode()
        client = openai.OpenAI(base_url=episode.base_url, api_key=episode.api_key, max_retries=0)
        with pytest.raises(openai.BadRequestError) as error:
            if kind == "chat":
                client.chat.completions.create(model=episode.model, messages=[
                    {"role": "user", "content": "q"}], **asked)
            else:
                client.completions.create(model=episode.model, prompt="q", **asked)
    assert "logprobs" in str(error.value) and engine.prompts == []
