"""OpenAI's wire format, the part the gateway serves: request bodies and the error body.

Requests are pydantic models, so FastAPI validates them and a malformed body is answered with
400 and OpenAI's error body (`app.py`) rather than reaching the engine. Fields OpenAI defines but
the gateway does not use (`user`, `metadata`, `stream_options`...) are accepted and ignored
(`extra="allow"`): clients send them unasked. `stream=True` is refused (400), not silently
answered unstreamed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ChatMessage(BaseModel):
    """One message of a conversation. `content` may be a string, None (an assistant message that
    only calls tools) or OpenAI's list of content parts (text parts are joined)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The message's text: the string, or its text parts joined."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")


class SamplingFields(BaseModel):
    """The sampling fields chat and text completions share (OpenAI's ranges)."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=64)
    seed: int | None = Field(default=None, ge=0)
    stream: bool = False

    def stop_strings(self) -> list[str]:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return [s for s in stop if s]

    def top_k(self) -> int:
        """How many most likely alternatives to report per token (0: none)."""
        return 0


class ChatCompletionRequest(SamplingFields):
    """`POST /v1/chat/completions`."""

    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)

    @model_validator(mode="after")
    def _top_logprobs_need_logprobs(self) -> ChatCompletionRequest:
        # OpenAI's rule: alternatives of tokens whose own log-probs were not asked for are
        # refused (400), not silently dropped.
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs=true")
        return self

    def token_limit(self) -> int | None:
        """`max_completion_tokens`, or the older `max_tokens` (OpenAI's order)."""
        return self.max_completion_tokens or self.max_tokens

    def top_k(self) -> int:
        return (self.top_logprobs or 0) if self.logprobs else 0


class CompletionRequest(SamplingFields):
    """`POST /v1/completions`: a prompt string, or a list of token ids."""

    prompt: str | list[int] = Field(min_length=1)
    # OpenAI's legacy completions take the number of alternatives here, at most 5.
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool = False

    def token_limit(self) -> int | None:
        return self.max_tokens

    def top_k(self) -> int:
        return self.logprobs or 0


class GatewayError(Exception):
    """An error answered in OpenAI's format: the HTTP status and the fields of its body."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status, message, type, param, code)

    def body(self) -> dict[str, Any]:
        return error_body(self.message, type=self.type, param=self.param, code=self.code)


def error_body(message: str, *, type: str, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """OpenAI's error body: `{"error": {"message", "type", "param", "code"}}`."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}
