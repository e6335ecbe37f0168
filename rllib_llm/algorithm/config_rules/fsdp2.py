"""The rules of learner_strategy='fsdp2': what the FSDP2 learner (learner/fsdp2_learner.py) does
not (yet) combine with is refused with one line naming the setting and the fix, never ignored."""

from __future__ import annotations

from rllib_llm import core


def check_fsdp2(cfg) -> None:
    """Raise ValueError when an RLVRConfig asks the FSDP2 learner for what it does not do."""
    if cfg.learner_strategy != "fsdp2" or cfg.in_evaluation:
        return
    why = None
    if cfg.num_learners < 1:
        why = ("needs num_learners >= 1: each learner actor is one rank of the process group "
               "RLlib sets up for remote learners, and the model is sharded across them")
    elif core.adv_estimator_info(cfg.adv_estimator).needs_critic:
        why = (f"does not train a critic (adv_estimator={cfg.adv_estimator!r}) yet: its "
               "second model and optimizer are not sharded; use learner_strategy='torch'")
    elif cfg.grad_clip_by != "global_norm":
        why = (f"clips by the whole model's norm over the shards only, not grad_clip_by="
               f"{cfg.grad_clip_by!r}; set grad_clip_by='global_norm'")
    elif cfg.lora_rank:
        why = ("does not train LoRA adapters (lora_rank > 0) yet: merging them for the env "
               "runners would gather the sharded base; use learner_strategy='torch' or "
               "'deepspeed' with zero_stage=2")
    elif cfg.use_remove_padding or cfg.use_fused_kernels:
        setting = "use_remove_padding" if cfg.use_remove_padding else "use_fused_kernels"
        why = (f"does not run {setting}=True yet: it calls the trunk and the LM head apart, "
               "outside the sharded model's forward that gathers their weights; set "
               f"{setting}=False")
    elif cfg.autocast_dtype is not None:
        why = (f"does not autocast (autocast_dtype={cfg.autocast_dtype!r}): set "
               "autocast_dtype=None and model_dtype='bfloat16', FSDP2's own mixed precision "
               "(bf16 compute over float32 sharded weights, gradients reduced in float32)")
    if why:
        raise ValueError(f"RLVRConfig.learner_strategy='fsdp2' {why}.")
