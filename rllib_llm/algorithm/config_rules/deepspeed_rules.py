"""The rules of RLVRConfig's DeepSpeed settings: rejected where a torch learner would ignore
them, or where they ask for what the DeepSpeed learner does not (yet) do. (Here, beside the config
that calls them: the learner layer, which builds DeepSpeed's config, may not import the fields.)"""

from __future__ import annotations

import importlib.util

from rllib_llm import core
from rllib_llm.algorithm.fields import refuse_changed
from rllib_llm.learner.deepspeed_config import owned_deepspeed_keys

# Settings only a DeepSpeed learner reads.
DEEPSPEED_FIELDS = ("zero_stage", "offload_optimizer", "offload_param", "deepspeed_config")


def check_deepspeed_settings(cfg) -> None:
    """Raise ValueError when an RLVRConfig's DeepSpeed settings would be ignored (a torch
    learner), or ask for what the DeepSpeed learner does not (yet) do."""
    if cfg.learner_strategy != "deepspeed":
        refuse_changed(cfg, DEEPSPEED_FIELDS,
                       f"configure DeepSpeed's ZeRO, but learner_strategy={cfg.learner_strategy!r}"
                       " would ignore them; set learner_strategy='deepspeed' (and num_learners "
                       ">= 1).")
        return
    if cfg.in_evaluation:
        return
    why = None
    if cfg.num_learners < 1:
        why = ("needs num_learners >= 1: each learner actor is one ZeRO rank of the process "
               "group RLlib sets up for remote learners")
    elif core.adv_estimator_info(cfg.adv_estimator).needs_critic:
        why = (f"does not train a critic (adv_estimator={cfg.adv_estimator!r}) yet: its two "
               "optimizers are not partitioned; use learner_strategy='torch'")
    elif cfg.grad_clip_by != "global_norm":
        why = f"clips by the global norm only, not grad_clip_by={cfg.grad_clip_by!r}"
    elif cfg.offload_param and cfg.zero_stage != 3:
        why = (f"offloads the weights (offload_param=True) only with zero_stage=3, where "
               f"they are partitioned; zero_stage={cfg.zero_stage} keeps them whole")
    elif owned := owned_deepspeed_keys(cfg.deepspeed_config):
        why = (f"sets {', '.join(owned)} from RLVRConfig fields, not from deepspeed_config "
               "(zero_stage, offload_optimizer, offload_param, grad_clip, model_dtype, "
               "micro_batch_size)")
    elif cfg.zero_stage == 3 and cfg.use_fused_kernels:
        why = ("does not run fused kernels (use_fused_kernels=True) on ZeRO-3's partitioned "
               "LM head: they read its weight outside its forward; use zero_stage=2")
    elif cfg.zero_stage == 3 and cfg.lora_rank:
        why = ("does not train LoRA adapters on ZeRO-3's partitioned weights: merging them "
               "for the env runners would gather every layer; use zero_stage=2")
    elif importlib.util.find_spec("deepspeed") is None:
        why = ("needs DeepSpeed: DS_BUILD_OPS=0 pip install --no-build-isolation "
               "'rllib_llm[deepspeed]'")
    if why:
        raise ValueError(f"RLVRConfig.learner_strategy='deepspeed' {why}.")
