"""Register the environments of this package under their names, with Ray Tune and with Gymnasium.

`register_envs()` is idempotent and cheap to repeat. Both registries receive a recipe, never an
environment, so registering builds nothing: the tokenizer and dataset load when an env is made.

- Ray Tune (what RLlib's `config.environment("math_verify", env_config={...})` looks up): the
  creator receives RLlib's `EnvContext` (a dict of the env config) and passes it on whole.
- Gymnasium: `gymnasium.make("math_verify", config={...})`, or the same keys as keyword arguments,
  `gymnasium.make("math_verify", dataset="arithmetic", response_length=8)`; both may be combined,
  keywords winning. Wrappers hide `step_chunk`: call it on `env.unwrapped`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MATH_VERIFY = "math_verify"
MATH_TOOL = "math_tool"
OPENAI_AGENT = "openai_agent"
_ENTRY_POINT = "rllib_llm.envs.math_verify_env:MathVerifyEnv"
_TOOL_ENTRY_POINT = "rllib_llm.envs.registration:make_math_tool_env"
_AGENT_ENTRY_POINT = "rllib_llm.envs.openai_agent_env:OpenAIAgentEnv"


def make_math_verify_env(config: Mapping[str, Any] | None = None):
    """The creator registered with Ray Tune: `MathVerifyEnv(config)`, imported on first use."""
    from rllib_llm.envs.math_verify_env import MathVerifyEnv

    return MathVerifyEnv(config)


def make_math_tool_env(config: Mapping[str, Any] | None = None, **overrides: Any):
    """The creator of "math_tool" (`tool_env.make_math_tool_env`), imported on first use."""
    from rllib_llm.envs.tool_env import make_math_tool_env as make

    return make({**(config or {}), **overrides})


def make_openai_agent_env(config: Mapping[str, Any] | None = None):
    """The creator of "openai_agent" (`openai_agent_env.OpenAIAgentEnv`), imported on first use."""
    from rllib_llm.envs.openai_agent_env import OpenAIAgentEnv

    return OpenAIAgentEnv(config)


def register_envs() -> None:
    """Register "math_verify", "math_tool" and "openai_agent" with Ray Tune's env registry and
    with Gymnasium's (idempotent)."""
    import gymnasium

    if MATH_VERIFY not in gymnasium.registry:
        gymnasium.register(id=MATH_VERIFY, entry_point=_ENTRY_POINT)
    if MATH_TOOL not in gymnasium.registry:
        gymnasium.register(id=MATH_TOOL, entry_point=_TOOL_ENTRY_POINT)
    if OPENAI_AGENT not in gymnasium.registry:
        gymnasium.register(id=OPENAI_AGENT, entry_point=_AGENT_ENTRY_POINT)
    # Imported here, not at module level: Ray Tune takes seconds to import, and `rllib_llm.envs`
    # must stay light. Registering again replaces the same creator, and also covers a Ray session
    # started after the first call (the registry forwards entries to it).
    from ray.tune.registry import register_env

    register_env(MATH_VERIFY, make_math_verify_env)
    register_env(MATH_TOOL, make_math_tool_env)
    register_env(OPENAI_AGENT, make_openai_agent_env)
