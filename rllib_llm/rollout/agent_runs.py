"""Running an agent once per episode against the runner's gateway (`openai_agent`, issue 48).

Each episode gets its own gateway key and an `openai` client pointed at the gateway, and the
agent (`envs.openai_agent_env`) is called with it and the problem record. Episodes of a batch run
concurrently: async agents as tasks of one event loop, sync agents in a bounded thread pool; the
gateway gathers their requests into batched engine calls. An agent that raises, runs past its
wall clock or never calls the model produces no episode: its `AgentRun` says why. A sync agent
past its time cannot be stopped; its thread is abandoned and its key closed, so its further
calls get 401.

Each episode's client has an HTTP connection pool of its own, built without the certificate
store (`verify=False`: the gateway is plain HTTP on loopback). Building a default `httpx` client
loads that store (tens of milliseconds on a loaded CPU: 256 agents' first requests spread over
seconds and were cut into several engine calls); one pool shared by all episodes costs
O(connections x requests) in httpcore's request assignment (14 of 24 s of 64 agents' calls).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from rllib_llm.rollout.gateway.episodes import EpisodeBounds, EpisodeRecord

POLL_S = 0.05  # how often the sync pool's clocks are looked at


@dataclass(frozen=True)
class AgentRun:
    """One episode's agent call: what it returned, or why it produced nothing.

    Attributes:
        result: the agent's return value (None when it raised or timed out).
        error: the agent's exception as "Type: message", None if it returned.
        timed_out: it ran past `agent_timeout_s`.
        record: what the gateway recorded for the episode (calls, bounds hit).
    """

    result: Any
    error: str | None
    timed_out: bool
    record: EpisodeRecord


def run_agents(agent: Callable[..., Any], gateway, problems: Sequence[Mapping[str, Any]],
               bounds: EpisodeBounds, *, max_threads: int) -> list[AgentRun]:
    """Call `agent(client, problem)` once per problem, concurrently; one `AgentRun` each."""
    if inspect.iscoroutinefunction(agent):
        return asyncio.run(_run_async(agent, gateway, problems, bounds))
    return _run_threads(agent, gateway, problems, bounds, max_threads)


async def _run_async(agent, gateway, problems, bounds: EpisodeBounds) -> list[AgentRun]:
    import httpx
    from openai import AsyncOpenAI

    async def one(problem) -> AgentRun:
        episode = gateway.open_episode(bounds)
        http = httpx.AsyncClient(verify=False, timeout=bounds.timeout_s)
        client = AsyncOpenAI(base_url=episode.base_url, api_key=episode.api_key,
                             max_retries=0, timeout=bounds.timeout_s, http_client=http)
        result, error, timed_out = None, None, False
        try:
            result = await asyncio.wait_for(agent(client, dict(problem)), bounds.timeout_s)
        except TimeoutError:
            timed_out = True
        except Exception as e:  # the agent's failure drops its episode, never the run
            error = _describe(e)
        finally:
            await http.aclose()
        return AgentRun(result, error, timed_out, gateway.close_episode(episode))

    return list(await asyncio.gather(*(one(p) for p in problems)))


def _run_threads(agent, gateway, problems, bounds: EpisodeBounds,
                 max_threads: int) -> list[AgentRun]:
    import httpx
    from openai import OpenAI

    threads = min(max_threads, max(1, len(problems)))

    started: dict[int, float] = {}  # problem i -> when its agent started
    episodes: dict[int, Any] = {}
    lock = threading.Lock()

    def one(i: int) -> Any:
        episode = gateway.open_episode(bounds)
        with lock:
            episodes[i], started[i] = episode, time.monotonic()
        with httpx.Client(verify=False, timeout=bounds.timeout_s) as http:
            client = OpenAI(base_url=episode.base_url, api_key=episode.api_key, max_retries=0,
                            timeout=bounds.timeout_s, http_client=http)
            return agent(client, dict(problems[i]))

    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="agent")
    futures = {pool.submit(one, i): i for i in range(len(problems))}
    pending, timed_out = set(futures), set()
    while pending:
        _, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
        now = time.monotonic()
        with lock:
            late = {f for f in pending if futures[f] in started
                    and now - started[futures[f]] > bounds.timeout_s}
        timed_out |= late
        pending -= late
    pool.shutdown(wait=False, cancel_futures=True)  # abandon the threads of late agents
    runs = []
    for future, i in futures.items():
        record = gateway.close_episode(episodes[i])
        if future in timed_out:
            runs.append(AgentRun(None, None, True, record))
        elif (e := future.exception()) is not None:
            runs.append(AgentRun(None, _describe(e), False, record))
        else:
            runs.append(AgentRun(future.result(), None, False, record))
    return runs


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:300]
