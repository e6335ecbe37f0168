"""`RLVRConfig` where users and its stub know it: `from rllib_llm.algorithm.config import
RLVRConfig`, typed by config.pyi (the stub IDEs and mypy read; config_types.py writes it).

The class lives in rlvr.py beside its algorithm, `RLVR`, as RLlib's ppo.py holds PPOConfig and
PPO: each names the other. Checkpoints that pickled the class under this module's name still
load.
"""

from rllib_llm.algorithm.config_keys import ENV_RUNNER_SECTIONS
from rllib_llm.algorithm.rlvr import RLVRConfig

__all__ = ["ENV_RUNNER_SECTIONS", "RLVRConfig"]
