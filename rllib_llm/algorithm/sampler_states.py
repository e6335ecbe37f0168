"""Our part of the algorithm's checkpoint: each remote env runner's sampler state (RLlib saves
only the driver's env runner, which does not sample when there are remote ones; one runner's
state is `rllib_llm.rollout.sampler_state`), and in asynchronous training the batches generated
ahead (`async_sampling.AsyncSampler`).
"""

from __future__ import annotations

from typing import Any

from rllib_llm.rollout.sampler_state import SAMPLER_STATE

# Their keys in the algorithm's state, beside RLlib's.
REMOTE_SAMPLERS = "rlvr_remote_samplers"
ASYNC_BATCHES = "rlvr_async_batches"


def sampler_states(group, async_sampler) -> dict[str, Any]:
    """The state of the remote runners' samplers of env runner group `group` (or None), and of
    `async_sampler` (an AsyncSampler, or None in synchronous training)."""
    state: dict[str, Any] = {}
    if group is not None and group.num_remote_env_runners() > 0:
        states = group.foreach_env_runner(
            lambda r: (r.worker_index, r.get_state(components=SAMPLER_STATE)),
            local_env_runner=False)
        state[REMOTE_SAMPLERS] = {index: s[SAMPLER_STATE] for index, s in states}
    if async_sampler is not None:
        state[ASYNC_BATCHES] = async_sampler.get_state()
    return state


def set_sampler_states(state: dict[str, Any], group, async_sampler) -> None:
    """Hand each remote runner of `group` its sampler's state from the algorithm's `state`, and
    `async_sampler` its batches, where the state holds them."""
    samplers = state.get(REMOTE_SAMPLERS)
    if samplers and group is not None:
        group.foreach_env_runner(
            lambda r: r.set_state({SAMPLER_STATE: samplers[r.worker_index]})
            if r.worker_index in samplers else None,
            local_env_runner=False)
    if async_sampler is not None and ASYNC_BATCHES in state:
        async_sampler.set_state(state[ASYNC_BATCHES])
