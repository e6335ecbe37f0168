"""Token-level RL environments with verifiable rewards: envs, verifier, datasets, registration.

Importing this package is light (no Ray, Gymnasium, sympy or transformers): the public names load
on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from rllib_llm.envs.arithmetic import arithmetic_problems
from rllib_llm.envs.registration import register_envs

if TYPE_CHECKING:
    from rllib_llm.envs.datasets import load_problems
    from rllib_llm.envs.math_verify_env import MathVerifyEnv
    from rllib_llm.envs.verifier import MathVerifier

# Name -> module: resolved on first access, so `import rllib_llm` does not pay for Gymnasium.
_LAZY = {
    "MathVerifyEnv": "rllib_llm.envs.math_verify_env",
    "MathVerifier": "rllib_llm.envs.verifier",
    "load_problems": "rllib_llm.envs.datasets",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rllib_llm.envs' has no attribute {name!r}")


__all__ = ["MathVerifier", "MathVerifyEnv", "arithmetic_problems", "load_problems", "register_envs"]
