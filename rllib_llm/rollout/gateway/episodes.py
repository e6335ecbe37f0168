"""Per-episode state of the gateway: its random API key, its bounds, and what it sampled.

Each episode gets its own key (`secrets.token_urlsafe`), so one agent cannot write into another's
trajectory and a request without a valid key is refused (401). An episode's bounds are checked
before a call reaches the engine; past one the call is answered with OpenAI's error format and
the episode is marked truncated with the bound's name (`EpisodeRecord.truncated_by`).
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field

from rllib_llm.rollout.gateway.trajectories import Call

MAX_CALLS, MAX_TOTAL_TOKENS, TIMEOUT = "max_calls", "max_total_tokens", "timeout"


@dataclass(frozen=True)
class EpisodeBounds:
    """Limits of one episode.

    Attributes:
        max_calls: most completion requests (each choice of `n` counts one).
        max_total_tokens: most tokens of any call's prompt + completion: the context the model
            must hold.
        timeout_s: wall-clock seconds from the episode's start; later calls are refused.
    """

    max_calls: int = 16
    max_total_tokens: int = 4096
    timeout_s: float = 60.0


@dataclass
class EpisodeRecord:
    """What an episode sampled, in call order, and why it was cut (None: it was not).

    `known` maps a conversation (`prompts.conversation_key`) the gateway answered to its
    prompt + completion ids, so later requests reuse them."""

    bounds: EpisodeBounds
    started: float = field(default_factory=time.monotonic)
    calls: list[Call] = field(default_factory=list)
    known: dict[str, list[int]] = field(default_factory=dict)
    truncated_by: str | None = None
    malformed_tool_calls: int = 0
    reused_messages: int = 0


class EpisodeRegistry:
    """The running episodes by API key; opened and closed from any thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._episodes: dict[str, EpisodeRecord] = {}

    def open(self, bounds: EpisodeBounds) -> str:
        """A new episode; returns its API key."""
        key = "sk-episode-" + secrets.token_urlsafe(24)
        with self._lock:
            self._episodes[key] = EpisodeRecord(bounds)
        return key

    def get(self, key: str) -> EpisodeRecord | None:
        with self._lock:
            return self._episodes.get(key)

    def close(self, key: str) -> EpisodeRecord:
        """End the episode: its key stops working; returns its record."""
        with self._lock:
            return self._episodes.pop(key)

    def __len__(self) -> int:
        with self._lock:
            return len(self._episodes)
