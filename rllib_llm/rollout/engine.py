"""What every rollout engine (torch, vLLM) promises the env runner and the learner.

The learner trusts three things about a `Response`, so every engine must honour them exactly:
- `logprobs[t] = log_softmax(logits_t / temperature)[token_ids[t]]`: the temperature-scaled
  distribution BEFORE top-p filtering. The learner recomputes the same quantity from its own
  forward pass, so the importance ratio is 1 when the weights agree. (With greedy decoding,
  `temperature == 0`, the log-probs are those of the unscaled distribution, temperature 1.)
- A response ends at EOS, and then EOS is its last token (`finish_reason="stop"`), or right after
  one of `SamplingParams.stop_sequences` (its tokens last, also `"stop"`: a multi-turn env's turn
  end, such as a closed tool call), or after `max_tokens` tokens (`finish_reason="length"`).
  Lists carry no padding.
- `weight_version` is the version passed to the last `load_weights` (0 before any), so episodes
  can record which policy produced them.
- `top_logprobs[t]`, only when `SamplingParams.top_logprobs` = k > 0 asks for them: the k most
  likely tokens of the same distribution as `logprobs[t]` (the temperature-scaled one before
  top-p; temperature 1 when greedy), as `(token id, log-prob)`, most likely first. They cost a
  top-k over the vocabulary per token, so engines compute them only when asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

import torch

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample responses.

    Attributes:
        temperature: divides the logits before sampling; > 0 samples, 0 decodes greedily (argmax,
            log-probs then reported at temperature 1). Default 1.0, the on-policy choice for RL.
        top_p: nucleus sampling, in (0, 1]; keeps the smallest set of tokens whose probability
            reaches `top_p`. Reported log-probs ignore it (see the module docstring). Default 1.0.
        max_tokens: most tokens per response, >= 1; reaching it gives `finish_reason="length"`.
        seed: seeds the engine's sampler for this call; the same seed and weights give the same
            samples. None draws from torch's global generator.
        stop_sequences: token id sequences that also end a response, right after their last
            token (kept); each non-empty. Default none.
        top_logprobs: k >= 0, how many of each position's most likely tokens `Response`
            reports with their log-probs (OpenAI's `top_logprobs`); 0 (the default) none.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 16
    seed: int | None = None
    stop_sequences: tuple[tuple[int, ...], ...] = ()
    top_logprobs: int = 0

    def __post_init__(self) -> None:
        if not self.temperature >= 0:  # `not >=` also rejects NaN
            raise ValueError(
                f"SamplingParams.temperature={self.temperature} must be >= 0 "
                "(0 means greedy decoding; use 1.0 for on-policy RL sampling)"
            )
        if not 0 < self.top_p <= 1:
            raise ValueError(
                f"SamplingParams.top_p={self.top_p} must be in (0, 1]; use 1.0 to disable it"
            )
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or (
            self.max_tokens < 1
        ):
            raise ValueError(f"SamplingParams.max_tokens={self.max_tokens!r} must be an int >= 1")
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            raise ValueError(f"SamplingParams.seed={self.seed!r} must be None or an int >= 0")
        if any(len(seq) == 0 for seq in self.stop_sequences):
            raise ValueError(
                f"SamplingParams.stop_sequences={self.stop_sequences!r} holds an empty sequence; "
                "each stop sequence needs at least one token id"
            )
        if isinstance(self.top_logprobs, bool) or not isinstance(self.top_logprobs, int) or (
            self.top_logprobs < 0
        ):
            raise ValueError(f"SamplingParams.top_logprobs={self.top_logprobs!r} must be an int "
                             ">= 0 (0: only the sampled token's log-prob)")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class Response:
    """One sampled response: its tokens, their behaviour log-probs, and why it ended.

    `len(token_ids) == len(logprobs)`; with `finish_reason == "stop"` the last token is EOS.
    `top_logprobs` is empty unless `SamplingParams.top_logprobs` asked for them; then it holds,
    per token, that many `(token id, log-prob)` pairs, most likely first (module docstring).
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)


@runtime_checkable
class RolloutEngine(Protocol):
    """Generates responses for the env runner and receives the learner's weights."""

    @property
    def weight_version(self) -> int:
        """Version of the weights in use: the last `load_weights` version, 0 before any."""
        ...

    def generate(
        self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams
    ) -> list[list[Response]]:
        """Sample `n` independent responses for each prompt.

        Returns one list of `n` responses per prompt, in prompt order.
        """
        ...

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Copy a (possibly partial) state dict into the engine's model and record `version`."""
        ...


def stop_end(token_ids: list[int], eos_token_ids, stop_sequences) -> int | None:
    """Where a response ends: the index after its first EOS or first complete stop sequence,
    whichever comes first; None when neither occurs."""
    eos = set(eos_token_ids)
    for i, token in enumerate(token_ids):
        if token in eos:
            return i + 1
        for seq in stop_sequences:
            n = len(seq)
            if i + 1 >= n and tuple(token_ids[i + 1 - n : i + 1]) == tuple(seq):
                return i + 1
    return None


def check_generate_args(prompt_ids: list[list[int]], n: int) -> None:
    """The argument checks every engine's `generate` makes, with the same messages."""
    if n < 1:
        raise ValueError(f"n={n} must be >= 1 (responses per prompt)")
    for i, prompt in enumerate(prompt_ids):
        if len(prompt) == 0:
            raise ValueError(f"prompt_ids[{i}] is empty; every prompt needs at least 1 token")
