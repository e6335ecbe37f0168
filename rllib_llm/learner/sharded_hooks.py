"""What a sharded learner hooks into a model, and the module's calls of it: a second forward
in which a model's trunk and heads run apart, and the release of what a no-grad pass gathered.
Plain calls on a model no learner sharded."""

from __future__ import annotations

import torch

# A model's second forward, fn -> fn(), that FSDP2 learners register (fsdp2.shard_model).
IN_OWN_FORWARD = "in_own_forward"
# What frees the weights a sharded model gathered, () -> None, that FSDP2 learners set: a
# no-grad forward has no backward to free them (fsdp2.reshard).
RELEASE_GATHERED = "release_gathered"


def in_own_forward(model: torch.nn.Module, fn):
    """fn(), which calls `model`'s trunk and heads apart, inside `model`'s second forward where a
    sharded learner registered one (`IN_OWN_FORWARD`: FSDP2 gathers the root's weights, the
    embeddings and heads, in a forward only), else plainly."""
    run = getattr(model, IN_OWN_FORWARD, None)
    return fn() if run is None else run(fn)


def release_gathered(model: torch.nn.Module) -> None:
    """Free what a sharded `model` gathered in a no-grad pass (`RELEASE_GATHERED`), so that
    nothing done between passes (peft switching adapters' requires_grad) acts on whole copies
    FSDP2 then drops; nothing for an unsharded model."""
    release = getattr(model, RELEASE_GATHERED, None)
    if release is not None:
        release()
