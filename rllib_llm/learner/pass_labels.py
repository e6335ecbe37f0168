"""Names of the learner's passes in a `torch.profiler` trace, and the label that marks one.

An update's learn phase is the policy scoring its own responses (old log-probs, with
`recompute_old_logp`), the reference scoring them (with a KL term), then per micro-batch a forward
with its loss and a backward, and per mini-batch an optimizer step. `label(name)` wraps each in
`torch.profiler.record_function` (the scoring passes in connector.py, the others in learner.py),
so a trace of one update (benchmarks/gpu/profile_summary.py) splits its time by pass.

A label costs nothing when no profiler records: `record_function` builds its RecordFunction even
then (measured: 23 us a call on a loaded 2-core CPU), so `label` first asks whether a profiler is
on (about 0.1 us) and otherwise returns a null context.
"""

from __future__ import annotations

import contextlib

import torch
from torch.profiler import record_function

OLD_LOGP = "rllib_llm/old_logp"  # the policy's log-probs of its responses, no grad
REFERENCE_LOGP = "rllib_llm/reference_logp"  # the reference model's, no grad
FORWARD = "rllib_llm/forward"  # a micro-batch's forward and its loss
BACKWARD = "rllib_llm/backward"  # its backward (recomputed activations included)
OPTIMIZER_STEP = "rllib_llm/optimizer_step"  # gradient norms, clipping and the optimizer's step
PASSES = (OLD_LOGP, REFERENCE_LOGP, FORWARD, BACKWARD, OPTIMIZER_STEP)


def label(name: str) -> contextlib.AbstractContextManager:
    """`record_function(name)` while a profiler records, else a null context."""
    if torch.autograd._profiler_enabled():
        return record_function(name)
    return contextlib.nullcontext()
