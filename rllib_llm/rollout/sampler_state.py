"""What decides an env runner's next samples besides the weights, and its part of a checkpoint:
the count of training sample calls (each call's seed), the count of groups (their ids), the env's
data order and, with partial rollouts, the responses in flight.

A run resumed from a checkpoint restores all of them, so it draws what the uninterrupted run
would (tests/algorithm/test_resume.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rllib_llm.rollout.partial_rollouts import InFlight

# The runner's part of a checkpoint that RLlib's EnvRunner state leaves out.
SAMPLER_STATE = "rlvr_sampler"


@dataclass
class SampleCounts:
    """How many training sample calls and groups a runner has drawn so far.

    Attributes:
        calls: training `sample()` calls: they seed the sampler.
        groups: groups (prompts with their responses) started: they number the group ids.
    """

    calls: int = 0
    groups: int = 0

    def next_call(self) -> int:
        """The index of a new training sample call (0 for the first), counting it."""
        call = self.calls
        self.calls += 1
        return call

    def next_group_id(self, worker_index: int) -> str:
        """A new group's id, unique over the runners of a run, counting the group."""
        group = self.groups
        self.groups += 1
        return f"{worker_index}-{group}"


def sample_seed(seed: int | None, worker_index: int, call: int) -> int | None:
    """The sampling seed of a runner's training call number `call` (None without a config
    `seed`). Mixed from the config's seed, the runner's index and the call's: two runners never
    draw with the same seed, and a resumed run (whose count is restored) draws the seeds the
    uninterrupted run would."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([seed, worker_index, call]).generate_state(1)[0])


def sampler_state(env, counts: SampleCounts, in_flight: InFlight | None) -> dict[str, Any]:
    """The runner's `SAMPLER_STATE`: the env's data order, the counts, and the responses that
    partial rollouts continue next call."""
    state = {"data_order": env.order_state(), "sample_calls": counts.calls,
             "groups": counts.groups}
    if in_flight is not None:
        state["in_flight"] = in_flight.get_state()
    return state


def restore_sampler_state(state: dict[str, Any], env, counts: SampleCounts,
                          in_flight: InFlight | None) -> None:
    """Put `state` (from `sampler_state`) back into `env`, `counts` and `in_flight`."""
    env.set_order_state(state["data_order"])
    counts.calls = state["sample_calls"]
    counts.groups = state["groups"]
    if in_flight is not None:
        in_flight.set_state(state.get("in_flight", {"in_flight": [], "finished": []}))
