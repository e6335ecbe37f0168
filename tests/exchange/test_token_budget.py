"""The token budget both the engine's decode batches and the learner's micro-batches are cut by
(exchange/token_budget.py), on hand values."""

from __future__ import annotations

import pytest

from rllib_llm.exchange.token_budget import fits, pack


@pytest.mark.parametrize("rows,width,max_rows,max_tokens,want", [
    (4, 10, None, 40, True),  # exactly the budget
    (4, 10, None, 39, False),
    (4, 10, 4, None, True),  # exactly the rows
    (5, 10, 4, None, False),
    (5, 1, 4, 1000, False),  # rows bind under a loose token budget
    (1, 50, None, 40, False),  # one row alone can break it (pack still places it)
    (10**6, 10**6, None, None, True),
])
def test_fits_by_hand(rows, width, max_rows, max_tokens, want):
    assert fits(rows, width, max_rows=max_rows, max_tokens=max_tokens) is want


def test_rows_that_fill_the_budget_exactly_share_a_batch():
    assert pack([(10,)] * 4, max_rows=None, max_tokens=40) == [[0, 1, 2, 3]]
    assert pack([(10,)] * 5, max_rows=None, max_tokens=40) == [[0, 1, 2, 3], [4]]


def test_a_row_over_the_budget_is_a_batch_of_its_own():
    assert pack([(10,), (50,), (10,)], max_rows=None, max_tokens=40) == [[0], [1], [2]]
    assert pack([(50,), (60,)], max_rows=None, max_tokens=40) == [[0], [1]]


def test_a_wider_row_can_push_the_batch_over():
    # 2 x 20 fits 40, but a third row of 20 would make 3 x 20: the next batch.
    assert pack([(10,), (20,), (20,)], max_rows=None, max_tokens=40) == [[0, 1], [2]]


def test_max_rows_binds_under_a_loose_token_budget():
    assert pack([(1,)] * 7, max_rows=3, max_tokens=1000) == [[0, 1, 2], [3, 4, 5], [6]]
    assert pack([(1,)] * 7, max_rows=3, max_tokens=None) == [[0, 1, 2], [3, 4, 5], [6]]


def test_no_bound_is_one_batch_and_no_rows_none():
    assert pack([(5,), (500,)], max_rows=None, max_tokens=None) == [[0, 1]]
    assert pack([], max_rows=2, max_tokens=10) == []


def test_each_part_pads_to_its_own_longest():
    """A (prompt, response) batch is as wide as its longest prompt plus its longest response,
    which is more than its longest row when those come from different rows."""
    rows = [(8, 2), (2, 8)]  # each row is 10 tokens, the pair pads to 16
    assert pack(rows, max_rows=None, max_tokens=32) == [[0, 1]]
    assert pack(rows, max_rows=None, max_tokens=31) == [[0], [1]]
    assert pack([(8, 2), (8, 2)], max_rows=None, max_tokens=20) == [[0, 1]]
