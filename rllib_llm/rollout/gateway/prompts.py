"""Chat messages into the prompt's token ids, reusing the ids of what the model generated.

A request's messages are rendered with the tokenizer's chat template (with the request's `tools`,
transformers' `apply_chat_template(..., tools=...)`). Re-tokenizing an assistant message's text
would not give back the ids the model sampled (a BPE tokenizer merges differently; a template
rewrites tool calls), and training on such ids trains on what was never sampled. So when the
messages start with a conversation this gateway answered (`known`: its messages up to and
including the assistant message it produced, keyed by `conversation_key`), the prompt is that
call's prompt + completion ids, followed by only the new messages' tokens: the difference of two
renderings after the assistant's end-of-turn text, the way `TextTurnEnv` places a tool's output
(`envs.text_turn_env.chat_observation_ids`). A completion cut before its end-of-turn token gets
that token as state. Where the template does not render a conversation as the concatenation of
its messages, the messages are rendered whole (`Rendered.reused` is 0).

Tokenizers without a chat template (the embedded models) get a plain transcript, the format of
`models/tool_transcripts.py`: the system and user texts as they are, an assistant message as its
text with its tool calls as `<NAME>ARGUMENT</NAME>`, a tool message as `<output>TEXT</output>`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rllib_llm.models import encode_prompt
from rllib_llm.rollout.gateway.tool_calls import embedded_call_text, template_arguments


@dataclass(frozen=True)
class Rendered:
    """A request's prompt ids; `reused`: how many leading messages kept their sampled ids."""

    ids: list[int]
    reused: int


def conversation_key(messages: Sequence[Mapping[str, Any]],
                     tools: Sequence[Mapping[str, Any]] | None) -> str:
    """What identifies a conversation's rendering: each message's role, text and tool calls
    (names and arguments; call ids and fields clients add, such as `refusal`, do not render),
    and the tools."""
    def one(m: Mapping[str, Any]) -> list[Any]:
        calls = [(c.get("function", {}).get("name"), c.get("function", {}).get("arguments"))
                 for c in m.get("tool_calls") or ()]
        return [m.get("role"), m.get("content") or "", calls]

    return json.dumps([[one(m) for m in messages], list(tools or [])], sort_keys=True)


class PromptRenderer:
    """Renders requests' messages for one tokenizer (module docstring)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.chat = bool(getattr(tokenizer, "chat_template", None))
        self.eos_token_id = tokenizer.eos_token_id
        self.eos_text = tokenizer.decode([tokenizer.eos_token_id])

    def render(self, messages: Sequence[Mapping[str, Any]],
               tools: Sequence[Mapping[str, Any]] | None,
               known: Mapping[str, list[int]]) -> Rendered:
        """The prompt ids of `messages` (each with `role`, `content` text, maybe `tool_calls`),
        continuing the longest known conversation they start with."""
        for k in range(len(messages), 0, -1):
            if messages[k - 1].get("role") != "assistant":
                continue
            ids = known.get(conversation_key(messages[:k], tools))
            if ids is None:
                continue
            tail = self._tail_ids(messages, k, tools, ended=ids[-1] == self.eos_token_id)
            if tail is not None:
                return Rendered([*ids, *tail], reused=k)
        return Rendered(self.whole_ids(messages, tools), reused=0)

    def whole_ids(self, messages: Sequence[Mapping[str, Any]],
                  tools: Sequence[Mapping[str, Any]] | None) -> list[int]:
        """All messages rendered and tokenized afresh."""
        if not self.chat:
            return encode_prompt(self.tokenizer, _plain_text(messages))
        text = self._template(messages, tools, generation_prompt=True)
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _tail_ids(self, messages, k: int, tools, *, ended: bool) -> list[int] | None:
        """The ids after assistant message k-1 up to the generation prompt; None where the
        template cannot be cut there."""
        if not self.chat:
            return self._encode(_plain_text(messages[k:]))
        prefix = self._template(messages[:k], tools, generation_prompt=False)
        whole = self._template(messages, tools, generation_prompt=True)
        cut = prefix.rfind(self.eos_text)
        if cut < 0 or not whole.startswith(prefix):
            return None
        eos = [] if ended else [self.eos_token_id]
        return [*eos, *self._encode(whole[cut + len(self.eos_text):])]

    def _template(self, messages, tools, *, generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            [_template_message(m) for m in messages], tools=list(tools) if tools else None,
            add_generation_prompt=generation_prompt, tokenize=False)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False) if text else []


def _template_message(m: Mapping[str, Any]) -> dict[str, Any]:
    out = {"role": m["role"], "content": m.get("content") or ""}
    if m.get("tool_calls"):
        out["tool_calls"] = [{**c, "function": {
            **c.get("function", {}),
            "arguments": template_arguments(c.get("function", {}).get("arguments"))}}
            for c in m["tool_calls"]]
    for key in ("name", "tool_call_id"):
        if m.get(key):
            out[key] = m[key]
    return out


def _plain_text(messages: Sequence[Mapping[str, Any]]) -> str:
    parts = []
    for m in messages:
        text = m.get("content") or ""
        if m["role"] == "tool":
            parts.append(f"<output>{text}</output>")
        elif m["role"] == "assistant":
            parts.append(text + "".join(embedded_call_text(c) for c in m.get("tool_calls") or ()))
        else:
            parts.append(text)
    return "".join(parts)
