"""Tool-use environments: the agent calls tools with tags and answers a problem at the end.

`ToolEnv` is a text env (`multi_turn.TextEnv`) over the problems of a `MathVerifyEnv` data set:
- the agent may write `<NAME>ARGUMENT</NAME>` for any tool NAME it has; the turn ends at the
  closing tag, the tool runs on ARGUMENT, and the env appends `<output>RESULT</output>`;
- a turn without a tool call (the agent's EOS) is the final answer: the reward is
  `reward(final_text, answer)`, by default the math-verify verifier's score of the final turn
  (what `math_verify` would give it), with its verdict in the final info.
`tool_env(...)` wraps it into the token-level env (`TextTurnEnv`); `make_math_tool_env` is the
registered "math_tool": one tool, `python`, that runs the code in the sandbox
(`rllib_llm.envs.sandbox.run_python`) and shows its stdout.

Per-episode counts: `tool_calls`, `tool_errors` (the tool failed, e.g. the code raised),
`tool_timeouts`. They are recorded at the turn a call happens: every step's info holds the counts
so far, so the final info has them whatever ends the episode (the final answer, the turn limit
or the token budget; the env runner reads them there). Tools run synchronously inside `step`;
the env runner steps many episodes' envs from a thread pool, so tool calls of different episodes
run concurrently.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rllib_llm.envs.env_config import split_env_config
from rllib_llm.envs.text_turn_env import TextTurnEnv
from rllib_llm.envs.token_mdp import ANSWER, PROMPT, PROMPT_INDEX, VERIFIER_INFO
from rllib_llm.envs.validation import check_choice, check_int, check_positive_seconds

TOOL_CALLS, TOOL_ERRORS, TOOL_TIMEOUTS = "tool_calls", "tool_errors", "tool_timeouts"
FINAL_TEXT = "response"  # final info: the text of the final turn (what the reward judged)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class ToolOutput:
    """What a tool returns: its text, and whether it failed or timed out (counted)."""

    text: str
    error: bool = False
    timed_out: bool = False


Tool = Callable[[str], "str | ToolOutput"]
Reward = Callable[[str, str], float]


@dataclass(frozen=True)
class ToolEnvConfig:
    """Settings of tool envs besides `MathVerifyEnvConfig`'s (same env_config dict)."""

    max_turns: int = 4
    """Most agent turns per episode (tool calls + the final answer), >= 1."""

    tool_output_chars: int = 256
    """A tool's result is cut to this many characters (ending in "...") before the env
    appends it: outputs cost context."""

    observation_role: str = "tool"
    """Chat models only: the role of the message holding a tool's output ("tool" or "user")."""

    tool_timeout_s: float = 5.0
    """math_tool: wall-clock limit of one sandboxed run, seconds."""

    tool_memory_mb: int = 256
    """math_tool: memory limit of one sandboxed run, MiB: each process's address space, and
    the whole run's memory where runs get a cgroup (`rllib_llm.envs.sandbox`)."""

    sandbox_isolation: str = "auto"
    """math_tool: "auto" (bubblewrap namespaces where available, else rlimits with a warning),
    "strict" (refuse to run without namespaces) or "rlimits" (no namespaces)."""

    def __post_init__(self) -> None:
        check_int("max_turns", self.max_turns, minimum=1, fix="use e.g. 4")
        check_int("tool_output_chars", self.tool_output_chars, minimum=1, fix="use e.g. 256")
        check_choice("observation_role", self.observation_role, ("tool", "user"))
        check_positive_seconds("tool_timeout_s", self.tool_timeout_s, fix="use e.g. 5.0")
        check_int("tool_memory_mb", self.tool_memory_mb, minimum=16, fix="use e.g. 256")
        check_choice("sandbox_isolation", self.sandbox_isolation, ("auto", "strict", "rlimits"))


def split_config(config: Mapping[str, Any] | None) -> tuple[dict[str, Any], ToolEnvConfig]:
    """An env_config dict → (the `MathVerifyEnv` keys, `ToolEnvConfig`); unknown keys raise."""
    return split_env_config(config, ToolEnvConfig, "tool env")


class ToolEnv:
    """The text env of tool use over a problem set (see the module docstring).

    Args:
        config: `MathVerifyEnvConfig` keys (data set, tokenizer, verifier) and
            `ToolEnvConfig` keys.
        tools: tool name → function of the text between the tags; names are identifiers other
            than "output".
        reward: `reward(final_text, answer) -> float`; None scores with the math verifier.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, *, tools: Mapping[str, Tool],
                 reward: Reward | None = None):
        from rllib_llm.envs.math_verify_env import MathVerifyEnv

        problem_config, self.settings = split_config(config)
        if not tools:
            raise ValueError("ToolEnv needs at least one tool: tools={'name': function}")
        for name, fn in tools.items():
            if not (isinstance(name, str) and _NAME.fullmatch(name)) or name == "output":
                raise ValueError(f"tool name {name!r} must be an identifier other than 'output'")
            if not callable(fn):
                raise ValueError(f"tool {name!r} is {fn!r}, not a function of the call's text")
        self._config = dict(config or {})
        self.tools = dict(tools)
        self.reward = reward
        self.problems = MathVerifyEnv(problem_config)  # data, order and verifier
        self.tokenizer = self.problems.tokenizer
        self.stop_strings = tuple(f"</{name}>" for name in self.tools)
        self._prompt_index, self._answer = -1, ""
        self._counts = dict.fromkeys((TOOL_CALLS, TOOL_ERRORS, TOOL_TIMEOUTS), 0)

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
        _, info = self.problems.reset(seed=seed, options=options)
        self._prompt_index, self._answer = info[PROMPT_INDEX], info[ANSWER]
        self._counts = dict.fromkeys(self._counts, 0)
        return info[PROMPT], info  # its PROMPT_IDS are math_verify's encoding of the prompt

    def step(self, text: str) -> tuple[str | None, float, bool, bool, dict[str, Any]]:
        call = self._tool_call(text)
        if call is None:
            return None, *self._final(text)
        name, argument = call
        output = self._run_tool(name, argument)
        return f"<output>{self._cut(output.text)}</output>", 0.0, False, False, {**self._counts}

    def spawn(self) -> ToolEnv:
        """Another env over the same data and tools (problem sets are cached per process)."""
        return ToolEnv(self._config, tools=self.tools, reward=self.reward)

    def close(self) -> None:
        self.problems.close()

    # Forwarded to the problem env (the env runner's data order, metrics and checks).
    @property
    def num_problems(self) -> int:
        return self.problems.num_problems

    @property
    def num_dropped_prompts(self) -> int:
        return self.problems.num_dropped_prompts

    def shard_order(self, shard: int, num_shards: int, seed: int) -> None:
        self.problems.shard_order(shard, num_shards, seed)

    def order_state(self) -> dict[str, Any]:
        return self.problems.order_state()

    def set_order_state(self, state: Mapping[str, Any]) -> None:
        self.problems.set_order_state(state)

    def verifier_metrics(self) -> dict[str, int]:
        return self.problems.verifier_metrics()

    # --- internals ------------------------------------------------------------------------------
    def _tool_call(self, text: str) -> tuple[str, str] | None:
        """(tool name, argument) when the turn ends with a tool's closing tag."""
        for name in self.tools:
            close = f"</{name}>"
            if text.endswith(close):
                body = text[: -len(close)]
                start = body.rfind(f"<{name}>")
                return name, (body[start + len(name) + 2:] if start >= 0 else body)
        return None

    def _run_tool(self, name: str, argument: str) -> ToolOutput:
        self._counts[TOOL_CALLS] += 1
        try:
            output = self.tools[name](argument)
        except Exception as e:  # a tool's failure is the agent's observation, not a crash
            output = ToolOutput(f"{type(e).__name__}: {e}", error=True)
        if isinstance(output, str):
            output = ToolOutput(output)
        elif not isinstance(output, ToolOutput):  # a bug in the tool, not the agent's doing
            raise TypeError(f"tool {name!r} returned {output!r:.80} ({type(output).__name__}); "
                            f"a tool returns its result as a str or a ToolOutput")
        self._counts[TOOL_ERRORS] += output.error
        self._counts[TOOL_TIMEOUTS] += output.timed_out
        return output

    def _cut(self, text: str) -> str:
        limit = self.settings.tool_output_chars
        return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."

    def _final(self, text: str) -> tuple[float, bool, bool, dict[str, Any]]:
        """The final answer's reward, and the final info (with the verifier's verdict)."""
        info: dict[str, Any] = {**self._counts, FINAL_TEXT: text}
        if self.reward is None:
            verification = self.problems.verify_text(self._prompt_index, text)
            info[VERIFIER_INFO] = verification.as_info()
            score = verification.score
        else:
            score = float(self.reward(text, self._answer))
        return score, True, False, info


def tool_env(config: Mapping[str, Any] | None = None, *, tools: Mapping[str, Tool],
             reward: Reward | None = None) -> TextTurnEnv:
    """The token-level multi-turn env of `ToolEnv(config, tools=..., reward=...)`."""
    text_env = ToolEnv(config, tools=tools, reward=reward)
    return TextTurnEnv(text_env, text_env.tokenizer,
                       response_length=text_env.problems.response_length,
                       max_turns=text_env.settings.max_turns,
                       observation_role=text_env.settings.observation_role)


def python_tool(*, timeout_s: float, memory_mb: int, isolation: str) -> Tool:
    """The math_tool's `python` tool: run the code in the sandbox; show stdout, or the error's
    last line, or the timeout."""
    from rllib_llm.envs.sandbox import run_python

    def run(code: str) -> ToolOutput:
        result = run_python(code, timeout_s=timeout_s, memory_mb=memory_mb, isolation=isolation)
        if result.timed_out:
            return ToolOutput(f"timeout after {timeout_s:g} s", error=True, timed_out=True)
        if result.out_of_memory:
            return ToolOutput(f"out of memory (the run went over {memory_mb} MiB)", error=True)
        if result.exit_code != 0:
            lines = result.stderr.strip().splitlines()
            return ToolOutput(lines[-1] if lines else f"exit code {result.exit_code}", error=True)
        return ToolOutput(result.stdout.rstrip())

    return run


def make_math_tool_env(config: Mapping[str, Any] | None = None) -> TextTurnEnv:
    """The registered "math_tool": math problems, a sandboxed `python` tool, math-verify reward."""
    _, settings = split_config(config)
    tool = python_tool(timeout_s=settings.tool_timeout_s, memory_mb=settings.tool_memory_mb,
                       isolation=settings.sandbox_isolation)
    return tool_env(config, tools={"python": tool})
