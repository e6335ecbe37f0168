"""ROLL's extra TOPR loss terms (positive_loss_coef, use_topr_neg_loss_coef) against hand values."""

from __future__ import annotations

import torch

from rllib_llm import core

LOGP = [[-1.0, -2.0], [-0.5, -1.0]]
OLD_LOGP = [[-1.0, -1.0], [-1.0, -1.0]]
ADV = [[1.0, 1.0], [-2.0, -2.0]]
MASK = [[1.0, 1.0], [1.0, 0.0]]
POSITIVE = [1.0, 0.0]


def terms():
    logp = torch.tensor(LOGP, dtype=torch.float64, requires_grad=True)
    out = core.roll_topr_terms(logp, torch.tensor(OLD_LOGP, dtype=torch.float64),
                               torch.tensor(ADV, dtype=torch.float64),
                               torch.tensor(MASK, dtype=torch.float64),
                               torch.tensor(POSITIVE, dtype=torch.float64))
    return logp, out


def test_per_token_terms_by_hand():
    _, (pos, pos_mask, neg, neg_mask) = terms()
    # Positive row 0: -logp * A = [1, 2]. Negative row 1, token 0: ratio e^0.5 clipped to 1,
    # -1 * (-0.5) * (-2) = -1; token 1 is padding.
    assert pos.tolist() == [[1.0, 2.0], [0.0, 0.0]]
    assert neg.tolist() == [[0.0, 0.0], [-1.0, 0.0]]
    assert pos_mask.tolist() == [[1.0, 1.0], [0.0, 0.0]]
    assert neg_mask.tolist() == [[0.0, 0.0], [1.0, 0.0]]


def test_aggregated_like_roll_with_gradients_by_hand():
    logp, (pos, pos_mask, neg, neg_mask) = terms()
    n_seq = 2.0  # ROLL's seq-mean divides by every row of the batch
    # token-mean: over the term's own tokens.
    assert core.agg_loss(pos, pos_mask, "token-mean").item() == 1.5
    assert core.agg_loss(neg, neg_mask, "token-mean").item() == -1.0
    # seq-mean-token-mean: the rows' token means over all rows.
    pos_seq = core.agg_loss(pos, pos_mask, "seq-mean-token-mean", num_seqs=n_seq)
    neg_seq = core.agg_loss(neg, neg_mask, "seq-mean-token-mean", num_seqs=n_seq)
    assert (pos_seq.item(), neg_seq.item()) == (0.75, -0.5)
    (0.5 * pos_seq + 2.0 * neg_seq).backward()
    # d/dlogp: positive -A / (2 tokens * 2 rows) * 0.5; negative -clip(r) * A / (1 * 2) * 2.
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.125, -0.125], [2.0, 0.0]],
                                                       dtype=torch.float64))


def test_negative_ratio_is_clipped_at_one_and_detached():
    logp = torch.tensor([[0.0]], requires_grad=True)
    _, _, neg, _ = core.roll_topr_terms(logp, torch.tensor([[-3.0]]), torch.tensor([[1.0]]),
                                        torch.ones(1, 1), torch.zeros(1))
    neg.sum().backward()
    assert logp.grad.item() == -1.0  # -clip(e^3, 0, 1) * A, no gradient through the ratio
