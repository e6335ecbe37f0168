"""On-policy distillation learns on the embedded task: the shipped student (`embedded`) distilled
from the embedded model trained by RL (`embedded_teacher`, rllib_llm/models/embedded_teacher/)
moves its held-out accuracy toward the teacher's, with no verifier reward in its advantages.

A distillation term of the wrong sign, a teacher scored on other tokens or at another
temperature, or a term that never reaches the loss leaves the student where it was (or sends it
away from the teacher); here the student must close GAP_SHARE of the distance to the teacher.

Measured as held-out GREEDY accuracy on the 500 test problems (deterministic: an unchanged
student scores the same), at a constant learning rate of 1e-4 (tests/project/test_learning.py
says why: greedy accuracy rises steadily at that rate and swings under the embedded schedule's
peak). Calibrated on the 2-core development machine, two runs side by side (2026-11-28): the
teacher 88.0%, the student 59.8%; after 20 / 30 / 40 / 50 iterations the student had closed 57% /
61% / 55% / 60% of the gap (seed 1) and 49% / 60% / 47% / 54% (seed 2). With the embedded schedule
and 4 samples per problem this test needed 150 iterations (31.7% -> 45.8% sampled, 42% of the
gap to the teacher's 65.1%; benchmarks/RESULTS.md, "On-policy distillation").
"""

from __future__ import annotations

import pytest

from rllib_llm.recipes.embedded import embedded_config

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_session")]

SEED = 1
ITERATIONS = 30
LR = 1e-4
# The share of the student-to-teacher gap the student must close: 47% or more at every reading
# from 20 iterations on; 30% is 8.5 points of the 28-point gap, 5 under the weakest reading.
GAP_SHARE = 0.3


def held_out_accuracy(algo) -> float:
    """Greedy accuracy on the 500 test problems."""
    return algo.evaluate_accuracy(num_problems=500, temperature=0)["pass@1"]


def test_the_student_moves_toward_the_teacher():
    teacher_algo = embedded_config("topr", seed=SEED,
                                   model_name_or_path="embedded_teacher").build_algo()
    teacher = held_out_accuracy(teacher_algo)
    teacher_algo.stop()
    # Distillation alone: the teacher's per-token term is the whole advantage (the verifier's
    # weighs 0), under the plain policy gradient.
    algo = embedded_config("vanilla", seed=SEED, teacher_model_name_or_path="embedded_teacher",
                           verifier_advantage_coef=0.0, lr=LR).build_algo()
    before = held_out_accuracy(algo)
    for _ in range(ITERATIONS):
        algo.train()
    after = held_out_accuracy(algo)
    algo.stop()
    closed = (after - before) / (teacher - before)
    print(f"student {before:.4f} -> {after:.4f}, teacher {teacher:.4f}: {closed:.0%} of the gap")
    assert teacher - before > 0.2, (before, teacher)  # the checkpoints are what they claim
    assert closed >= GAP_SHARE, (before, after, teacher)
