"""Loaded at start-up by every Python process of a breakage check (`tests/breakage/run.py` puts
this folder first on PYTHONPATH, and Ray's workers inherit it): with RLLIB_LLM_BREAK_UPDATES=1,
every torch optimizer step is undone as soon as it is taken, so no update moves a weight, and
each step is logged (one line naming the pytest-xdist worker whose test took it) to the file
RLLIB_LLM_BREAK_LOG, so that the check knows which tests took an optimizer step at all.

The patch waits for `torch.optim.optimizer` to be imported (importing torch here would cost
every process, bubblewrap's children included, a second), then registers a global pre-hook that
copies each optimizer's parameters and a post-hook that writes the copies back. DeepSpeed's
ZeRO optimizers step a torch optimizer on their fp32 master weights, so they are undone too.
"""

import importlib.abc
import importlib.util
import os
import sys

_MODULE = "torch.optim.optimizer"


def _install(optimizer_module) -> None:
    saved = {}

    def before(optimizer, args, kwargs):
        saved[id(optimizer)] = [[p.detach().clone() for p in group["params"]]
                                for group in optimizer.param_groups]

    def after(optimizer, args, kwargs):
        import torch

        with torch.no_grad():
            for group, copies in zip(optimizer.param_groups, saved.pop(id(optimizer))):
                for p, copy in zip(group["params"], copies):
                    p.copy_(copy)
        log = os.environ.get("RLLIB_LLM_BREAK_LOG")
        if log:  # one short append: atomic, from any process of any test
            with open(log, "a") as f:
                f.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\n")

    optimizer_module.register_optimizer_step_pre_hook(before)
    optimizer_module.register_optimizer_step_post_hook(after)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        sys.meta_path.insert(0, self)
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _install(module)

        spec.loader.exec_module = exec_and_patch
        return spec


if os.environ.get("RLLIB_LLM_BREAK_UPDATES") == "1":
    sys.meta_path.insert(0, _Finder())
