"""Requests of every running episode decoded together: an asyncio queue drained by one engine loop.

Each request puts its prompt on the queue and awaits a future. The engine loop takes the first
request and keeps collecting while requests keep arriving: it waits `window_s` (a few
milliseconds), drains the queue, and waits again while the last wait brought any, up to
`max_wait_s` in all; then it decodes every prompt of the same sampling settings in one
`engine.generate` call, so 64 agents waiting on the model cost about what one batch of 64 costs.
Requests that differ only in `max_tokens` share a call: it decodes to the largest, and each
response is cut at its own request's limit (`cut_to`). A call's `max_tokens` is the room its
episode's context has left, so in multi-turn runs nearly every episode's differs, and grouping
by it decoded them one engine call each. The cut is exact: rows are sampled independently, so a
response's first m tokens are distributed as with `max_tokens=m`, and one that ran past m had
met no EOS or stop sequence within them. Rows of a shorter limit run on to the largest, so an
engine with a context bound (vLLM's `max_model_len`) gets only calls whose longest prompt plus
that largest limit fits it (`fit_context`); the torch engine has none (the tokens past a row's
limit are dropped, and under causal attention they changed none before it).
(Agents started together reach the gateway over tens of milliseconds on a loaded CPU: one fixed
window would cut them into several small batches, each costing a whole decode.) A batch that
holds as many requests as there are open episodes is decoded at once: nobody else can be on the
way (a lone agent does not wait out the window). A request
asking for `n` choices puts its prompt in the batch `n` times. The engine runs in one worker
thread, so the event loop keeps accepting requests (they form the next batch) while a batch
decodes.

The weight version is read in that thread right before the call: every response carries the
version of the weights that produced it (the torch engine loads weights only between `sample()`
calls of its runner, so a batch never straddles two versions).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from rllib_llm.rollout.engine import Response, SamplingParams

DEFAULT_WINDOW_S = 0.005  # collect requests until none arrived for this long (~1 ms of HTTP each)
DEFAULT_MAX_WAIT_S = 0.05  # but decode after this long at most: a call's latency bound


@dataclass(frozen=True)
class Generated:
    """One request's responses and the weight version that produced them."""

    responses: list[Response]
    weight_version: int


@dataclass
class _Pending:
    prompt_ids: list[int]
    n: int
    sampling: SamplingParams
    future: asyncio.Future = field(repr=False)


@dataclass
class BatchStats:
    """What the engine loop has done: engine calls and the prompts they decoded."""

    engine_calls: int = 0
    prompts: int = 0


class EngineBatcher:
    """Gathers requests into engine calls (module docstring). Create it, then run `engine_loop()`
    as a task of the event loop that calls `generate`.

    Args:
        engine: a `RolloutEngine` (torch or vLLM).
        window_s: a batch is closed once no request arrived for this long, seconds.
        max_wait_s: ... or once this long has passed since its first request.
        open_episodes: how many episodes are open now; a batch of that many requests closes at
            once. None: batches close on time only.
    """

    def __init__(self, engine, *, window_s: float = DEFAULT_WINDOW_S,
                 max_wait_s: float = DEFAULT_MAX_WAIT_S,
                 open_episodes: Callable[[], int] | None = None):
        self.engine = engine
        self.window_s = window_s
        self.max_wait_s = max_wait_s
        self.open_episodes = open_episodes
        self.context: int | None = getattr(engine, "max_model_len", None)
        self.stats = BatchStats()
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-engine")

    async def generate(self, prompt_ids: list[int], n: int, sampling: SamplingParams
                       ) -> Generated:
        """`n` responses to `prompt_ids`, decoded in the next batch."""
        future = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(list(prompt_ids), n, sampling, future))
        return await future

    async def engine_loop(self) -> None:
        """Forever: wait for a request, collect while more arrive, decode the batch."""
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            deadline = loop.time() + self.max_wait_s
            while not self._everyone_waits(batch):
                await asyncio.sleep(min(self.window_s, max(0.0, deadline - loop.time())))
                if self._queue.empty() or loop.time() >= deadline:
                    break
                while not self._queue.empty():
                    batch.append(self._queue.get_nowait())
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            for sampling, same in _by_sampling(batch):
                shapes = [(len(p.prompt_ids), p.sampling.max_tokens) for p in same]
                for call in fit_context(shapes, self.context):
                    await self._decode(sampling, [same[i] for i in call])

    def _everyone_waits(self, batch: Sequence[_Pending]) -> bool:
        """Whether the batch holds a request per open episode (no other can be coming)."""
        return self.open_episodes is not None and len(batch) >= self.open_episodes()

    async def _decode(self, sampling: SamplingParams, pending: Sequence[_Pending]) -> None:
        prompts = [p.prompt_ids for p in pending for _ in range(p.n)]
        sampling = replace(sampling, max_tokens=max(p.sampling.max_tokens for p in pending))
        loop = asyncio.get_running_loop()
        try:
            version, responses = await loop.run_in_executor(
                self._executor, _generate, self.engine, prompts, sampling)
        except Exception as e:  # every waiting request learns of it; the loop goes on
            for p in pending:
                if not p.future.done():
                    p.future.set_exception(e)
            return
        self.stats.engine_calls += 1
        self.stats.prompts += len(prompts)
        start = 0
        for p in pending:
            if not p.future.done():  # (a client that hung up cancelled its future)
                p.future.set_result(Generated(
                    [cut_to(r, p.sampling.max_tokens) for r in responses[start:start + p.n]],
                    version))
            start += p.n

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _generate(engine, prompts: list[list[int]], sampling: SamplingParams
              ) -> tuple[int, list[Response]]:
    version = engine.weight_version
    return version, [group[0] for group in engine.generate(prompts, 1, sampling)]


def _by_sampling(batch: Sequence[_Pending]) -> list[tuple[SamplingParams, list[_Pending]]]:
    """The batch split by sampling settings but `max_tokens` (one engine call each), in order
    of arrival."""
    groups: dict[SamplingParams, list[_Pending]] = {}
    for p in batch:
        groups.setdefault(replace(p.sampling, max_tokens=1), []).append(p)
    return list(groups.items())


def fit_context(shapes: Sequence[tuple[int, int]], context: int | None) -> list[list[int]]:
    """Requests of one sampling group, as (prompt length, `max_tokens`), split into calls whose
    longest prompt + largest `max_tokens` is at most `context` (None: one call); the indices of
    each call's requests. Each request fits alone (the service bounds its `max_tokens` by the
    context), so each joins the first call it fits, largest limit first."""
    if context is None:
        return [list(range(len(shapes)))]
    calls: list[list[int]] = []
    for i in sorted(range(len(shapes)), key=lambda i: -shapes[i][1]):
        call = next((c for c in calls if shapes[i][0] + shapes[c[0]][1] <= context), None)
        if call is None:
            calls.append([i])
        else:
            call.append(i)
    return calls


def cut_to(response: Response, max_tokens: int) -> Response:
    """`response` as a call with `max_tokens` would have ended it (module docstring)."""
    if len(response.token_ids) <= max_tokens:
        return response
    return Response(response.token_ids[:max_tokens], response.logprobs[:max_tokens], "length",
                    response.top_logprobs[:max_tokens])
