"""One request answered: bounds checked, prompt rendered, decoded in a batch, recorded, answered.

The app (`app.py`) validates bodies and keys; this module holds what a request means. Every
sampled choice is recorded in its episode (`trajectories.Call`: prompt ids, completion ids,
log-probs, weight version), and an assistant message it returns is remembered with its ids so
a later request carrying it reuses them (`prompts`).

Training runs force the policy's sampling (`forced`: temperature and top-p of the config), since
the learner scores the sampled tokens at its own temperature: an agent asking for 0.7 would
otherwise be trained with log-probs of another distribution. Stop strings are excluded from the
returned text (OpenAI's rule) but their tokens stay in the recorded completion, since they were
sampled.

Log-probs are the engine's, the very numbers the episode records and the learner takes as the
sampler's: `log_softmax(logits / T)` of the temperature T the engine sampled with (the config's
in training, the request's otherwise; 1 for greedy decoding), before top-p. The top-k
alternatives (`top_logprobs` of a chat request, `logprobs=k` of a text completion) come from the
same distribution, computed by the engine only for requests that ask (`SamplingParams.
top_logprobs`; requests asking for different k decode in separate engine calls). vLLM with top-p
< 1 renormalises over the nucleus instead (`vllm_engine`), and a token outside it, -inf there, is
answered as -9999.0, as vLLM's own server does: JSON has no infinity.
"""

from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rllib_llm.rollout.engine import Response, SamplingParams
from rllib_llm.rollout.gateway.batching import EngineBatcher
from rllib_llm.rollout.gateway.episodes import (
    MAX_CALLS,
    MAX_TOTAL_TOKENS,
    TIMEOUT,
    EpisodeRecord,
)
from rllib_llm.rollout.gateway.prompts import PromptRenderer, conversation_key
from rllib_llm.rollout.gateway.tool_calls import (
    ParsedMessage,
    embedded_stop_strings,
    parse_tool_calls,
)
from rllib_llm.rollout.gateway.trajectories import Call
from rllib_llm.rollout.gateway.wire import (
    ChatCompletionRequest,
    CompletionRequest,
    GatewayError,
    SamplingFields,
)


@dataclass(frozen=True)
class ServiceSettings:
    """How the gateway samples.

    Attributes:
        model_name: the name `GET /v1/models` lists and responses carry.
        default_max_tokens: completion tokens when a request names no limit.
        forced: sampling settings that override the request's temperature and top-p (training);
            None samples as each request asks.
    """

    model_name: str = "rllib-llm"
    default_max_tokens: int = 256
    forced: SamplingParams | None = None


class GatewayService:
    """Answers chat and text completions for the episodes of a registry (module docstring)."""

    def __init__(self, tokenizer, batcher: EngineBatcher, settings: ServiceSettings):
        self.tokenizer = tokenizer
        self.batcher = batcher
        self.settings = settings
        self.renderer = PromptRenderer(tokenizer)

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.settings.model_name, "object": "model",
                                            "created": 0, "owned_by": "rllib_llm"}]}

    async def chat(self, request: ChatCompletionRequest, record: EpisodeRecord
                   ) -> dict[str, Any]:
        messages = [{**m.model_dump(exclude_none=True), "content": m.text()}
                    for m in request.messages]
        tools = request.tools
        rendered = self.renderer.render(messages, tools, record.known)
        record.reused_messages += rendered.reused
        extra_stops = [] if self.renderer.chat else embedded_stop_strings(tools)
        sampling = self._sampling(request, record, len(rendered.ids), extra_stops)
        generated = await self.batcher.generate(rendered.ids, request.n, sampling)
        choices, completion_tokens = [], 0
        for i, response in enumerate(generated.responses):
            self._record(record, rendered.ids, response, generated.weight_version, sampling)
            text = _cut_at_stop(self._decode(response.token_ids), request.stop_strings())
            parsed = parse_tool_calls(text, tools) if request.tool_choice != "none" else \
                ParsedMessage(text)
            record.malformed_tool_calls += parsed.malformed
            message: dict[str, Any] = {"role": "assistant",
                                       "content": parsed.content or (None if parsed.tool_calls
                                                                     else "")}
            if parsed.tool_calls:
                message["tool_calls"] = parsed.tool_calls
            record.known[conversation_key([*messages, message], tools)] = [
                *rendered.ids, *response.token_ids]
            choices.append({
                "index": i, "message": message,
                "finish_reason": "tool_calls" if parsed.tool_calls else response.finish_reason,
                "logprobs": ({"content": self._logprobs(response)} if request.logprobs
                             else None)})
            completion_tokens += len(response.token_ids)
        return {"id": f"chatcmpl-{secrets.token_hex(12)}", "object": "chat.completion",
                "created": int(time.time()), "model": self.settings.model_name,
                "choices": choices, "usage": _usage(len(rendered.ids), completion_tokens)}

    async def completion(self, request: CompletionRequest, record: EpisodeRecord
                         ) -> dict[str, Any]:
        prompt_ids = self._completion_prompt(request.prompt)
        sampling = self._sampling(request, record, len(prompt_ids), [])
        generated = await self.batcher.generate(prompt_ids, request.n, sampling)
        choices, completion_tokens = [], 0
        for i, response in enumerate(generated.responses):
            self._record(record, prompt_ids, response, generated.weight_version, sampling)
            text = _cut_at_stop(self._decode(response.token_ids), request.stop_strings())
            logprobs = None
            if request.logprobs is not None:
                entries = self._logprobs(response)
                logprobs = {"tokens": [e["token"] for e in entries],
                            "token_logprobs": [e["logprob"] for e in entries],
                            "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]}
                                             for e in entries],
                            "text_offset": None}
            choices.append({"index": i, "text": text, "logprobs": logprobs,
                            "finish_reason": response.finish_reason})
            completion_tokens += len(response.token_ids)
        return {"id": f"cmpl-{secrets.token_hex(12)}", "object": "text_completion",
                "created": int(time.time()), "model": self.settings.model_name,
                "choices": choices, "usage": _usage(len(prompt_ids), completion_tokens)}

    # --- pieces ---------------------------------------------------------------------------------
    def _sampling(self, request: SamplingFields, record: EpisodeRecord, prompt_len: int,
                  extra_stops: list[str]) -> SamplingParams:
        """The request's sampling within its episode's bounds (a bound passed: error)."""
        bounds = record.bounds
        if time.monotonic() - record.started > bounds.timeout_s:
            record.truncated_by = record.truncated_by or TIMEOUT
            raise GatewayError(400, f"this episode ran past its {bounds.timeout_s:g} s limit",
                               code="episode_timeout")
        if len(record.calls) + request.n > bounds.max_calls:
            record.truncated_by = record.truncated_by or MAX_CALLS
            raise GatewayError(400, f"this episode may make {bounds.max_calls} calls; it has "
                               f"made {len(record.calls)}", code="max_calls_exceeded")
        room = self._context(record) - prompt_len
        if room < 1:
            record.truncated_by = record.truncated_by or MAX_TOTAL_TOKENS
            raise GatewayError(400, f"this model's context in this episode is "
                               f"{self._context(record)} tokens; the messages hold "
                               f"{prompt_len}", param="messages", code="context_length_exceeded")
        asked = request.token_limit() or self.settings.default_max_tokens
        forced = self.settings.forced
        temperature = request.temperature if request.temperature is not None else 1.0
        top_p = request.top_p if request.top_p is not None else 1.0
        if forced is not None:
            temperature, top_p = forced.temperature, forced.top_p
        stops = tuple(tuple(self.tokenizer.encode(s, add_special_tokens=False))
                      for s in [*request.stop_strings(), *extra_stops])
        return SamplingParams(temperature=temperature, top_p=top_p, max_tokens=min(asked, room),
                              seed=request.seed, stop_sequences=tuple(s for s in stops if s),
                              top_logprobs=request.top_k())

    def _record(self, record: EpisodeRecord, prompt_ids: list[int], response: Response,
                weight_version: int, sampling: SamplingParams) -> None:
        record.calls.append(Call(tuple(prompt_ids), tuple(response.token_ids),
                                 tuple(response.logprobs), weight_version))
        room = self._context(record) - len(prompt_ids)
        if response.finish_reason == "length" and sampling.max_tokens == room:
            record.truncated_by = record.truncated_by or MAX_TOTAL_TOKENS

    def _context(self, record: EpisodeRecord) -> int:
        """Most tokens of a call's prompt + completion: the episode's bound, or the engine's
        (the batcher's `context`, vLLM's max_model_len). vLLM refuses a longer prompt with an
        error that fails its whole engine call, every episode's request of the batch with it, so
        such a prompt is answered 400 here, as past the episode's own bound."""
        return min(record.bounds.max_total_tokens, self.batcher.context or sys.maxsize)

    def _completion_prompt(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt)
        vocab = len(self.tokenizer)
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise GatewayError(400, f"prompt token ids must be in [0, {vocab}); got {bad[:5]}",
                               param="prompt")
        return list(prompt)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _logprobs(self, response: Response) -> list[dict[str, Any]]:
        """OpenAI's chat `logprobs.content`: per token its text, log-prob, bytes and its top-k
        alternatives (empty lists when the request asked for none)."""
        tops = response.top_logprobs or [[] for _ in response.token_ids]
        texts = self._token_texts({*response.token_ids, *(t for top in tops for t, _ in top)})
        return [{**_entry(texts[token], logprob),
                 "top_logprobs": [_entry(texts[t], lp) for t, lp in top]}
                for token, logprob, top in zip(response.token_ids, response.logprobs, tops,
                                               strict=True)]

    def _token_texts(self, ids: set[int]) -> dict[int, str]:
        """Each token's own text, decoded in one call (a response's top-k names up to 20
        tokens per position, mostly the same few)."""
        order = sorted(ids)
        return dict(zip(order, self.tokenizer.batch_decode([[i] for i in order]), strict=True))


# OpenAI's answer for a log-prob of -inf (a token outside vLLM's nucleus): JSON has no infinity.
MIN_LOGPROB = -9999.0


def _entry(text: str, logprob: float) -> dict[str, Any]:
    """One token of OpenAI's log-probs: text, log-prob and the text's UTF-8 bytes."""
    return {"token": text, "logprob": max(float(logprob), MIN_LOGPROB),
            "bytes": list(text.encode())}


def _cut_at_stop(text: str, stops: list[str]) -> str:
    """The text before the first stop string (OpenAI leaves it out)."""
    cut = min((i for s in stops if (i := text.find(s)) >= 0), default=len(text))
    return text[:cut]


def _usage(prompt_tokens: int, completion_tokens: int) -> Mapping[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


