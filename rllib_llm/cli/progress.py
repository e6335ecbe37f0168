"""A progress bar for `rllib-llm train`: a Tune callback in the driver, so the trial itself stays
quiet (and a sweep, which shows Tune's trial table, has none).

    train  42%|████▏     | 42/100 [03:10<04:22, 4.5s/it, reward=0.61, acc=0.61, held_out=0.55,
                                                            kl=0.004, tok/s=512]
"""

from __future__ import annotations

import math
from typing import Any

from ray import tune

from rllib_llm.outputs import metric_names as m


def result_value(result: dict[str, Any], key: str) -> float | None:
    """`result[a][b]...` for the key "a/b/...", or None when absent or not a finite number."""
    value: Any = result
    for part in key.split("/"):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def postfix(result: dict[str, Any], tokens_per_s: float | None,
            held_out: float | None) -> dict[str, str]:
    """The bar's metrics: reward, training accuracy, the latest held-out accuracy, KL (to the
    reference model when there is one, else between the updated and the sampling policy) and
    tokens sampled per second of iteration."""
    shown = {}
    for label, key in (("reward", m.REWARD), ("acc", m.ACCURACY)):
        value = result_value(result, key)
        if value is not None:
            shown[label] = f"{value:.3f}"
    if held_out is not None:
        shown["held_out"] = f"{held_out:.3f}"
    kl = result_value(result, m.KL)
    label = "kl"
    if kl is None:
        kl, label = result_value(result, m.APPROX_KL), "approx_kl"
    if kl is not None:
        shown[label] = f"{kl:.4f}"
    if tokens_per_s is not None:
        shown["tok/s"] = f"{tokens_per_s:.0f}"
    return shown


class ProgressBar(tune.Callback):
    """One tqdm bar over the run's iterations; on a resumed run it starts where the run stands."""

    def __init__(self, iterations: int):
        self.iterations = iterations
        self._bar = None
        self._tokens: float | None = None
        self._held_out: float | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its callbacks with the experiment (tuner.pkl); a resume draws a new bar.
        return {**self.__dict__, "_bar": None, "_tokens": None}

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        from tqdm import tqdm

        done = int(result.get(m.ITERATION, 0))
        if self._bar is None:
            self._bar = tqdm(total=self.iterations, initial=max(done - 1, 0), desc="train",
                             unit="it", dynamic_ncols=True)
        held_out = result_value(result, m.HELD_OUT_ACCURACY)
        if held_out is not None:  # only iterations that evaluate report it
            self._held_out = held_out
        self._bar.set_postfix(postfix(result, self._tokens_per_s(result), self._held_out),
                              refresh=False)
        self._bar.update(done - self._bar.n)

    def _tokens_per_s(self, result: dict[str, Any]) -> float | None:
        """Response tokens sampled this iteration over its wall-clock time."""
        tokens = result_value(result, m.TOKENS_SAMPLED_LIFETIME)
        seconds = result_value(result, m.TIME_THIS_ITER_S)
        previous, self._tokens = self._tokens, tokens
        if tokens is None or previous is None or not seconds:
            return None
        return (tokens - previous) / seconds

    def on_experiment_end(self, trials, **info) -> None:
        if self._bar is not None:
            self._bar.close()
