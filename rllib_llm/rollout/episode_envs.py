"""Multi-turn envs: one env per running episode, spawned from the runner's env (the training
env's, the held-out env's) once and then reused, and the threads that step them at once (so
their tool calls run concurrently)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rllib_llm.rollout.turn_loop import MAX_TOOL_THREADS


class EpisodeEnvs:
    """The envs spawned for concurrent episodes, per parent env, and the threads that step
    them; both made on first use (a single-turn runner makes neither)."""

    def __init__(self) -> None:
        self._spawned: dict[int, list[Any]] = {}  # id(parent env) -> its spawned envs
        self._executor: ThreadPoolExecutor | None = None

    def spawn(self, env, count: int) -> list[Any]:
        """`count` envs for concurrent episodes, spawned from `env` once and then reused."""
        pool = self._spawned.setdefault(id(env), [])
        while len(pool) < count:
            pool.append(env.spawn())
        return pool[:count]

    @property
    def executor(self) -> ThreadPoolExecutor:
        """The threads that step multi-turn envs (and so run their tool calls) at once."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(MAX_TOOL_THREADS, thread_name_prefix="env-step")
        return self._executor

    def close_spawned(self, env) -> None:
        """Close and forget the envs spawned from `env` (before `env` itself is closed)."""
        for spawned in self._spawned.pop(id(env), ()):
            spawned.close()

    def close(self) -> None:
        """Close every spawned env and stop the threads, without waiting for them."""
        for pool in self._spawned.values():
            for env in pool:
                env.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False)
