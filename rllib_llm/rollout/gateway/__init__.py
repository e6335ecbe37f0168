"""An OpenAI-compatible endpoint on an env runner: agents written against any OpenAI-style client
sample from the runner's own engine, token for token (issue 48).

The pieces, each in a module named for its job:
- `wire`: the request bodies (pydantic models of OpenAI's wire format) and the error body;
- `batching`: requests of every running episode gathered for a few milliseconds, then decoded in
  one engine call (an asyncio queue drained by one engine loop);
- `prompts`: chat messages into prompt token ids, reusing the ids of assistant messages this
  gateway produced instead of re-tokenizing their text;
- `trajectories`: per episode, every call's prompt, completion, log-probs and weight version,
  stitched into token-level sequences (the model's tokens are actions, the rest state);
- `tool_calls`: the model's tool-call syntax into OpenAI `tool_calls`;
- `episodes`: per-episode API keys, bounds and records;
- `service`: one request answered (the above together); `app`: the FastAPI routes;
- `server`: uvicorn serving the app from a thread of the runner's process, on loopback.

Import `rllib_llm.rollout.gateway.server.Gateway` to run one; this package's `__init__` imports
nothing, so `rllib_llm.rollout` stays importable without FastAPI (the `agents` extra).
"""
