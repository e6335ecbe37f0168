"""Short questions for a small chat model: `dataset="compare"` and `dataset="word_problems"`.

Both are generated, seeded and offline, like "arithmetic", and both ask for a number only, so the
verifier's last-number extraction reads the answer:

- "compare": the largest (or smallest) of `size` distinct numbers in 1..`max_number`: "Which is
  the largest of these numbers: 47, 12, 74? Answer with the number only."
- "word_problems": a two-step story, someone has `a` things, gains `b`, gives away `c`: "Mia has
  7 apples. She buys 5 more, then gives 3 to a friend. How many apples does Mia have now? Answer
  with the number only." (a in 2..20, b and c in 1..10, a + b - c >= 0).

Splits are by what a problem asks, not by how it is written: a compare problem is its set of
numbers, a word problem its (a, b, c) together with (b, a, c), the same three numbers with the
same answer a + b - c (no other order of them has that answer unless it is the same triple: the
answer fixes c as (a + b + c - answer) / 2). The whole space of those is enumerated, shuffled
with the seed, and the test split takes them in that order while they fit (`test_size` exactly,
as `arithmetic` fills it); the order the numbers are shown in, largest or smallest, and the
story's name, item and verbs are drawn from the same seeded stream. So no held-out problem is a
training problem with its numbers reordered or its story retold (the commuted twins that
`arithmetic` keeps together: split by (a, b, c), 109 of the 300 default held-out stories had
their (b, a, c) twin in training).

SmolLM2-135M-Instruct's base rates on them: benchmarks/RESULTS.md.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from functools import lru_cache

from rllib_llm.envs.arithmetic import ANSWER_ONLY, SPLITS, Problem

COMPARE = "compare"
WORD_PROBLEMS = "word_problems"
MAX_COMPARE_SETS = 200_000  # enumerating more number sets would make loading slow
_NAMES = (("Mia", "She"), ("Sam", "He"), ("Ava", "She"), ("Leo", "He"), ("Zoe", "She"),
          ("Ben", "He"))
_ITEMS = ("apples", "stickers", "marbles", "pencils", "cookies", "stamps")
_GAINS = ("buys {b} more", "finds {b} more", "is given {b} more")
_LOSSES = ("gives {c} to a friend", "loses {c}", "gives {c} away")


def compare_problems(split: str = "train", *, seed: int = 0, size: int = 3, max_number: int = 99,
                     test_size: int = 500) -> list[dict[str, str]]:
    """The problems of one split of "compare" (module docstring).

    Args:
        split: "train" or "test".
        seed: shuffles the number sets and draws how each is asked; the same everywhere.
        size: how many distinct numbers a question shows (2 or more).
        max_number: the numbers range over 1..max_number.
        test_size: number of held-out problems (one per number set).
    """
    _check_split(split)
    if not isinstance(size, int) or size < 2:
        raise ValueError(f"size={size!r} must be an int >= 2")
    if not isinstance(max_number, int) or max_number < size:
        raise ValueError(f"max_number={max_number!r} must be an int >= size={size}")
    total = math.comb(max_number, size)
    if total > MAX_COMPARE_SETS:
        raise ValueError(f"size={size}, max_number={max_number} make {total} number sets, over "
                         f"{MAX_COMPARE_SETS}; lower max_number or size")
    return _chosen(_compare_split(seed, size, max_number, _test_size(test_size, total)), split)


def word_problems(split: str = "train", *, seed: int = 0, test_size: int = 300
                  ) -> list[dict[str, str]]:
    """The problems of one split of "word_problems" (module docstring).

    Args:
        split: "train" or "test".
        seed: shuffles the (a, b, c) groups and draws each story; the same everywhere.
        test_size: number of held-out problems (one per triple; a triple and its (b, a, c)
            twin are held out together).
    """
    _check_split(split)
    total = len(_word_keys())
    return _chosen(_word_split(seed, _test_size(test_size, total)), split)


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not one of {SPLITS}")


def _test_size(test_size: int, total: int) -> int:
    if not isinstance(test_size, int) or not 0 < test_size < total:
        raise ValueError(f"test_size={test_size!r} must be an int in (0, {total})")
    return test_size


def _chosen(splits: tuple[tuple[Problem, ...], tuple[Problem, ...]], split: str
            ) -> list[dict[str, str]]:
    train, test = splits
    return [{"prompt": p, "answer": a} for p, a in (test if split == "test" else train)]


def _split_keys(keys: list, seed: int, test_size: int,
                render: Callable[[tuple, random.Random], Problem]
                ) -> tuple[tuple[Problem, ...], tuple[Problem, ...]]:
    """Shuffle the keys, render each once from the same stream; the first `test_size` are test."""
    rng = random.Random(seed)
    keys = list(keys)
    rng.shuffle(keys)
    problems = [render(key, rng) for key in keys]
    return tuple(problems[test_size:]), tuple(problems[:test_size])


@lru_cache(maxsize=4)
def _compare_split(seed: int, size: int, max_number: int, test_size: int):
    keys = list(itertools.combinations(range(1, max_number + 1), size))
    return _split_keys(keys, seed, test_size, _render_compare)


def _render_compare(numbers: tuple[int, ...], rng: random.Random) -> Problem:
    shown = list(numbers)
    rng.shuffle(shown)
    largest = rng.random() < 0.5
    which = "largest" if largest else "smallest"
    answer = max(numbers) if largest else min(numbers)
    listed = ", ".join(map(str, shown))
    return f"Which is the {which} of these numbers: {listed}? {ANSWER_ONLY}", str(answer)


@lru_cache(maxsize=1)
def _word_keys() -> tuple[tuple[int, int, int], ...]:
    return tuple((a, b, c) for a in range(2, 21) for b in range(1, 11) for c in range(1, 11)
                 if a + b - c >= 0)


@lru_cache(maxsize=1)
def _word_groups() -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """The keys grouped by what a story asks: (a, b, c) with (b, a, c) where both are in range
    (a in 2..20, b in 1..10), the same numbers and answer; alone otherwise, or when a == b."""
    groups: dict[tuple[int, int, int], list[tuple[int, int, int]]] = {}
    for a, b, c in _word_keys():
        groups.setdefault((min(a, b), max(a, b), c), []).append((a, b, c))
    return tuple(tuple(group) for group in groups.values())


@lru_cache(maxsize=4)
def _word_split(seed: int, test_size: int) -> tuple[tuple[Problem, ...], tuple[Problem, ...]]:
    """Return `(train, test)`: whole groups, `test_size` problems held out, each split shuffled.

    As `arithmetic._split`: the groups are shuffled and the test split takes them in that order
    while they fit; a pair that would overshoot by one goes to training and a later group of one
    completes it.
    """
    rng = random.Random(seed)
    groups = list(_word_groups())
    rng.shuffle(groups)
    train: list[Problem] = []
    test: list[Problem] = []
    for group in groups:
        problems = [_render_word(key, rng) for key in group]
        (test if len(test) + len(group) <= test_size else train).extend(problems)
    if len(test) != test_size:  # no group of one left: only a test_size near all 1816
        raise ValueError(f"test_size={test_size} cannot be made of whole (a, b, c)/(b, a, c) "
                         "groups")
    rng.shuffle(train)
    rng.shuffle(test)
    return tuple(train), tuple(test)


def _render_word(key: tuple[int, int, int], rng: random.Random) -> Problem:
    a, b, c = key
    name, pronoun = rng.choice(_NAMES)
    item = rng.choice(_ITEMS)
    gain = rng.choice(_GAINS).format(b=b)
    loss = rng.choice(_LOSSES).format(c=c)
    prompt = (f"{name} has {a} {item}. {pronoun} {gain}, then {loss}. How many {item} does "
              f"{name} have now? {ANSWER_ONLY}")
    return prompt, str(a + b - c)
