"""`Gateway`: the OpenAI-compatible endpoint of an env runner, served by uvicorn from a thread.

uvicorn runs the FastAPI app (`app.py`) on 127.0.0.1 and a free port in a daemon thread of the
runner's process, with its own event loop; the engine is called from that loop's worker thread
(`batching`). The runner opens an episode (`open_episode`: a fresh API key and the client
settings an agent needs), lets the agent call, and closes it (`close_episode`: the record of
every call).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from rllib_llm.rollout.gateway.batching import (
    DEFAULT_MAX_WAIT_S,
    DEFAULT_WINDOW_S,
    EngineBatcher,
)
from rllib_llm.rollout.gateway.episodes import EpisodeBounds, EpisodeRecord, EpisodeRegistry
from rllib_llm.rollout.gateway.service import GatewayService, ServiceSettings

START_TIMEOUT_S = 30.0
# How long uvicorn keeps an idle connection open. Its default, 5 s, is shorter than an agent's
# wait on a tool; an embedded agent's learning run lost 1 episode in 2,560 to APIConnectionError,
# most likely the server closing a pooled connection as the agent's client reused it. Loopback
# connections cost nothing to keep.
KEEP_ALIVE_S = 600


@dataclass(frozen=True)
class EpisodeClient:
    """What an agent's OpenAI client needs: `OpenAI(base_url=..., api_key=...)`, and `model`."""

    base_url: str
    api_key: str
    model: str


class Gateway:
    """Serves `engine` over OpenAI's wire format (module docstring); a context manager.

    Args:
        engine: the runner's `RolloutEngine`.
        tokenizer: the policy's tokenizer (chat template, EOS).
        settings: model name, default completion length, forced sampling (`ServiceSettings`).
        window_s, max_wait_s: how requests are collected into one engine call: until none
            arrived for `window_s`, at most `max_wait_s` (`batching`).
        host: the address to bind; loopback by default, so only this machine's agents reach it.
    """

    def __init__(self, engine, tokenizer, settings: ServiceSettings = ServiceSettings(), *,
                 window_s: float = DEFAULT_WINDOW_S, max_wait_s: float = DEFAULT_MAX_WAIT_S,
                 host: str = "127.0.0.1"):
        import uvicorn  # the `agents` extra; imported here so the runner imports without it

        from rllib_llm.rollout.gateway.app import make_app

        self.episodes = EpisodeRegistry()
        self.batcher = EngineBatcher(engine, window_s=window_s, max_wait_s=max_wait_s,
                                     open_episodes=self.episodes.__len__)
        self.service = GatewayService(tokenizer, self.batcher, settings)
        config = uvicorn.Config(make_app(self.service, self.episodes), host=host, port=0,
                                log_level="warning", access_log=False, lifespan="on",
                                timeout_keep_alive=KEEP_ALIVE_S)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="gateway", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the agent gateway did not start on {host} within "
                                   f"{START_TIMEOUT_S:g} s")
            time.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.base_url = f"http://{host}:{port}/v1"

    def open_episode(self, bounds: EpisodeBounds = EpisodeBounds()) -> EpisodeClient:
        """A new episode: its own API key, valid until `close_episode`."""
        return EpisodeClient(self.base_url, self.episodes.open(bounds),
                             self.service.settings.model_name)

    def close_episode(self, client: EpisodeClient) -> EpisodeRecord:
        """End the episode (its key stops working); returns what it sampled."""
        return self.episodes.close(client.api_key)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)
        self.batcher.close()

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
