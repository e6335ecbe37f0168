"""On-policy distillation's per-token signal (`core.reverse_kl_per_token`,
`core.distillation_advantages`) against hand-computed values: masks, the combination with a
verifier advantage, distillation alone, and its errors."""

from __future__ import annotations

import math

import pytest
import torch

from rllib_llm import core

# Two responses of three tokens; the second has a hole (an env token) and padding.
STUDENT = torch.log(torch.tensor([[0.5, 0.25, 0.8], [0.1, 0.9, 0.3]]))
TEACHER = torch.log(torch.tensor([[0.25, 0.25, 0.4], [0.4, 0.5, 0.9]]))
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])
LN2 = math.log(2)


def test_reverse_kl_is_student_minus_teacher_on_mask_tokens():
    got = core.reverse_kl_per_token(STUDENT, TEACHER, MASK)
    # log(0.5/0.25) = ln 2, log(0.25/0.25) = 0, log(0.8/0.4) = ln 2, log(0.1/0.4) = -2 ln 2.
    want = torch.tensor([[LN2, 0.0, LN2], [-2 * LN2, 0.0, 0.0]])
    torch.testing.assert_close(got, want)
    # Mean over the 4 mask tokens: (ln2 + 0 + ln2 - 2 ln2) / 4 = 0.
    torch.testing.assert_close(core.mean_reverse_kl(got, MASK), torch.tensor(0.0))


def test_the_mean_over_a_batch_that_disagrees():
    rkl = core.reverse_kl_per_token(STUDENT, TEACHER, torch.tensor([[1, 0, 1], [0, 0, 0]]))
    torch.testing.assert_close(core.mean_reverse_kl(rkl, torch.tensor([[1, 0, 1], [0, 0, 0]])),
                               torch.tensor(LN2))


def test_padding_holding_inf_or_nan_never_leaks():
    student = STUDENT.clone()
    student[1, 2] = float("nan")
    teacher = TEACHER.clone()
    teacher[1, 1] = -float("inf")
    got = core.reverse_kl_per_token(student, teacher, MASK)
    assert torch.isfinite(got).all()
    assert got[1, 1] == 0 and got[1, 2] == 0


def test_distillation_alone_is_minus_coef_times_the_reverse_kl():
    rkl = core.reverse_kl_per_token(STUDENT, TEACHER, MASK)
    verifier = torch.full((2, 3), 7.0)  # ignored with verifier_coef = 0
    got = core.distillation_advantages(verifier, rkl, MASK, distillation_coef=0.5,
                                       verifier_coef=0.0)
    want = torch.tensor([[-0.5 * LN2, 0.0, -0.5 * LN2], [LN2, 0.0, 0.0]])
    torch.testing.assert_close(got, want)


def test_added_to_a_verifier_advantage():
    rkl = core.reverse_kl_per_token(STUDENT, TEACHER, MASK)
    verifier = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    got = core.distillation_advantages(verifier, rkl, MASK, distillation_coef=2.0,
                                       verifier_coef=0.5)
    # 0.5 * A - 2 * r: row 0: 0.5 - 2 ln2, 0.5, 0.5 - 2 ln2; row 1: -0.5 + 4 ln2, then masked.
    want = torch.tensor([[0.5 - 2 * LN2, 0.5, 0.5 - 2 * LN2], [-0.5 + 4 * LN2, 0.0, 0.0]])
    torch.testing.assert_close(got, want)


def test_no_gradient_reaches_the_student_through_the_signal():
    student = STUDENT.clone().requires_grad_(True)
    rkl = core.reverse_kl_per_token(student, TEACHER, MASK)
    assert not rkl.requires_grad


def test_float64_in_float64_out():
    rkl = core.reverse_kl_per_token(STUDENT.double(), TEACHER, MASK)
    assert rkl.dtype == torch.float64


@pytest.mark.parametrize("kwargs,match", [
    ({"distillation_coef": -1.0}, "distillation_coef=-1.0"),
    ({"distillation_coef": 1.0, "verifier_coef": -0.5}, "verifier_coef=-0.5"),
])
def test_bad_coefficients_name_themselves(kwargs, match):
    rkl = core.reverse_kl_per_token(STUDENT, TEACHER, MASK)
    with pytest.raises(ValueError, match=match):
        core.distillation_advantages(torch.zeros(2, 3), rkl, MASK, **kwargs)


def test_shapes_must_agree():
    with pytest.raises(ValueError, match="same shape"):
        core.reverse_kl_per_token(STUDENT, TEACHER[:, :2], MASK)
