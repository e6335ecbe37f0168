"""On-policy distillation learns on the embedded task: the shipped student (`embedded`) distilled
from the embedded model trained by RL (`embedded_teacher`, rllib_llm/models/embedded_teacher/)
moves its held-out accuracy toward the teacher's, with no verifier reward in its advantages.

A distillation term of the wrong sign, a teacher scored on other tokens or at another
temperature, or a term that never reaches the loss leaves the student where it was (or sends it
away from the teacher); here the student must close GAP_SHARE of the distance to the teacher.

Calibrated on the 2-core development machine, shared with other runs (benchmarks/RESULTS.md,
"On-policy distillation"): this test (seed 1, 4 samples per problem) measured the student at
31.7% -> 45.8% after 150 iterations against the teacher's 65.1%, 42% of the gap closed, in 129 s;
benchmarks/distillation.py (2 samples per problem) 30.5% -> 41.4% after 100 iterations and 45.4%
after 150, where TOPR on the verifier reward alone reached 37.8% and 41.8%.
"""

from __future__ import annotations

import numpy as np
import pytest

from rllib_llm.recipes.embedded import embedded_config

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_session")]

SEED = 1
ITERATIONS = 150
EVAL_SAMPLES = 4  # 2,000 samples per measurement: 1.1 points of noise at 50%, 1.6 on a gain
# The share of the student-to-teacher gap the student must close: 42% measured; a quarter is
# ~8.5 points of a 34-point gap, over 3 standard deviations of the gain's noise (1.6 points)
# below the run measured and 5 above no learning.
GAP_SHARE = 0.25


def held_out_accuracy(algo) -> float:
    """Mean accuracy of EVAL_SAMPLES samples (seeds 0, 1, ...) on each of the 500 test problems."""
    return float(np.mean([algo.evaluate_accuracy(num_problems=500, seed=s)["pass@1"]
                          for s in range(EVAL_SAMPLES)]))


def test_the_student_moves_toward_the_teacher():
    teacher_algo = embedded_config("topr", seed=SEED,
                                   model_name_or_path="embedded_teacher").build_algo()
    teacher = held_out_accuracy(teacher_algo)
    teacher_algo.stop()
    # Distillation alone: the teacher's per-token term is the whole advantage (the verifier's
    # weighs 0), under the plain policy gradient.
    algo = embedded_config("vanilla", seed=SEED, teacher_model_name_or_path="embedded_teacher",
                           verifier_advantage_coef=0.0).build_algo()
    before = held_out_accuracy(algo)
    for _ in range(ITERATIONS):
        algo.train()
    after = held_out_accuracy(algo)
    algo.stop()
    closed = (after - before) / (teacher - before)
    print(f"student {before:.4f} -> {after:.4f}, teacher {teacher:.4f}: {closed:.0%} of the gap")
    assert teacher - before > 0.2, (before, teacher)  # the checkpoints are what they claim
    assert closed >= GAP_SHARE, (before, after, teacher)
