"""The agent gateway (`rollout/gateway`) driven by the official `openai` client, sync and async:
OpenAI's wire format, per-episode keys, errors in OpenAI's format, and requests of many episodes
decoded together with the answers each would get alone."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import torch

openai = pytest.importorskip("openai")

from rllib_llm.models import load_model_and_tokenizer  # noqa: E402
from rllib_llm.rollout.engine import SamplingParams  # noqa: E402
from rllib_llm.rollout.gateway.episodes import EpisodeBounds  # noqa: E402
from rllib_llm.rollout.gateway.server import Gateway  # noqa: E402
from rllib_llm.rollout.gateway.service import ServiceSettings  # noqa: E402
from rllib_llm.rollout.torch_engine import TorchRolloutEngine  # noqa: E402

torch.set_num_threads(1)
PROMPTS = ["12+34=", "7*8=", "99-45=", "3+3=", "41+17=", "6*7=", "80-9=", "5+50="]


class CountingEngine:
    """The torch engine, counting its `generate` calls and the prompts they decoded."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []

    @property
    def weight_version(self):
        return self.engine.weight_version

    def generate(self, prompt_ids, n, sampling):
        self.calls.append(len(prompt_ids) * n)
        return self.engine.generate(prompt_ids, n, sampling)


@pytest.fixture(scope="module")
def parts():
    model, tokenizer = load_model_and_tokenizer("embedded")
    engine = CountingEngine(TorchRolloutEngine(model, eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id))
    # Wide windows: on 2 shared cores, 8 clients' requests arrive within them.
    with Gateway(engine, tokenizer, ServiceSettings(model_name="embedded",
                                                    default_max_tokens=6),
                 window_s=0.05, max_wait_s=0.2) as gateway:
        yield gateway, engine, tokenizer


def client_of(gateway, **bounds):
    episode = gateway.open_episode(EpisodeBounds(**bounds))
    return episode, openai.OpenAI(base_url=episode.base_url, api_key=episode.api_key,
                                  max_retries=0)


def test_models_and_a_chat_completion_through_the_openai_client(parts):
    gateway, engine, tokenizer = parts
    episode, client = client_of(gateway)
    assert [m.id for m in client.models.list().data] == ["embedded"]
    out = client.chat.completions.create(model=episode.model, max_tokens=6, temperature=0,
                                         messages=[{"role": "user", "content": "12+34="}],
                                         logprobs=True)
    choice = out.choices[0]
    record = gateway.close_episode(episode)
    (call,) = record.calls
    # The answer is the engine's greedy decode of the prompt the embedded model is trained on.
    prompt = tokenizer("12+34=")["input_ids"]
    (direct,) = engine.engine.generate([prompt], 1, SamplingParams(temperature=0, max_tokens=6))[0:1]
    assert list(call.prompt_ids) == prompt and list(call.completion_ids) == direct[0].token_ids
    assert choice.message.content == tokenizer.decode(direct[0].token_ids, skip_special_tokens=True)
    assert choice.finish_reason == direct[0].finish_reason
    assert [t.logprob for t in choice.logprobs.content] == pytest.approx(direct[0].logprobs, abs=1e-5)
    assert out.usage.prompt_tokens == len(prompt)
    assert out.usage.completion_tokens == len(direct[0].token_ids)


def test_text_completions_take_token_ids_and_report_logprobs(parts):
    gateway, engine, tokenizer = parts
    episode, client = client_of(gateway)
    prompt = tokenizer("7*8=")["input_ids"]
    out = client.completions.create(model=episode.model, prompt=prompt, max_tokens=4,
                                    temperature=0, logprobs=1)
    (call,) = gateway.close_episode(episode).calls
    assert list(call.prompt_ids) == prompt
    assert out.choices[0].logprobs.token_logprobs == pytest.approx(list(call.logprobs))
    assert out.choices[0].text == tokenizer.decode(list(call.completion_ids),
                                                   skip_special_tokens=True)


def test_a_request_without_a_valid_key_gets_401(parts):
    gateway, _, _ = parts
    episode, _ = client_of(gateway)
    wrong = openai.OpenAI(base_url=episode.base_url, api_key="sk-not-an-episode", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as raised:
        wrong.models.list()
    assert raised.value.status_code == 401 and raised.value.code == "invalid_api_key"
    gateway.close_episode(episode)
    closed = openai.OpenAI(base_url=episode.base_url, api_key=episode.api_key, max_retries=0)
    with pytest.raises(openai.AuthenticationError):  # a finished episode's key stops working
        closed.models.list()
    assert httpx.get(f"{episode.base_url}/models").status_code == 401  # no key at all


@pytest.mark.parametrize(("body", "param"), [
    (b"{not json", None),
    (b'{"messages": [{"role": "user", "content": "1+1="}], "temperature": "hot"}', "temperature"),
    (b'{"messages": []}', "messages"),
    (b'{"messages": [{"role": "wizard", "content": "x"}]}', "messages.0.role"),
    (b'{"messages": [{"role": "user", "content": "1+1="}], "stream": true}', "stream"),
    (b'{"messages": [{"role": "user", "content": "1+1="}], "n": 0}', "n"),
])
def test_a_malformed_request_gets_400_with_an_openai_error_body(parts, body, param):
    gateway, _, _ = parts
    episode, _ = client_of(gateway)
    reply = httpx.post(f"{episode.base_url}/chat/completions", content=body,
                       headers={"Authorization": f"Bearer {episode.api_key}",
                                "Content-Type": "application/json"})
    gateway.close_episode(episode)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and "Traceback" not in error["message"]
    if param is not None:
        assert error["param"] == param


def test_past_a_bound_the_call_is_refused_in_openai_format_and_the_episode_is_cut(parts):
    gateway, _, _ = parts
    episode, client = client_of(gateway, max_calls=1)
    messages = [{"role": "user", "content": "1+1="}]
    client.chat.completions.create(model=episode.model, messages=messages, max_tokens=2)
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=episode.model, messages=messages, max_tokens=2)
    assert raised.value.code == "max_calls_exceeded"
    assert gateway.close_episode(episode).truncated_by == "max_calls"
    episode, client = client_of(gateway, max_total_tokens=4)
    with pytest.raises(openai.BadRequestError) as raised:  # "12+34=" is 6 tokens
        client.chat.completions.create(model=episode.model, messages=[
            {"role": "user", "content": "12+34="}])
    assert raised.value.code == "context_length_exceeded"
    assert gateway.close_episode(episode).truncated_by == "max_total_tokens"


def test_concurrent_episodes_share_engine_calls_and_each_gets_its_own_answer(parts):
    gateway, engine, tokenizer = parts
    episodes = [gateway.open_episode() for _ in PROMPTS]

    async def agent(episode, prompt):
        async with openai.AsyncOpenAI(base_url=episode.base_url, api_key=episode.api_key,
                                      max_retries=0) as client:
            out = await client.chat.completions.create(
                model=episode.model, messages=[{"role": "user", "content": prompt}],
                max_tokens=6, temperature=0)
            return out.choices[0].message.content

    async def run_all():
        return await asyncio.gather(*(agent(e, p) for e, p in zip(episodes, PROMPTS)))

    engine.calls.clear()
    answers = asyncio.run(run_all())
    for episode in episodes:
        gateway.close_episode(episode)
    assert sum(engine.calls) == len(PROMPTS) and len(engine.calls) <= 3, engine.calls
    alone = engine.engine.generate([tokenizer(p)["input_ids"] for p in PROMPTS], 1,
                                   SamplingParams(temperature=0, max_tokens=6))
    assert answers == [tokenizer.decode(g[0].token_ids, skip_special_tokens=True) for g in alone]


def test_a_lone_episode_does_not_wait_out_the_window_and_one_among_others_does(parts):
    """A batch holding a request per open episode is decoded at once; with another episode open
    (maybe about to call) the request waits for the window."""
    import time

    _, engine, tokenizer = parts
    with Gateway(engine.engine, tokenizer, ServiceSettings(default_max_tokens=2),
                 window_s=0.5, max_wait_s=0.5) as gateway:
        episode, client = client_of(gateway)
        messages = [{"role": "user", "content": "1+1="}]
        client.chat.completions.create(model="m", messages=messages)  # (warm-up)
        start = time.perf_counter()
        client.chat.completions.create(model="m", messages=messages)
        alone = time.perf_counter() - start
        other = gateway.open_episode()
        start = time.perf_counter()
        client.chat.completions.create(model="m", messages=messages)
        among = time.perf_counter() - start
        gateway.close_episode(other)
        gateway.close_episode(episode)
    assert alone < 0.4 <= 0.5 <= among, (alone, among)


def test_requests_differing_only_in_max_tokens_share_one_engine_call_each_cut_at_its_own(parts):
    """An episode's `max_tokens` is the room its context has left, so concurrent multi-turn
    episodes rarely agree on it: they are decoded in one call to the largest limit, and each
    response is what a call with its own limit gives (counted, not timed)."""
    from rllib_llm.rollout.gateway.batching import EngineBatcher

    _, engine, tokenizer = parts
    prompts = [tokenizer("12+34=")["input_ids"], tokenizer("99-45=")["input_ids"],
               tokenizer("41+17=")["input_ids"]]  # one length: no padding differs
    limits = [1, 2, 6]

    async def run():
        batcher = EngineBatcher(engine, window_s=0.5, max_wait_s=5.0,
                                open_episodes=lambda: len(prompts))
        loop_task = asyncio.create_task(batcher.engine_loop())
        try:
            return await asyncio.gather(*(
                batcher.generate(p, 1, SamplingParams(temperature=0, max_tokens=m))
                for p, m in zip(prompts, limits)))
        finally:
            loop_task.cancel()
            batcher.close()

    engine.calls.clear()
    generated = asyncio.run(run())
    assert engine.calls == [len(prompts)]  # the three together, at once (everyone waits)
    for i, (m, g) in enumerate(zip(limits, generated)):
        (alone,) = engine.engine.generate(prompts, 1, SamplingParams(temperature=0,
                                                                     max_tokens=m))[i]
        (response,) = g.responses
        assert (response.token_ids, response.finish_reason) == (alone.token_ids,
                                                                 alone.finish_reason)
        assert response.logprobs == pytest.approx(alone.logprobs, abs=1e-5)
    assert generated[0].responses[0].finish_reason == "length"  # a cut one is among them


def test_with_a_context_bound_a_call_keeps_each_prompt_plus_the_largest_limit_within_it():
    from rllib_llm.rollout.gateway.batching import fit_context

    shapes = [(90, 10), (10, 90), (50, 40), (95, 5)]  # (prompt length, max_tokens), each = 100
    assert fit_context(shapes, None) == [[0, 1, 2, 3]]
    calls = fit_context(shapes, 100)
    assert sorted(i for c in calls for i in c) == [0, 1, 2, 3]
    for call in calls:
        assert max(shapes[i][0] for i in call) + max(shapes[i][1] for i in call) <= 100
    assert fit_context(shapes, 200) == [[1, 2, 0, 3]]  # all fit: largest limit first
