"""The built-in task of the embedded default: seeded arithmetic problems with fixed splits.

Every problem is `{"prompt": "12+7=", "answer": "19"}`: the prompt is short because the embedded
model reads characters, and the answer is what the verifier compares against. The whole problem
space is enumerated and split once with the seed, so the train and test splits are disjoint and
identical on every machine.

The split is by unordered operand pair: `a+b=` and `b+a=` (same answer), and likewise `a*b=` and
`b*a=`, always land in the same split, so no held-out problem is its training twin with the
operands swapped (splitting problem by problem put 307 of the 500 default test problems' twins in
training). Subtraction is not commutative: each `a-b=` is a group of its own.

`prompt_style` picks how a problem is written, not which problems there are (the split is the
same for every style): "terse" (`12+7=`, the default, for the character-level embedded model),
"symbols" (`What is 12 + 7? Answer with the number only.`) and "words" (`What is 12 plus 7?
Answer with the number only.`) for a chat model, which answers a question, not a dangling `=`
(SmolLM2-135M-Instruct's base rates on them: benchmarks/RESULTS.md).

Multiplication (`ops="*"`) is the tool task: two-digit products are beyond the tiny model's
arithmetic, so it gets them right by calling the `python` tool of "math_tool" (the
`embedded_tool` checkpoint is taught that, `rllib_llm.models.tool_transcripts`).
"""

from __future__ import annotations

import random
from functools import lru_cache

SPLITS = ("train", "test")
OPS = "+-*"
PROMPT_STYLES = ("terse", "symbols", "words")
_OP_WORDS = {"+": "plus", "-": "minus", "*": "times"}
ANSWER_ONLY = "Answer with the number only."  # ends every question for a chat model


Problem = tuple[str, str]  # (prompt, answer)


@lru_cache(maxsize=8)
def _groups(max_operand: int, ops: str) -> tuple[tuple[Problem, ...], ...]:
    """Every problem, grouped so that the two orders of a commutative operation share a group."""
    groups = []
    for a in range(max_operand + 1):
        for b in range(max_operand + 1):
            # `a+b` and `b+a` form one group, listed once (at a <= b); `a+a` is a group of one.
            if "+" in ops and a <= b:
                groups.append(_twins(a, b, "+", a + b))
            # Subtraction stays non-negative: a leading minus sign would be a second skill for a
            # tiny model that has none to spare.
            if "-" in ops and a >= b:
                groups.append(((f"{a}-{b}=", str(a - b)),))
            if "*" in ops and a <= b:
                groups.append(_twins(a, b, "*", a * b))
    return tuple(groups)


def _twins(a: int, b: int, op: str, value: int) -> tuple[Problem, ...]:
    if a == b:
        return ((f"{a}{op}{b}=", str(value)),)
    return ((f"{a}{op}{b}=", str(value)), (f"{b}{op}{a}=", str(value)))


@lru_cache(maxsize=8)
def _split(seed: int, max_operand: int, ops: str, test_size: int
           ) -> tuple[tuple[Problem, ...], tuple[Problem, ...]]:
    """Return `(train, test)`: whole groups, `test_size` problems held out, each split shuffled.

    The groups are shuffled with the seed and the test split takes them in that order while they
    fit: a pair that would overshoot `test_size` by one goes to training and the next group of one
    (a square like `7*7=`, or a subtraction) completes the test split, so its size is exact. A
    problem's chance to be held out does not depend on its group's size (groups, not problems, are
    shuffled), so the test split keeps the task's mix of operations.
    """
    rng = random.Random(seed)
    groups = list(_groups(max_operand, ops))
    rng.shuffle(groups)
    train: list[Problem] = []
    test: list[Problem] = []
    for group in groups:
        if len(test) + len(group) <= test_size:
            test.extend(group)
        else:
            train.extend(group)
    if len(test) != test_size:  # no group of one left to complete it (never with the defaults)
        raise ValueError(f"test_size={test_size} cannot be made of whole operand-pair groups "
                         f"for ops={ops!r}, max_operand={max_operand}")
    rng.shuffle(train)
    rng.shuffle(test)
    return tuple(train), tuple(test)


def arithmetic_problems(
    split: str = "train",
    *,
    seed: int = 0,
    max_operand: int = 99,
    ops: str = "+-",
    test_size: int = 500,
    prompt_style: str = "terse",
) -> list[dict[str, str]]:
    """Return the problems of one split as `[{"prompt": "a+b=", "answer": "c"}, ...]`.

    Args:
        split: "train" or "test"; the test split is `test_size` problems made of whole
            operand-pair groups (`a+b=` and `b+a=` are held out together; module docstring).
        seed: shuffles the groups; the same seed gives the same splits everywhere.
        max_operand: operands range over 0..max_operand.
        ops: which of "+", "-" and "*" to use (subtraction keeps a >= b).
        test_size: number of held-out problems.
        prompt_style: "terse" (`a+b=`), "symbols" or "words" (a question for a chat model;
            module docstring); the same problems in every style.
    """
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not one of {SPLITS}")
    if not ops or set(ops) - set(OPS):
        raise ValueError(f"ops={ops!r} must be a non-empty combination of {list(OPS)}")
    if max_operand < 1:
        raise ValueError(f"max_operand={max_operand} must be >= 1")
    total = sum(len(group) for group in _groups(max_operand, ops))
    if not 0 < test_size < total:
        raise ValueError(f"test_size={test_size} must be in (0, {total})")
    if prompt_style not in PROMPT_STYLES:
        raise ValueError(f"prompt_style={prompt_style!r} is not one of {PROMPT_STYLES}")
    train, test = _split(seed, max_operand, ops, test_size)
    chosen = test if split == "test" else train
    return [{"prompt": _render(p, prompt_style), "answer": a} for p, a in chosen]


def _render(terse: str, style: str) -> str:
    """`12+7=` written in `style`: the split is made once, on the terse problems."""
    if style == "terse":
        return terse
    op = next(c for c in OPS if c in terse)
    a, b = terse.rstrip("=").split(op)
    shown = op if style == "symbols" else _OP_WORDS[op]
    return f"What is {a} {shown} {b}? {ANSWER_ONLY}"
