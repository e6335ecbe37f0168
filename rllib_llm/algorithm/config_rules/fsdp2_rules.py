"""The rules of learner_strategy='fsdp2': what the FSDP2 learner (learner/fsdp2_learner.py) does
not (yet) combine with is refused with one line naming the setting and the fix, never ignored.
It shards the policy, a reference model, a critic (or a value head) and a distillation teacher
alike; trains LoRA adapters on the sharded base; runs fused kernels and remove_padding, whose
trunk and heads are called apart, in each model's second forward (`IN_OWN_FORWARD`); and clips
by every grad_clip_by over the shards (`fsdp2.clip_`)."""

from __future__ import annotations


def check_fsdp2(cfg) -> None:
    """Raise ValueError when an RLVRConfig asks the FSDP2 learner for what it does not do."""
    if cfg.learner_strategy != "fsdp2" or cfg.in_evaluation:
        return
    why = None
    if cfg.num_learners < 1:
        why = ("needs num_learners >= 1: each learner actor is one rank of the process group "
               "RLlib sets up for remote learners, and the model is sharded across them")
    elif cfg.autocast_dtype is not None:
        why = (f"does not autocast (autocast_dtype={cfg.autocast_dtype!r}): set "
               "autocast_dtype=None and model_dtype='bfloat16', FSDP2's own mixed precision "
               "(bf16 compute over float32 sharded weights, gradients reduced in float32)")
    if why:
        raise ValueError(f"RLVRConfig.learner_strategy='fsdp2' {why}.")
