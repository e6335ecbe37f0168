"""The embedded tool task ("math_tool" on `embedded_tool`) written as an agent with the `openai`
client, trained by `openai_agent` (docs/AGENTS.md).

`solve` is what a user writes: ask the model, run the `python` tool it calls (in the sandbox,
`envs.sandbox`, as math_tool's tool does), send the output back, and return the last reply as
the final answer, which the verifier scores. The embedded model has no chat template; the gateway
renders the conversation in the format it was trained on (`models/tool_transcripts.py`), so the
episodes are token for token those of math_tool: prompt, `<python>...</python>`, the tool's
`<output>...</output>` as state, the answer.
"""

from __future__ import annotations

import json
from typing import Any

from rllib_llm.recipes.embedded import EMBEDDED_TOOL_ENV, EMBEDDED_TOOL_TRAINING

AGENT = "rllib_llm.recipes.embedded_agent:solve"
MAX_TURNS = 2  # a tool call, then the answer (math_tool's max_turns)
OUTPUT_CHARS = 256  # math_tool's tool_output_chars
PYTHON_TOOL = {"type": "function", "function": {
    "name": "python", "description": "Run Python code in a sandbox and see what it prints.",
    "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                   "required": ["code"]}}}


def solve(client, problem: dict[str, Any]) -> str:
    """One episode: the model may call `python` once, then answers."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": problem["prompt"]}]
    for _ in range(MAX_TURNS):
        reply = client.chat.completions.create(model=problem["model"], messages=messages,
                                               tools=[PYTHON_TOOL])
        message = reply.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        call = message.tool_calls[0]
        output = run_code(json.loads(call.function.arguments).get("code", ""))
        messages += [message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": output}]
    return ""  # still calling tools at the turn limit: no answer


def run_code(code: str) -> str:
    """math_tool's `python` tool: the sandboxed run's stdout, or its error, cut to 256 chars."""
    from rllib_llm.envs.tool_env import ToolEnvConfig, python_tool

    settings = ToolEnvConfig()
    text = python_tool(timeout_s=settings.tool_timeout_s, memory_mb=settings.tool_memory_mb,
                       isolation=settings.sandbox_isolation)(code).text
    return text if len(text) <= OUTPUT_CHARS else text[:OUTPUT_CHARS - 3] + "..."


def embedded_agent_config(pg_variant: str = "topr", *, seed: int = 0, **overrides):
    """The RLVRConfig of the embedded tool task as an agent: math_tool's training settings."""
    from rllib_llm.algorithm import RLVRConfig

    env_config = {"agent": AGENT, "max_calls": MAX_TURNS, "max_agent_threads": 256,
                  **{k: v for k, v in EMBEDDED_TOOL_ENV.items() if k != "max_turns"}}
    training = {**EMBEDDED_TOOL_TRAINING, "pg_variant": pg_variant, **overrides}
    return (
        RLVRConfig()
        .environment("openai_agent", env_config=env_config)
        .training(**training)
        .debugging(seed=seed, log_level="ERROR")
    )
