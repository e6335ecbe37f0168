"""Masked importance sampling (`core.rollout_rejection_mask`): hand values for each level,
the default lower bound, long responses in log space, and agreement with verl's
`compute_rollout_rejection_mask` (verl/trainer/ppo/rollout_corr_helper.py at commit
0b4e2a814129c07f016787cbce476132ceb6c5cb), re-implemented below from that file."""

from __future__ import annotations

import math

import pytest
import torch

from rllib_llm import core

MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])


def rejection(log_ratio, mask=MASK, **kwargs):
    keep, metrics = core.rollout_rejection_mask(log_ratio, torch.zeros_like(log_ratio), mask,
                                                **kwargs)
    return keep, {k: v.item() for k, v in metrics.items()}


def test_token_level_drops_each_token_outside_the_bounds():
    # Ratios e^0 = 1, e^1 = 2.72, e^-1 = 0.37 | 1.5, 0.6; bounds [0.5, 2].
    lr = torch.tensor([[0.0, 1.0, -1.0, 9.0], [math.log(1.5), math.log(0.6), 0.0, 0.0],
                       [5.0, 5.0, 5.0, 5.0]])
    keep, m = rejection(lr, level="token", upper=2.0)
    assert keep.tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]]
    assert m["rollout_rs_masked_frac"] == pytest.approx(2 / 5)  # 2 of 5 mask tokens
    assert m["rollout_rs_seq_masked_frac"] == pytest.approx(1 / 2)  # of the 2 responses


def test_sequence_level_uses_the_product_and_geometric_the_mean():
    # Row 0: log ratios 0.3 x 3, sum 0.9 (product 2.46), mean 0.3 (1.35).
    # Row 1: log ratios 0.5, -0.5: product and mean 1.
    lr = torch.tensor([[0.3, 0.3, 0.3, 7.0], [0.5, -0.5, 0.0, 0.0], [0.0] * 4])
    keep, m = rejection(lr, level="sequence", upper=2.0)
    assert keep.tolist() == [[0, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]]
    assert m["rollout_rs_masked_frac"] == pytest.approx(3 / 5)
    assert m["rollout_rs_seq_masked_frac"] == pytest.approx(1 / 2)
    keep, m = rejection(lr, level="geometric", upper=2.0)
    assert keep.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]]
    assert m["rollout_rs_masked_frac"] == 0.0
    # A lower bound above the row's geometric mean drops it whole.
    keep, _ = rejection(lr, level="geometric", upper=2.0, lower=0.99)
    assert keep.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]]
    keep, _ = rejection(-lr, level="geometric", upper=2.0, lower=0.8)
    assert keep[0].tolist() == [0, 0, 0, 0]  # geometric mean e^-0.3 = 0.74 < 0.8


def test_the_lower_bound_defaults_to_one_over_the_upper():
    lr = torch.tensor([[math.log(0.26), math.log(0.24), 0.0, 0.0], [0.0] * 4, [0.0] * 4])
    keep, _ = rejection(lr, level="token", upper=4.0)  # lower 0.25
    assert keep[0].tolist() == [1, 0, 1, 0]


def test_a_long_responses_product_neither_overflows_nor_underflows():
    n = 4000
    mask = torch.ones(1, n)
    up, down = torch.full((1, n), 0.5), torch.full((1, n), -0.5)  # sums of +-2000
    for lr in (up, down):
        keep, _ = core.rollout_rejection_mask(lr, torch.zeros_like(lr), mask, level="sequence",
                                              upper=1e300)
        assert keep.sum() == 0  # e^2000 > 1e300 and e^-2000 < 1e-300: both dropped, no NaN


@pytest.mark.parametrize("kwargs,match", [
    ({"level": "sentence", "upper": 2.0}, "level='sentence'"),
    ({"level": "token", "upper": 1.0}, "upper=1.0"),
    ({"level": "token", "upper": 2.0, "lower": 1.0}, "lower=1.0"),
])
def test_bad_arguments_name_themselves(kwargs, match):
    with pytest.raises(ValueError, match=match):
        core.rollout_rejection_mask(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2),
                                    **kwargs)


# --- verl's definition ----------------------------------------------------------------------------
def verl_rejection_mask(log_ratio, response_mask, rollout_rs, upper, lower=None):
    """verl's compute_rollout_rejection_mask (its mask and modified response mask only): weights
    exp(clamp(log ratio aggregated, -20, 20)) kept where lower <= w <= upper."""
    lower = 1.0 / upper if lower is None else lower
    if rollout_rs == "token":
        w = torch.exp(log_ratio.clamp(-20, 20))
    elif rollout_rs == "sequence":
        s = (log_ratio * response_mask).sum(-1, keepdim=True)
        w = torch.exp(s.clamp(-20, 20)).expand_as(log_ratio)
    else:  # geometric: verl_F.masked_mean over the row (sum / (mask count + 1e-8))
        s = (log_ratio * response_mask).sum(-1, keepdim=True) / \
            (response_mask.sum(-1, keepdim=True) + 1e-8)
        w = torch.exp(s.clamp(-20, 20)).expand_as(log_ratio)
    return response_mask * ((w >= lower) & (w <= upper)).float()


@pytest.mark.parametrize("level", core.ROLLOUT_RS_LEVELS)
@pytest.mark.parametrize("lower", [None, 0.3])
def test_agrees_with_verls_definition(level, lower):
    g = torch.Generator().manual_seed(0)
    mask = (torch.rand(64, 12, generator=g) < 0.8).double()
    mask[:, 0] = 1  # every row has a token (verl divides by the count + 1e-8)
    # Token noise plus a per-row shift, so rows' products and means leave the bounds too.
    log_ratio = torch.randn(64, 12, generator=g, dtype=torch.float64) * 0.4 + \
        torch.randn(64, 1, generator=g, dtype=torch.float64) * 0.5
    ours, _ = core.rollout_rejection_mask(log_ratio, torch.zeros_like(log_ratio), mask,
                                          level=level, upper=1.8, lower=lower)
    theirs = verl_rejection_mask(log_ratio * mask, mask, level, 1.8, lower)
    assert 0 < ours.sum() < mask.sum()  # some tokens kept, some dropped: the test can fail
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
