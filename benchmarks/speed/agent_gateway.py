"""The agent gateway's cost (issue 48, item 7): per-call overhead against a direct engine call,
and generated tokens/s with 1, 16 and 64 concurrent agents against the engine's own batched rate.

    python benchmarks/speed/agent_gateway.py [--calls 40 --tokens 16 --agents 1 16 64 --repeats 1]

Embedded model, torch engine, one torch thread. Responses run to `max_tokens` (the stop id is
the tokenizer's unk token, never sampled), so every call decodes the same number of tokens.
- **overhead**: one agent (the official `openai` client, sync), `--calls` chat calls in a row;
  each is paired with a direct `engine.generate` of the same prompt ids (the ones the gateway
  rendered), length and seed, alternating; the overhead of a call is its gateway time minus its
  pair's engine time (median, p99); `client_cpu_median_ms`: the CPU the client itself spent
  per call (building the request, parsing the answer), which that overhead includes.
- **throughput**: K async agents (`AsyncOpenAI`, a connection pool each, as `openai_agent`'s
  are) each make 4 calls in a row; tokens/s over the wall time, against `engine.generate` of the
  same K prompt ids at once with the same sampling (the same shape), timed right after (median
  of 3), so each ratio is taken within one run. Two placements of the agents:
  `in_process`, as `openai_agent` runs them (their Python shares the runner's GIL), and
  `agent_process`, the same agents in a second process started once (what the gateway itself
  costs). Each also reports the CPU each side spent per call (`client_cpu_ms`: the agents;
  `server_cpu_ms`: uvicorn's thread; `engine_cpu_ms`: the engine's thread, per call of one
  agent), and `engine_calls`: how many engine calls the K x 4 requests took (4 is ideal).
Goals (issue 48): overhead <= 5 ms median; with 64 agents >= 0.8x the engine's batched rate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import threading
import time

import torch

CALLS_PER_AGENT = 4
MESSAGES = [{"role": "user", "content": "12+34="}]
UNBOUNDED = None  # set in main: EpisodeBounds with room for every call of the benchmark


def build(tokens: int):
    from rllib_llm.models import load_model_and_tokenizer
    from rllib_llm.rollout.torch_engine import TorchRolloutEngine

    torch.set_num_threads(1)
    model, tokenizer = load_model_and_tokenizer("embedded")
    # Stop on unk only: every response decodes exactly `tokens` tokens.
    engine = TorchRolloutEngine(model, eos_token_id=tokenizer.unk_token_id,
                                pad_token_id=tokenizer.pad_token_id)
    return engine, tokenizer


def overhead(gateway, engine, calls: int, tokens: int) -> dict[str, float]:
    import openai

    from rllib_llm.rollout.engine import SamplingParams

    episode = gateway.open_episode(UNBOUNDED)
    client = openai.OpenAI(base_url=episode.base_url, api_key=episode.api_key, max_retries=0)
    diffs, client_cpu = [], []
    for i in range(calls + 2):  # two warm-up pairs
        t0, cpu = time.perf_counter(), time.thread_time()
        client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=tokens, seed=i)
        t1 = time.perf_counter()
        client_cpu.append(time.thread_time() - cpu)
        engine.generate([prompt_ids(gateway)], 1, SamplingParams(max_tokens=tokens, seed=i))
        t2 = time.perf_counter()
        if i >= 2:
            diffs.append((t1 - t0) - (t2 - t1))
    gateway.close_episode(episode)
    diffs.sort()
    return {"median_ms": 1e3 * statistics.median(diffs),
            "p99_ms": 1e3 * diffs[min(len(diffs) - 1, int(0.99 * len(diffs)))],
            "client_cpu_median_ms": 1e3 * statistics.median(client_cpu[2:])}


def prompt_ids(gateway) -> list[int]:
    """The ids the gateway renders MESSAGES into: what the engine baseline decodes."""
    return gateway.service.renderer.render(MESSAGES, None, {}).ids


# --- the agents --------------------------------------------------------------------------------
async def run_agents(clients: list[tuple[str, str]], tokens: int) -> float:
    """Every (base_url, api_key) as one agent making CALLS_PER_AGENT calls; the wall time."""
    import httpx
    import openai

    async def agent(base_url: str, api_key: str) -> None:
        # As openai_agent's runs do (agent_runs.py): a pool per episode, no certificate store.
        async with httpx.AsyncClient(verify=False, timeout=600) as http:
            client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0,
                                        http_client=http)
            for _ in range(CALLS_PER_AGENT):
                await client.chat.completions.create(model="m", max_tokens=tokens,
                                                     messages=MESSAGES)

    start = time.perf_counter()
    await asyncio.gather(*(agent(*c) for c in clients))
    return time.perf_counter() - start


def agent_process(conn) -> None:
    """The second process's loop: run the agents it is sent, answer (wall s, CPU s)."""
    while (job := conn.recv()) is not None:
        cpu = time.process_time()
        wall = asyncio.run(run_agents(*job))
        conn.send((wall, time.process_time() - cpu))


class Agents:
    """Where the agents run: in this process (`in_process`) or in a second one."""

    def __init__(self, placement: str):
        self.placement = placement
        if placement == "agent_process":
            self._conn, child = multiprocessing.Pipe()
            self._process = multiprocessing.get_context("spawn").Process(
                target=agent_process, args=(child,), daemon=True)
            self._process.start()

    def run(self, clients: list[tuple[str, str]], tokens: int) -> tuple[float, float]:
        """(wall s, the agents' CPU s)."""
        if self.placement == "in_process":
            cpu = time.thread_time()
            wall = asyncio.run(run_agents(clients, tokens))
            return wall, time.thread_time() - cpu
        self._conn.send((clients, tokens))
        return self._conn.recv()

    def close(self) -> None:
        if self.placement == "agent_process":
            self._conn.send(None)
            self._process.join(timeout=10)


def thread_cpu_s(name: str) -> float:
    """CPU seconds of this process's thread called `name` so far (Linux: /proc)."""
    thread = next(t for t in threading.enumerate() if t.name == name)
    with open(f"/proc/self/task/{thread.native_id}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def engine_thread_cpu_s() -> float:
    names = [t.name for t in threading.enumerate() if t.name.startswith("gateway-engine")]
    return sum(thread_cpu_s(n) for n in names)


def agents_rate(gateway, agents: Agents, k: int, tokens: int) -> dict[str, float]:
    episodes = [gateway.open_episode(UNBOUNDED) for _ in range(k)]
    calls, server, engine = (gateway.batcher.stats.engine_calls, thread_cpu_s("gateway"),
                             engine_thread_cpu_s())
    wall, client_cpu = agents.run([(e.base_url, e.api_key) for e in episodes], tokens)
    n = k * CALLS_PER_AGENT
    out = {"gateway_tokens_per_s": n * tokens / wall,
           "engine_calls": gateway.batcher.stats.engine_calls - calls,
           "client_cpu_ms": 1e3 * client_cpu / n,
           "server_cpu_ms": 1e3 * (thread_cpu_s("gateway") - server) / n,
           "engine_cpu_ms": 1e3 * (engine_thread_cpu_s() - engine) / n}
    for e in episodes:
        gateway.close_episode(e)
    return out


def engine_rate(engine, prompt: list[int], k: int, tokens: int) -> float:
    from rllib_llm.rollout.engine import SamplingParams

    prompts = [prompt] * k
    engine.generate(prompts, 1, SamplingParams(max_tokens=tokens))
    walls = []
    for _ in range(3):
        start = time.perf_counter()
        engine.generate(prompts, 1, SamplingParams(max_tokens=tokens))
        walls.append(time.perf_counter() - start)
    return k * tokens / statistics.median(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--placements", nargs="+", default=["in_process", "agent_process"])
    args = parser.parse_args()
    global UNBOUNDED
    from rllib_llm.rollout.gateway.episodes import EpisodeBounds
    from rllib_llm.rollout.gateway.server import Gateway
    from rllib_llm.rollout.gateway.service import ServiceSettings

    UNBOUNDED = EpisodeBounds(max_calls=args.calls + 10, timeout_s=3600.0)
    engine, tokenizer = build(args.tokens)
    result = {"load_average": os.getloadavg()}
    with Gateway(engine, tokenizer, ServiceSettings(default_max_tokens=args.tokens)) as gateway:
        result["overhead"] = overhead(gateway, engine, args.calls, args.tokens)
        prompt = prompt_ids(gateway)
        for placement in args.placements:
            agents = Agents(placement)
            agents.run([], args.tokens)  # (warm-up: imports)
            for k in args.agents:
                ours = agents_rate(gateway, agents, k, args.tokens)
                theirs = engine_rate(engine, prompt, k, args.tokens)
                result[f"{placement}_{k}"] = {**ours, "engine_tokens_per_s": theirs,
                                              "ratio": ours["gateway_tokens_per_s"] / theirs}
            agents.close()
    result["load_average_after"] = os.getloadavg()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
