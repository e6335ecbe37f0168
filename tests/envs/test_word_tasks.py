"""Questions for a chat model: arithmetic's prompt styles, "compare" and "word_problems"."""

from __future__ import annotations

import itertools
import re

import pytest
from rllib_llm.envs import arithmetic_problems, load_problems
from rllib_llm.envs.word_tasks import compare_problems, word_problems


def _numbers(prompt: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", prompt)]


@pytest.mark.parametrize("style", ["symbols", "words"])
def test_arithmetic_prompt_style_writes_the_same_split_as_questions(style):
    for split in ("train", "test"):
        terse = arithmetic_problems(split, ops="+-*", max_operand=9, test_size=11)
        styled = load_problems("arithmetic", split=split, ops="+-*", max_operand=9, test_size=11,
                               prompt_style=style)
        assert [p["answer"] for p in styled] == [p["answer"] for p in terse]
        for t, s in zip(terse, styled):
            op = next(c for c in "+-*" if c in t["prompt"])
            a, b = t["prompt"].rstrip("=").split(op)
            shown = op if style == "symbols" else {"+": "plus", "-": "minus", "*": "times"}[op]
            assert s["prompt"] == f"What is {a} {shown} {b}? Answer with the number only."
    with pytest.raises(ValueError, match="prompt_style='latex' is not one of"):
        arithmetic_problems(prompt_style="latex")


def test_compare_splits_by_number_set_with_exact_sizes():
    # 1..5, pairs: C(5, 2) = 10 sets, one question each; 3 held out.
    train, test = compare_problems("train", size=2, max_number=5, test_size=3), \
        compare_problems("test", size=2, max_number=5, test_size=3)
    assert (len(train), len(test)) == (7, 3)
    sets = [frozenset(_numbers(p["prompt"])) for p in train + test]
    assert len(set(sets)) == 10 and all(len(s) == 2 and s <= set(range(1, 6)) for s in sets)
    # No held-out set is asked in training, in any order, largest or smallest.
    assert not set(sets[:7]) & set(sets[7:])
    for p in train + test:
        numbers = _numbers(p["prompt"])
        want = max(numbers) if "largest" in p["prompt"] else min(numbers)
        assert p["answer"] == str(want) and p["prompt"].endswith("Answer with the number only.")
    assert load_problems("compare", split="test", size=2, max_number=5, test_size=3) == test
    assert compare_problems("test", size=2, max_number=5, test_size=3, seed=1) != test
    default = load_problems("compare", split="test")
    assert len(default) == 500 and all(len(_numbers(p["prompt"])) == 3 for p in default)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"size": 1}, "size=1 must be an int >= 2"),
    ({"size": 3, "max_number": 2}, "max_number=2 must be an int >= size=3"),
    ({"size": 5, "max_number": 99}, "number sets, over 200000"),
    ({"size": 2, "max_number": 5, "test_size": 10}, r"test_size=10 must be an int in \(0, 10\)"),
])
def test_compare_refuses_bad_kwargs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        compare_problems(**kwargs)


def test_word_problems_split_by_numbers_with_exact_sizes():
    train, test = word_problems("train"), load_problems("word_problems", split="test")
    keys = [tuple(_numbers(p["prompt"])) for p in train + test]
    # a in 2..20, b and c in 1..10, a + b - c >= 0: 19 * 100 minus the 84 with c > a + b.
    assert len(test) == 300 and len(train) + len(test) == len(set(keys)) == 1900 - 84
    # The same numbers are never told in another story across the split.
    assert not set(keys[:len(train)]) & set(keys[len(train):])
    for (a, b, c), p in zip(keys, train + test):
        assert 2 <= a <= 20 and 1 <= b <= 10 and 1 <= c <= 10
        assert p["answer"] == str(a + b - c)
    assert word_problems("test", seed=0) == test and word_problems("test", seed=1) != test
    assert len(word_problems("test", test_size=7)) == 7
    with pytest.raises(ValueError, match=r"test_size=0 must be an int in \(0, 1816\)"):
        word_problems(test_size=0)
    with pytest.raises(ValueError, match="split='dev' is not one of"):
        word_problems("dev")


def _same_answer_orders(a: int, b: int, c: int) -> set[tuple[int, int, int]]:
    """Every order of the three numbers whose story has the same answer, a + b - c."""
    return {k for k in itertools.permutations((a, b, c)) if k[0] + k[1] - k[2] == a + b - c}


@pytest.mark.parametrize(("seed", "test_size"), [(0, 300), (1, 300), (3, 41)])
def test_word_problems_hold_out_the_numbers_in_every_order_with_the_same_answer(seed, test_size):
    # Split by (a, b, c), 109 of the 300 default held-out stories had a training twin with the
    # first two numbers swapped ("has 8, buys 7, gives 5" held out, "has 7, is given 8 more,
    # gives 5" trained): the same sum, the same answer.
    train = [tuple(_numbers(p["prompt"])) for p in word_problems("train", seed=seed,
                                                                  test_size=test_size)]
    test = [tuple(_numbers(p["prompt"])) for p in word_problems("test", seed=seed,
                                                                 test_size=test_size)]
    assert len(test) == test_size and len(train) + len(test) == 1900 - 84
    twins = {twin for key in test for twin in _same_answer_orders(*key)}
    assert not twins & set(train)
