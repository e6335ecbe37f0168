"""DAPO's soft overlong punishment (`core.overlong_penalty`) against hand values of the paper's
piecewise formula (eq. 13) and verl's ramp, and its errors."""

from __future__ import annotations

import pytest
import torch

from rllib_llm import core


def test_the_paper_cases_by_hand():
    # L_max = 20, L_cache = 4: no penalty up to 16, a linear ramp to -1 at 20, -1 beyond.
    lengths = torch.tensor([0, 10, 16, 17, 18, 19, 20, 25])
    got = core.overlong_penalty(lengths, max_length=20, buffer_length=4)
    want = torch.tensor([0.0, 0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0])
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_the_factor_scales_the_ramp_as_verls_reward_manager_does():
    # verl: min(-(L - (L_max - L_cache)) / L_cache * factor, 0), here for L <= L_max.
    lengths = torch.arange(0, 21)
    factor = 0.5
    verl = torch.clamp(-(lengths - (20 - 8)) / 8 * factor, max=0.0)
    got = core.overlong_penalty(lengths, max_length=20, buffer_length=8, penalty_factor=factor)
    torch.testing.assert_close(got, verl.float())


def test_a_buffer_as_long_as_the_limit_penalises_every_token():
    got = core.overlong_penalty(torch.tensor([0, 1, 2, 4]), max_length=4, buffer_length=4)
    torch.testing.assert_close(got, torch.tensor([0.0, -0.25, -0.5, -1.0]), rtol=0, atol=0)


@pytest.mark.parametrize("kwargs,match", [
    ({"buffer_length": 0}, "buffer_length=0"),
    ({"buffer_length": 21}, "buffer_length=21"),
    ({"buffer_length": 4, "penalty_factor": -1.0}, "penalty_factor=-1.0"),
])
def test_bad_arguments_name_themselves(kwargs, match):
    with pytest.raises(ValueError, match=match):
        core.overlong_penalty(torch.tensor([1]), max_length=20, **kwargs)
