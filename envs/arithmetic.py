"""The built-in task of the embedded default: seeded arithmetic problems with fixed splits.

Every problem is `{"prompt": "12+7=", "answer": "19"}`: the prompt is short because the embedded
model reads characters, and the answer is what the verifier compares against. The whole problem
space is enumerated and shuffled once with the seed, so the train and test splits are disjoint and
identical on every machine.

Multiplication (`ops="*"`) is the tool task: two-digit products are beyond the tiny model's
arithmetic, so it gets them right by calling the `python` tool of "math_tool" (the
`embedded_tool` checkpoint is taught that, `rllib_llm.models.tool_transcripts`).
"""

from __future__ import annotations

import random
from functools import lru_cache

SPLITS = ("train", "test")
OPS = "+-*"


@lru_cache(maxsize=8)
def _all_problems(seed: int, max_operand: int, ops: str) -> tuple[tuple[str, str], ...]:
    problems = []
    for a in range(max_operand + 1):
        for b in range(max_operand + 1):
            if "+" in ops:
                problems.append((f"{a}+{b}=", str(a + b)))
            # Subtraction stays non-negative: a leading minus sign would be a second skill for a
            # tiny model that has none to spare.
            if "-" in ops and a >= b:
                problems.append((f"{a}-{b}=", str(a - b)))
            if "*" in ops:
                problems.append((f"{a}*{b}=", str(a * b)))
    random.Random(seed).shuffle(problems)
    return tuple(problems)


def arithmetic_problems(
    split: str = "train",
    *,
    seed: int = 0,
    max_operand: int = 99,
    ops: str = "+-",
    test_size: int = 500,
) -> list[dict[str, str]]:
    """Return the problems of one split as `[{"prompt": "a+b=", "answer": "c"}, ...]`.

    Args:
        split: "train" or "test"; the test split is the first `test_size` shuffled problems.
        seed: shuffles the problem space; the same seed gives the same splits everywhere.
        max_operand: operands range over 0..max_operand.
        ops: which of "+", "-" and "*" to use (subtraction keeps a >= b).
        test_size: number of held-out problems.
    """
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not one of {SPLITS}")
    if not ops or set(ops) - set(OPS):
        raise ValueError(f"ops={ops!r} must be a non-empty combination of {list(OPS)}")
    if max_operand < 1:
        raise ValueError(f"max_operand={max_operand} must be >= 1")
    problems = _all_problems(seed, max_operand, ops)
    if not 0 < test_size < len(problems):
        raise ValueError(f"test_size={test_size} must be in (0, {len(problems)})")
    chosen = problems[:test_size] if split == "test" else problems[test_size:]
    return [{"prompt": p, "answer": a} for p, a in chosen]
