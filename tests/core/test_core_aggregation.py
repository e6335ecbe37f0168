"""loss_agg_mode by hand, and the whole-mini-batch normaliser of micro-batches."""

from __future__ import annotations

import pytest
import torch

from rllib_llm import core

# Row 0: 3 tokens (1, 2, 3); row 1: 1 token (4) and padding 100; row 2: no tokens.
LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 100.0, 100.0], [7.0, 8.0, 9.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]], dtype=torch.float64)


@pytest.mark.parametrize(("mode", "expected"), [
    ("token-mean", (1 + 2 + 3 + 4) / 4),
    ("seq-mean-token-sum", (6 + 4) / 2),  # N_seq = 2: the empty row does not count
    ("seq-mean-token-mean", (6 / 3 + 4 / 1) / 2),
    ("seq-mean-token-sum-norm", (6 + 4) / (2 * 3)),  # norm_length defaults to T = 3
])
def test_modes_by_hand(mode, expected):
    assert core.agg_loss(LOSS, MASK, mode).item() == pytest.approx(expected, abs=1e-12)


def test_sum_norm_uses_norm_length():
    value = core.agg_loss(LOSS, MASK, "seq-mean-token-sum-norm", norm_length=10)
    assert value.item() == pytest.approx(10 / (2 * 10))


@pytest.mark.parametrize("mode", core.AGG_MODES)
def test_empty_batch_gives_zero_not_nan(mode):
    value = core.agg_loss(LOSS, torch.zeros_like(MASK), mode)
    assert value.item() == 0.0


def test_bool_mask_equals_float_mask():
    for mode in core.AGG_MODES:
        assert core.agg_loss(LOSS, MASK.bool(), mode) == core.agg_loss(LOSS, MASK, mode)


def test_agg_counts():
    counts = core.agg_counts(MASK)
    assert (counts.num_tokens.item(), counts.num_seqs.item()) == (4, 2)


@pytest.mark.parametrize("mode", core.AGG_MODES)
def test_micro_batches_by_hand(mode):
    """Rows {0} and {1, 2} as two micro-batches: with the whole batch's counts their sum is the
    whole-batch value; with their own counts it is not (except by luck)."""
    counts = core.agg_counts(MASK)
    parts = [core.agg_loss(LOSS[s], MASK[s], mode, num_tokens=counts.num_tokens,
                           num_seqs=counts.num_seqs) for s in (slice(0, 1), slice(1, 3))]
    whole = core.agg_loss(LOSS, MASK, mode)
    assert (parts[0] + parts[1]).item() == pytest.approx(whole.item(), abs=1e-12)
    naive = sum(core.agg_loss(LOSS[s], MASK[s], mode) for s in (slice(0, 1), slice(1, 3)))
    assert naive.item() != pytest.approx(whole.item())


def test_counts_accept_python_numbers():
    value = core.agg_loss(LOSS[:1], MASK[:1], "token-mean", num_tokens=4, num_seqs=2)
    assert value.item() == pytest.approx(6 / 4)
