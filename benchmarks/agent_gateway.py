"""The agent gateway's cost (issue 48, item 7): per-call overhead against a direct engine call,
and generated tokens/s with 1, 16 and 64 concurrent agents against the engine's own batched rate.

    python benchmarks/agent_gateway.py [--calls 40 --tokens 16 --agents 1 16 64]

Embedded model, torch engine, one torch thread. Responses run to `max_tokens` (the stop id is
the tokenizer's unk token, never sampled), so every call decodes the same number of tokens.
- **overhead**: one agent (the official `openai` client, sync), `--calls` chat calls in a row;
  each is paired with a direct `engine.generate` of the same prompt and length, alternating; the
  overhead of a call is its gateway time minus its pair's engine time (median, p99). It includes
  the batching window (`window_s`, 5 ms by default), which a lone agent waits out.
- **throughput**: K async agents (`AsyncOpenAI`, a connection pool each, as `openai_agent`'s
  are), in this process, each make 4 calls in a row; tokens/s over the wall time, against
  `engine.generate` of K prompts at once (the same shape), median of 3.
Goals (issue 48): overhead <= 5 ms median; with 64 agents >= 0.8x the engine's batched rate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import torch

CALLS_PER_AGENT = 4
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


def overhead(gateway, engine, tokenizer, calls: int, tokens: int) -> dict[str, float]:
    import openai

    from rllib_llm.rollout.engine import SamplingParams

    episode = gateway.open_episode(UNBOUNDED)
    client = openai.OpenAI(base_url=episode.base_url, api_key=episode.api_key, max_retries=0)
    prompt = [{"role": "user", "content": "12+34="}]
    ids = tokenizer.encode("12+34=")
    diffs = []
    for i in range(calls + 2):  # two warm-up pairs
        t0 = time.perf_counter()
        client.chat.completions.create(model="m", messages=prompt, max_tokens=tokens, seed=i)
        t1 = time.perf_counter()
        engine.generate([ids], 1, SamplingParams(max_tokens=tokens, seed=i))
        t2 = time.perf_counter()
        if i >= 2:
            diffs.append((t1 - t0) - (t2 - t1))
    gateway.close_episode(episode)
    diffs.sort()
    return {"median_ms": 1e3 * statistics.median(diffs),
            "p99_ms": 1e3 * diffs[min(len(diffs) - 1, int(0.99 * len(diffs)))]}


def agents_rate(gateway, agents: int, tokens: int) -> float:
    import httpx
    import openai

    async def agent(episode):
        # As openai_agent's runs do (agent_runs.py): a pool per episode, no certificate store.
        async with httpx.AsyncClient(verify=False, timeout=600) as http:
            client = openai.AsyncOpenAI(base_url=episode.base_url, api_key=episode.api_key,
                                        max_retries=0, http_client=http)
            for _ in range(CALLS_PER_AGENT):
                await client.chat.completions.create(
                    model="m", max_tokens=tokens,
                    messages=[{"role": "user", "content": "12+34="}])

    async def run():
        episodes = [gateway.open_episode(UNBOUNDED) for _ in range(agents)]
        start = time.perf_counter()
        await asyncio.gather(*(agent(e) for e in episodes))
        wall = time.perf_counter() - start
        for e in episodes:
            gateway.close_episode(e)
        return wall

    wall = asyncio.run(run())
    return agents * CALLS_PER_AGENT * tokens / wall


def engine_rate(engine, tokenizer, agents: int, tokens: int) -> float:
    from rllib_llm.rollout.engine import SamplingParams

    prompts = [tokenizer.encode("12+34=")] * agents
    engine.generate(prompts, 1, SamplingParams(max_tokens=tokens))
    walls = []
    for _ in range(3):
        start = time.perf_counter()
        engine.generate(prompts, 1, SamplingParams(max_tokens=tokens))
        walls.append(time.perf_counter() - start)
    return agents * tokens / statistics.median(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 16, 64])
    args = parser.parse_args()
    global UNBOUNDED
    from rllib_llm.rollout.gateway.episodes import EpisodeBounds
    from rllib_llm.rollout.gateway.server import Gateway
    from rllib_llm.rollout.gateway.service import ServiceSettings

    UNBOUNDED = EpisodeBounds(max_calls=args.calls + 10, timeout_s=3600.0)
    engine, tokenizer = build(args.tokens)
    with Gateway(engine, tokenizer, ServiceSettings(default_max_tokens=args.tokens)) as gateway:
        result = {"overhead": overhead(gateway, engine, tokenizer, args.calls, args.tokens)}
        for k in args.agents:
            ours = agents_rate(gateway, k, args.tokens)
            theirs = engine_rate(engine, tokenizer, k, args.tokens)
            result[f"agents_{k}"] = {"gateway_tokens_per_s": ours,
                                     "engine_tokens_per_s": theirs, "ratio": ours / theirs}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
