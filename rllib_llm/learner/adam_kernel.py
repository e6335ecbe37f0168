"""torch Adam's kernel settings as a learner configures them (fused_optimizer, a learner class's
ADAM_FOREACH), kept after a checkpoint's param groups are loaded."""

from __future__ import annotations

import torch


def number_lr(optim: torch.optim.Optimizer, lr) -> None:
    """Set `lr` on every param group as a Python number: RLlib's lr schedules hand over a float32
    tensor, which torch Adam's foreach kernel refuses (it takes a tensor only when capturable,
    which a CPU is not)."""
    for group in optim.param_groups:
        group["lr"] = float(lr)


def use_configured_kernel(optim: torch.optim.Optimizer, fused: bool,
                          foreach: bool | None = None) -> None:
    """torch Adam's kernel choice lives in its param groups, which load_state_dict replaces with
    the saved ones: set it back (fused steps keep their step counts on the parameters' device)."""
    for group in optim.param_groups:
        group["fused"], group["foreach"] = fused, foreach
        if foreach and isinstance(group["lr"], torch.Tensor):
            group["lr"] = float(group["lr"])  # (`number_lr`)
        for param in group["params"] if fused else ():
            step = optim.state.get(param, {}).get("step")
            if torch.is_tensor(step):
                optim.state[param]["step"] = step.to(param.device, torch.float32)
