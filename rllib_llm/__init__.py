"""rllib_llm: a Ray RLlib plugin for RL post-training of language models with verifiable rewards.

    from rllib_llm import RLVRConfig
    algo = RLVRConfig().environment("math_verify").training(pg_variant="topr").build()

Importing the package registers the `math_verify` environment with Ray Tune and Gymnasium. It
never imports vLLM or DeepSpeed: those load only when a config asks for them.
"""

__version__ = "0.1.0"

from typing import TYPE_CHECKING

from rllib_llm.envs import register_envs as _register_envs

if TYPE_CHECKING:  # what `__getattr__` returns, for type checkers (the stub types RLVRConfig)
    from rllib_llm.algorithm.config import RLVRConfig
    from rllib_llm.algorithm.rlvr import RLVR

_register_envs()


def __getattr__(name: str):
    # RLlib's algorithm stack is slow to import: load it when RLVRConfig/RLVR is first used.
    if name in ("RLVRConfig", "RLVR"):
        from rllib_llm import algorithm

        return getattr(algorithm, name)
    raise AttributeError(f"module 'rllib_llm' has no attribute {name!r}")


__all__ = ["RLVR", "RLVRConfig", "__version__"]
