"""Tool calls in the model's own format (issue 48, item 4): the chat template renders `tools` and
tool messages; Hermes/Qwen `<tool_call>{json}</tool_call>` and the embedded model's
`<python>CODE</python>` become OpenAI `tool_calls` with finish_reason "tool_calls"; a malformed
call stays plain content and is counted; the model's tool-call tokens are kept for the next
prompt, the tool's output is state."""

from __future__ import annotations

import json

import pytest
from gateway_fakes import CHATML_TOOLS, ScriptedEngine, bpe_chat_tokenizer

openai = pytest.importorskip("openai")

from rllib_llm.models import load_tokenizer  # noqa: E402
from rllib_llm.rollout.gateway.server import Gateway  # noqa: E402
from rllib_llm.rollout.gateway.tool_calls import parse_tool_calls  # noqa: E402
from rllib_llm.rollout.gateway.trajectories import stitch  # noqa: E402

PYTHON = {"type": "function", "function": {
    "name": "python", "description": "Run Python code and see its stdout",
    "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                   "required": ["code"]}}}


def test_hermes_calls_parse_into_openai_tool_calls():
    text = ('Let me compute. <tool_call>{"name": "python", "arguments": {"code": "print(2)"}}'
            '</tool_call><tool_call>{"name": "python", "arguments": {"code": "1"}}</tool_call>')
    parsed = parse_tool_calls(text, [PYTHON])
    assert parsed.content == "Let me compute." and parsed.malformed == 0
    assert [json.loads(c["function"]["arguments"]) for c in parsed.tool_calls] == [
        {"code": "print(2)"}, {"code": "1"}]
    assert {c["type"] for c in parsed.tool_calls} == {"function"}
    assert len({c["id"] for c in parsed.tool_calls}) == 2


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "python", "arguments": {"code": </tool_call>',  # bad JSON
    '<tool_call>{"name": "shell", "arguments": {}}</tool_call>',  # a tool not offered
    '<tool_call>{"arguments": {}}</tool_call>',  # no name
    '<tool_call>{"name": "python", "arguments": "x"}</tool_call>',  # arguments not an object
    '<tool_call>{"name": "python", "arguments": {}}',  # never closed
])
def test_a_malformed_call_stays_content_and_is_counted(text):
    parsed = parse_tool_calls(text, [PYTHON])
    assert parsed.content == text and parsed.tool_calls == [] and parsed.malformed == 1


def test_without_tools_or_a_call_the_text_is_content():
    assert parse_tool_calls("<tool_call>{}</tool_call>", None).tool_calls == []
    plain = parse_tool_calls("42", [PYTHON])
    assert (plain.content, plain.tool_calls, plain.malformed) == ("42", [], 0)


def test_the_embedded_format_fills_the_tools_one_string_parameter():
    parsed = parse_tool_calls("<python>print(47*83)</python>", [PYTHON])
    assert parsed.content == "" and parsed.malformed == 0
    (call,) = parsed.tool_calls
    assert call["function"]["name"] == "python"
    assert json.loads(call["function"]["arguments"]) == {"code": "print(47*83)"}


def test_a_hermes_call_round_trip_through_the_openai_client():
    tok = bpe_chat_tokenizer(CHATML_TOOLS)
    eos = tok.eos_token_id
    call_text = '<tool_call>{"name": "python", "arguments": {"code": "print(6*7)"}}</tool_call>'
    call_ids = tok.encode(call_text, add_special_tokens=False)
    engine = ScriptedEngine([([*call_ids, eos], [-0.5] * (len(call_ids) + 1)),
                             (tok.encode("42", add_special_tokens=False) + [eos], [-0.1] * 3)])
    with Gateway(engine, tok, window_s=0.0) as gateway:
        episode = gateway.open_episode()
        client = openai.OpenAI(base_url=episode.base_url, api_key=episode.api_key, max_retries=0)
        messages = [{"role": "user", "content": "6*7?"}]
        out = client.chat.completions.create(model=episode.model, messages=messages,
                                             tools=[PYTHON])
        choice = out.choices[0]
        assert choice.finish_reason == "tool_calls" and not choice.message.content
        (call,) = choice.message.tool_calls
        assert call.function.name == "python"
        assert json.loads(call.function.arguments) == {"code": "print(6*7)"}
        messages += [choice.message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "42"}]
        final = client.chat.completions.create(model=episode.model, messages=messages,
                                               tools=[PYTHON])
        assert final.choices[0].message.content == "42"
        assert final.choices[0].finish_reason == "stop"
        record = gateway.close_episode(episode)
    assert "Tools: python" in tok.decode(engine.prompts[0])  # the template rendered the tools
    (sequence,), breaks = stitch(record.calls)
    between = tok.encode("\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n",
                         add_special_tokens=False)
    assert breaks == 0 and record.malformed_tool_calls == 0
    # The model's own call tokens, not the template's rendering of the parsed call.
    assert engine.prompts[1] == [*engine.prompts[0], *call_ids, eos, *between]


def test_a_malformed_hermes_call_reaches_the_client_as_content():
    tok = bpe_chat_tokenizer(CHATML_TOOLS)
    text = '<tool_call>{"name": "python"</tool_call>'
    ids = tok.encode(text, add_special_tokens=False)
    with Gateway(ScriptedEngine([(ids, [-0.5] * len(ids))]), tok, window_s=0.0) as gateway:
        episode = gateway.open_episode()
        client = openai.OpenAI(base_url=episode.base_url, api_key=episode.api_key, max_retries=0)
        out = client.chat.completions.create(model=episode.model, tools=[PYTHON],
                                             messages=[{"role": "user", "content": "q"}])
        assert out.choices[0].message.content == text and not out.choices[0].message.tool_calls
        assert out.choices[0].finish_reason == "stop"
        assert gateway.close_episode(episode).malformed_tool_calls == 1


def test_the_embedded_model_calls_its_python_tool_in_its_own_format():
    """No chat template: the transcript format the embedded tool model learned
    (`models/tool_transcripts.py`); the engine stops at `</python>`."""
    tok = load_tokenizer("embedded_tool")
    call_ids = tok.encode("<python>print(47*83)</python>", add_special_tokens=False)
    answer = [*tok.encode("3901", add_special_tokens=False), tok.eos_token_id]
    engine = ScriptedEngine([(call_ids, [-0.5] * len(call_ids)), (answer, [-0.1] * len(answer))])
    with Gateway(engine, tok, window_s=0.0) as gateway:
        episode = gateway.open_episode()
        client = openai.OpenAI(base_url=episode.base_url, api_key=episode.api_key, max_retries=0)
        messages = [{"role": "user", "content": "47*83="}]
        out = client.chat.completions.create(model=episode.model, messages=messages,
                                             tools=[PYTHON])
        (call,) = out.choices[0].message.tool_calls
        assert json.loads(call.function.arguments) == {"code": "print(47*83)"}
        messages += [out.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "3901"}]
        final = client.chat.completions.create(model=episode.model, messages=messages,
                                               tools=[PYTHON])
        assert final.choices[0].message.content == "3901"
        record = gateway.close_episode(episode)
    close = tuple(tok.encode("</python>", add_special_tokens=False))
    assert close in engine.samplings[0].stop_sequences
    prompt = tok.encode("47*83=")
    output = tok.encode("<output>3901</output>", add_special_tokens=False)
    assert engine.prompts == [prompt, [*prompt, *call_ids, *output]]
    (sequence,), _ = stitch(record.calls)
    assert sequence.actions == [*call_ids, *answer]
    assert sequence.env_tokens == {len(call_ids) - 1: output}
