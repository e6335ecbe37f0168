"""An error raised inside a remote runner's `sample()` stops training at once, with its cause.

RLlib runs a function on a remote EnvRunner through its `apply`, which, when the function raises,
logs the error, sleeps `delay_between_env_runner_restarts_s` (60 s by default) and ends the
process for Ray to restart it (ray/rllib/utils/actor_manager.py). That suits a runner that died
of something passing; an exception inside `sample()` (a ValueError from the env, its data or its
verifier) is the same on every try, and three tries cost three restarts and three minutes before
the run stopped.

So the sampling calls (sync_sampling.py, async_sampling.py) run `sample_or_error` on the runner:
an exception there comes back as a `SampleError` value, the runner stays up, and the driver raises
`SampleFailedError` naming the runner and the cause, in seconds. A runner that dies (killed, out of
memory, a crash in native code) returns nothing: it is still restarted and its prompts sampled
again, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SampleError:
    """What a runner's `sample()` (or `evaluate()`) raised, as text (an exception need not
    pickle)."""

    runner: int
    cause: str  # "ValueError: <its first line>"
    call: str = "sample()"


class SampleFailedError(RuntimeError):
    """A remote runner's `sample()` raised: training stops, naming the runner and the cause."""


def sample_or_error(runner, num_prompts: int) -> tuple[list, dict[str, Any]] | SampleError:
    """On the runner: `(runner.sample(num_prompts=...), runner.get_metrics())`, or the
    SampleError of what they raised (logged there with its traceback)."""
    return call_or_error(runner, "sample()",
                         lambda: (runner.sample(num_prompts=num_prompts), runner.get_metrics()))


def call_or_error(runner, call: str, fn: Callable[[], T]) -> T | SampleError:
    """On the runner: `fn()`, or the SampleError of what it raised (logged there with its
    traceback); `call` names it in the message ("evaluate()")."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - returned to the driver, which raises it
        logger.exception("%s raised on env runner %s", call, runner.worker_index)
        lines = [line for line in str(e).splitlines() if line.strip()]
        return SampleError(runner.worker_index,
                           f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__, call)


def raise_if_failed(outcomes: list[Any]) -> None:
    """Raise SampleFailedError if any of `outcomes` (what `sample_or_error` returned) is a
    SampleError: the first one's runner and cause, in one line."""
    errors = [o for o in outcomes if isinstance(o, SampleError)]
    if errors:
        first = errors[0]
        raise SampleFailedError(
            f"env runner {first.runner}'s {first.call} raised {first.cause} (its traceback is "
            f"in that runner's log); an error in {first.call} itself, in the env, its data or "
            "its verifier, is the same on every try, so training stops here instead of "
            "restarting the runner")
