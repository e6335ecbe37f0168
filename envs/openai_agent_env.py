"""`openai_agent`: the problems of a data set, solved by an agent written against an OpenAI-style
client, scored by the math verifier (issue 48).

    RLVRConfig().environment("openai_agent", env_config={
        "agent": "my_pkg.my_agent:solve", "dataset": "arithmetic"})

The agent is a user function, sync or async, `solve(client, problem)`: `client` is an `openai`
client (`OpenAI`, or `AsyncOpenAI` for an `async def`) already pointed at the env runner's
gateway with the episode's own key, and `problem` is the record (`prompt`, `answer`, `index`,
`model`: the name to pass as `model=`; the gateway serves one model and accepts any name). It
returns the episode's reward (a number), or a final answer (a string) that the verifier scores
against the record's answer, as `math_verify` scores a response.

The env is the problems, the verifier and the agent; the env runner drives the episodes
(`rollout.agent_rollouts`): it calls the agent once per episode, the gateway records what the
model sampled, and those tokens are the episode. The bounds of an episode (`AgentEnvConfig`)
are enforced by the gateway (calls, context tokens) and by the runner (wall clock).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rllib_llm.envs.env_config import split_env_config
from rllib_llm.envs.math_verify_env import MathVerifyEnv
from rllib_llm.envs.token_mdp import VERIFIER_INFO
from rllib_llm.envs.validation import check_int, check_positive_seconds

FINAL_ANSWER = "final_answer"  # final info: the answer the agent returned (what was verified)


@dataclass(frozen=True)
class AgentEnvConfig:
    """Settings of `openai_agent` besides `MathVerifyEnvConfig`'s (same env_config dict)."""

    agent: Any = None
    """The agent: "package.module:function" (imported in every env runner), or the function
    itself (it must then pickle by reference: a module-level function)."""

    max_calls: int = 8
    """Most model calls per episode (each choice of `n` counts); past it the gateway refuses
    the call and the episode ends truncated."""

    max_total_tokens: int | None = None
    """Most tokens of a call's prompt + completion (the context the model holds); None:
    `prompt_length + response_length`. Past it: refused, episode truncated."""

    agent_timeout_s: float = 60.0
    """Wall-clock seconds an episode's agent may run; a slower one is dropped, counted in
    `agent_timeout_fraction`."""

    max_agent_threads: int = 32
    """Sync agents run in a thread pool of this many threads (async ones on one event loop)."""

    model_name: str = "policy"
    """The model name the gateway lists at /v1/models (`problem["model"]`)."""

    def __post_init__(self) -> None:
        if not (callable(self.agent) or isinstance(self.agent, str) and ":" in self.agent):
            raise ValueError(f"agent={self.agent!r} must name the agent function as "
                             "'package.module:function' (or be the function)")
        check_int("max_calls", self.max_calls, minimum=1, fix="use e.g. 8")
        if self.max_total_tokens is not None:
            check_int("max_total_tokens", self.max_total_tokens, minimum=2,
                      fix="use None (prompt_length + response_length) or e.g. 512")
        check_positive_seconds("agent_timeout_s", self.agent_timeout_s, fix="use e.g. 60")
        check_int("max_agent_threads", self.max_agent_threads, minimum=1, fix="use e.g. 32")


def split_agent_config(config: Mapping[str, Any] | None
                       ) -> tuple[dict[str, Any], AgentEnvConfig]:
    """An env_config dict → (the `MathVerifyEnv` keys, `AgentEnvConfig`); unknown keys raise."""
    return split_env_config(config, AgentEnvConfig, "openai_agent")


def load_agent(agent: str | Callable[..., Any]) -> Callable[..., Any]:
    """The agent function "package.module:function" names (or the function given)."""
    if callable(agent):
        return agent
    module_name, _, name = agent.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"agent={agent!r} cannot be loaded ({type(e).__name__}: {e}); name a "
                         "function importable in every env runner, 'package.module:function'"
                         ) from e
    if not callable(found):
        raise ValueError(f"agent={agent!r} is {found!r}, not a function")
    return found


class OpenAIAgentEnv(MathVerifyEnv):
    """The problems and verifier of `MathVerifyEnv`, and an agent that solves them (module
    docstring). `agent_driven`: the env runner runs the agent instead of stepping the env."""

    agent_driven = True

    def __init__(self, config: Mapping[str, Any] | None = None):
        problem_config, self.agent_settings = split_agent_config(config)
        super().__init__(problem_config)
        self.agent = load_agent(self.agent_settings.agent)
        self.max_total_tokens = self.agent_settings.max_total_tokens or (
            self.config.prompt_length + self.config.response_length)

    def problem(self, reset_info: Mapping[str, Any]) -> dict[str, Any]:
        """The record an agent receives for the episode `reset()` started with `reset_info`."""
        return {"index": reset_info["prompt_index"], "prompt": reset_info["prompt"],
                "answer": reset_info["answer"], "model": self.agent_settings.model_name}

    def score(self, prompt_index: int, result: Any) -> tuple[float, dict[str, Any]]:
        """The reward of what the agent returned, and the final info: a number is the reward;
        a string is a final answer the verifier scores. Anything else raises TypeError."""
        if isinstance(result, str):
            verification = self.verify_text(prompt_index, result)
            return verification.score, {VERIFIER_INFO: verification.as_info(),
                                        FINAL_ANSWER: result}
        if isinstance(result, bool) or not isinstance(result, int | float) or \
                not math.isfinite(result):
            raise TypeError(f"the agent returned {result!r:.80} ({type(result).__name__}); "
                            "return a finite reward (a number) or a final answer (a str)")
        return float(result), {}

