"""Truncated rollout importance weights and the sampler/learner mismatch KL: hand values,
masking, no gradient, and every error."""

from __future__ import annotations

import math

import pytest
import torch

from rllib_llm.core import rollout_is_weights, rollout_mismatch_kl
from rllib_llm.core.rollout_correction import (
    ROLLOUT_IS_TRUNCATED_FRAC,
    ROLLOUT_IS_WEIGHT_MEAN,
    ROLLOUT_KL_K1,
    ROLLOUT_KL_K3,
)

# Row 0: log-ratios (old - rollout) ln 1.5, ln 0.5, ln 3 (capped to 2), then padding.
# Row 1: ln 0.8, then a masked env token holding garbage (nan must not leak).
OLD = torch.tensor([[math.log(1.5), math.log(0.5), math.log(3.0), 0.0],
                    [math.log(0.8), float("nan"), 0.0, 0.0]])
ROLLOUT = torch.zeros(2, 4)
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])


def test_token_level_hand_values():
    w, metrics = rollout_is_weights(OLD, ROLLOUT, MASK, level="token", threshold=2.0)
    expected = torch.tensor([[1.5, 0.5, 2.0, 0.0], [0.8, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(w, expected)
    torch.testing.assert_close(metrics[ROLLOUT_IS_WEIGHT_MEAN], torch.tensor((1.5 + 0.5 + 2.0 + 0.8) / 4))
    torch.testing.assert_close(metrics[ROLLOUT_IS_TRUNCATED_FRAC], torch.tensor(0.25))


def test_sequence_level_hand_values():
    # Row 0: 1.5 * 0.5 * 3 = 2.25, capped to 2.0 (threshold 2); row 1: 0.8.
    w, metrics = rollout_is_weights(OLD, ROLLOUT, MASK, level="sequence", threshold=2.0)
    expected = torch.tensor([[2.0, 2.0, 2.0, 0.0], [0.8, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(w, expected)
    torch.testing.assert_close(metrics[ROLLOUT_IS_TRUNCATED_FRAC], torch.tensor(0.75))
    # With a cap above 2.25 nothing is truncated.
    w, _ = rollout_is_weights(OLD, ROLLOUT, MASK, level="sequence", threshold=5.0)
    torch.testing.assert_close(w[0, :3], torch.full((3,), 2.25))


def test_equal_policies_give_weight_one_and_zero_kl():
    logp = torch.log(torch.tensor([[0.3, 0.6], [0.9, 0.1]]))
    mask = torch.ones(2, 2)
    for level in ("token", "sequence"):
        w, _ = rollout_is_weights(logp, logp.clone(), mask, level=level, threshold=2.0)
        torch.testing.assert_close(w, torch.ones(2, 2))
    kl = rollout_mismatch_kl(logp, logp.clone(), mask)
    assert kl[ROLLOUT_KL_K1] == 0 and kl[ROLLOUT_KL_K3] == 0


def test_weights_carry_no_gradient_and_long_sequences_do_not_overflow():
    old = torch.full((1, 2000), 1.0, requires_grad=True)  # summed log-ratio 2000: exp overflows
    w, _ = rollout_is_weights(old, torch.zeros(1, 2000), torch.ones(1, 2000), level="sequence",
                              threshold=2.0)
    assert not w.requires_grad
    torch.testing.assert_close(w, torch.full((1, 2000), 2.0))


def test_mismatch_kl_hand_values():
    # r = old - rollout = ln 1.5 and ln 0.5 on the two mask tokens of row 0 only.
    old = torch.tensor([[math.log(1.5), math.log(0.5), 7.0]])
    kl = rollout_mismatch_kl(old, torch.zeros(1, 3), torch.tensor([[1.0, 1.0, 0.0]]))
    r = torch.tensor([math.log(1.5), math.log(0.5)])
    torch.testing.assert_close(kl[ROLLOUT_KL_K1], (-r).mean())
    torch.testing.assert_close(kl[ROLLOUT_KL_K3], (r.exp() - 1 - r).mean())
    assert kl[ROLLOUT_KL_K3] > 0


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="level='trajectory' is not one of"):
        rollout_is_weights(OLD, ROLLOUT, MASK, level="trajectory", threshold=2.0)
    with pytest.raises(ValueError, match="threshold=0 must be > 0"):
        rollout_is_weights(OLD, ROLLOUT, MASK, level="token", threshold=0)
    with pytest.raises(ValueError, match="rollout_is_weights"):
        rollout_is_weights(OLD, ROLLOUT[:, :3], MASK, level="token", threshold=2.0)
    with pytest.raises(ValueError, match="rollout_mismatch_kl"):
        rollout_mismatch_kl(OLD, ROLLOUT, MASK[:, :3])
