"""A collapsed run says so, once: hand-made metric sequences for the detector, and the embedded
model at lr=10, which collapsed silently (accuracy 0.33 -> 0.0 in one iteration, loss ~0)."""

from __future__ import annotations

import logging

import pytest

from rllib_llm.algorithm.collapse import (
    LEARNING_RATE_PATH,
    PATHS,
    CollapseWatch,
    collapse_signs,
)
from rllib_llm.learner.learner import ENTROPY, GRAD_NORM
from rllib_llm.rollout.sample_metrics import ACCURACY


def rows(accuracy=None, entropy=None, grad=None) -> list[dict[str, float]]:
    """One row per iteration from parallel lists (None: the metric is absent)."""
    n = max(len(x) for x in (accuracy, entropy, grad) if x is not None)
    columns = ((ACCURACY, accuracy), (ENTROPY, entropy), (GRAD_NORM, grad))
    return [{key: values[i] for key, values in columns if values is not None} for i in range(n)]


def test_the_lr_10_collapse_is_seen_by_accuracy_entropy_and_gradient():
    # The embedded recipe at lr=10: one good iteration, then a deterministic wrong answer.
    history = rows(accuracy=[0.44, 0.0, 0.0, 0.0], entropy=[0.63, 6e-4, 0.0, 0.0],
                   grad=[3.8, 0.0, 0.0, 0.0])
    signs = collapse_signs(history)
    assert signs == [
        "training accuracy fell from 0.44 to 0 for 3 iterations",
        "entropy fell from 0.63 to 0 nats per token",
        "the gradient was 0 for 3 iterations (every group's responses scored alike: the policy "
        "stopped changing)",
    ]
    assert collapse_signs(history[:3]) == []  # not yet PATIENCE iterations of it


@pytest.mark.parametrize(("history", "expected"), [
    # Accuracy alone falls (entropy stays: a policy sampling wrong answers).
    (rows(accuracy=[0.3, 0.4, 0.0, 0.0, 0.0], entropy=[0.6] * 5), ["training accuracy fell"]),
    # Entropy alone collapses while accuracy holds at 0.5: groups alike, nothing to learn.
    (rows(accuracy=[0.5] * 5, entropy=[0.5, 0.4, 1e-4, 5e-5, 0.0]), ["entropy fell"]),
    # The gradient alone (a rare metric set: no accuracy, no entropy).
    (rows(grad=[1.0, 0.0, 0.0, 0.0]), ["the gradient was 0"]),
])
def test_each_sign_alone(history, expected):
    signs = collapse_signs(history)
    assert [s[:len(e)] for s, e in zip(signs, expected)] == expected and len(signs) == 1


@pytest.mark.parametrize("history", [
    # A hard task never solved: accuracy 0 throughout is no fall.
    rows(accuracy=[0.0] * 10, entropy=[0.8] * 10),
    # Rare successes (below MIN_ACCURACY_BEFORE) then zeros: noise, not a collapse.
    rows(accuracy=[0.02, 0.0, 0.03, 0.0, 0.0, 0.0], entropy=[0.8] * 6),
    # A zero that does not last PATIENCE iterations.
    rows(accuracy=[0.4, 0.0, 0.0, 0.2, 0.0, 0.0], entropy=[0.6] * 6),
    # A solved task: entropy ~0 and no gradient at accuracy 1 is done, not collapsed.
    rows(accuracy=[0.6, 0.9, 1.0, 1.0, 1.0], entropy=[0.3, 0.1, 1e-4, 1e-4, 0.0],
         grad=[2.0, 1.0, 0.0, 0.0, 0.0]),
    # Low entropy from the start (a sharp pretrained model) has not fallen.
    rows(accuracy=[0.5] * 5, entropy=[5e-4] * 5),
    # Non-finite values say nothing.
    rows(accuracy=[0.4, float("nan"), 0.0, 0.0], grad=[1.0, 0.0, float("nan"), 0.0]),
])
def test_healthy_or_undecided_runs_raise_no_sign(history):
    assert collapse_signs(history) == []


def nested(row: dict[str, float]) -> dict:
    """`row` as `algo.train()` nests it (the learning rate under "lr")."""
    result: dict = {}
    for name, value in row.items():
        *parents, last = LEARNING_RATE_PATH if name == "lr" else PATHS[name]
        target = result
        for key in parents:
            target = target.setdefault(key, {})
        target[last] = value
    return result


def test_the_watch_warns_once_naming_the_settings_and_the_rate_now():
    watch = CollapseWatch({"lr": [[0, 1e-3], [1000, 10.0]], "entropy_coef": 0.0})
    history = rows(accuracy=[0.44, 0.0, 0.0, 0.0, 0.0], entropy=[0.63, 0.0, 0.0, 0.0, 0.0])
    said = [watch.observe(nested({**row, "lr": 10.0}), iteration=i)
            for i, row in enumerate(history, start=1)]
    assert said[:3] == [None, None, None] and said[4] is None
    assert said[3] == (
        "rllib_llm: training collapsed by iteration 4: training accuracy fell from 0.44 to 0 for "
        "3 iterations; entropy fell from 0.63 to 0 nats per token. Most likely a step too large "
        "for this model: lr=10.0, entropy_coef=0.0; lower lr (or grad_clip, pg_clip), or raise "
        "entropy_coef to keep the policy sampling.")


@pytest.mark.usefixtures("ray_session")
def test_the_embedded_model_at_lr_10_warns_once(caplog):
    from rllib_llm.recipes.embedded import embedded_config

    algo = embedded_config("topr", seed=0, lr=10.0, rollout_batch_size=16).build_algo()
    try:
        with caplog.at_level(logging.WARNING, logger="rllib_llm.algorithm.rlvr"):
            for _ in range(5):
                algo.train()
    finally:
        algo.stop()
    warnings = [r.getMessage() for r in caplog.records if "training collapsed" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "training accuracy fell" in warnings[0] and "lr=10.0" in warnings[0]
