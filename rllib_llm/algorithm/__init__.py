"""The RLlib Algorithm and its config."""

from rllib_llm.algorithm.config import RLVRConfig
from rllib_llm.algorithm.rlvr import RLVR

__all__ = ["RLVR", "RLVRConfig"]
