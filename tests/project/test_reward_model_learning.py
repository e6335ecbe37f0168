"""Training against the shipped reward model's score ALONE (`embedded_reward`, served by a Ray
reward worker; reward_weights [0, 1]: the verifier only measures) raises the model's score and
held-out VERIFIER accuracy on the embedded task. A score that never reaches the episodes leaves
the model where it was, and a reward model the policy exploits lowers verifier accuracy (the
first-stage classifier, 76% accurate, took it from 31.7% to 3.9% sampled in 150 iterations of the
embedded schedule while its score rose; not re-measured at this test's budget): both fail here.

Measured as held-out GREEDY accuracy on the 500 test problems, at a constant learning rate of
1e-4 (tests/project/test_learning.py says why). Calibrated on the 2-core development machine, two
runs side by side (2026-11-28), the shipped 94.5%-accurate classifier: after 30 iterations, seeds
1 / 2 / 3 went +15.0 / +15.0 / +13.8 points from 59.8% (4 samples per problem: +3.7 / +3.0 / +3.1
from 31.65%), the model's mean score over the first 10 iterations to the last 10 +0.023 / +0.027
/ +0.044. Later the gain shrinks: +10.2 / +8.0 / +5.4 at 50 iterations, where the score rose
+0.031 to +0.038. The iteration's mean score has a standard deviation of about 0.02 (0.006 for a
10-iteration mean), so the score's bar, +0.01, asks only that it rose; the accuracy's bar is 5.8
points under the weakest seed and far from a run without signal, which loses 50 points here
(tests/project/test_learning.py). With the embedded schedule and 4 samples per problem this test
needed 150 iterations for +1.5 to +2.9 points (benchmarks/RESULTS.md, "Reward models").

The estimator is GRPO under the plain clipped loss ("ppo"): nothing in it reads the verifier's
verdict (TOPR would, through its split by correct answers).
"""

from __future__ import annotations

import numpy as np
import pytest

from rllib_llm.recipes.embedded import embedded_config

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_session_at_normal_priority")]

SEED = 1
ITERATIONS = 30
LR = 1e-4
MIN_GAIN = 0.08  # measured +15.0 / +15.0 / +13.8 (seeds 1-3); see the module docstring
MIN_SCORE_RISE = 0.01  # measured +0.023 / +0.027 / +0.044


def held_out_accuracy(algo) -> float:
    """Greedy verifier accuracy on the 500 test problems."""
    return algo.evaluate_accuracy(num_problems=500, temperature=0)["pass@1"]


def test_training_on_the_reward_models_score_alone_raises_verifier_accuracy():
    algo = embedded_config("ppo", seed=SEED, reward_model_name_or_path="embedded_reward",
                           reward_weights=[0.0, 1.0], lr=LR).build_algo()
    before = held_out_accuracy(algo)
    scores = []
    for _ in range(ITERATIONS):
        scores.append(algo.train()["reward_model"]["model_score_mean"])
    after = held_out_accuracy(algo)
    algo.stop()
    print(f"held-out verifier accuracy {before:.4f} -> {after:.4f} "
          f"({(after - before) * 100:+.1f} points); reward model's mean score "
          f"{np.mean(scores[:10]):.3f} -> {np.mean(scores[-10:]):.3f}")
    assert np.mean(scores[-10:]) > np.mean(scores[:10]) + MIN_SCORE_RISE  # the model's reward
    assert after - before >= MIN_GAIN, (before, after)
