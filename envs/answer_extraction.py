"""Find the final answer inside a model's response, cheaply and in time linear in its length.

Extraction runs in the caller's process (only the comparison with the ground truth goes to the
verifier's worker processes), so every function here is a plain scan or a regex without nested
quantifiers: a 100 kB hostile response costs about a millisecond, never a backtracking blow-up.

Modes (`EXTRACTIONS`):
- "boxed": the content of the last `\\boxed{...}` (braces balanced).
- "hash": the rest of the line after the last `####` (GSM8K's convention).
- "last_number": the last decimal number, thousands separators removed ("1,234.5" -> "1234.5").
- "auto": boxed if the response has one, else hash, else the last number.
"""

from __future__ import annotations

import re
from decimal import Decimal

EXTRACTIONS = ("auto", "boxed", "hash", "last_number")

_BOXED = "\\boxed"
_HASH = "####"
_BRACE = re.compile(r"[{}]")
# Thousands groups only after a short first group, so "12345,678" reads as two numbers, like a
# human would; no nested quantifiers, so matching is linear.
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
# The fast path compares these in process (thousands separators allowed, as math-verify reads
# "1,000" as 1000); 30 digits keeps Decimal exact and cheap.
_PLAIN_DECIMAL = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d{1,30})(?:\.\d{1,30})?")


def extract_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` whose braces balance, or None."""
    end = len(text)
    start = text.rfind(_BOXED)
    while start != -1:
        brace = start + len(_BOXED)
        while brace < end and text[brace] == " ":
            brace += 1
        if brace < end and text[brace] == "{":
            content = _balanced_braces(text, brace, end)
            if content is not None:
                return content.strip()
            # This brace never closes, so no earlier candidate that reaches it can close either:
            # bounding their scans here keeps a response full of open `\\boxed{` linear in total.
            end = brace
        start = text.rfind(_BOXED, 0, start)
    return None


def _balanced_braces(text: str, pos: int, end: int) -> str | None:
    """The text inside the brace opening at `text[pos]`, if it closes before `end`."""
    depth = 0
    for brace in _BRACE.finditer(text, pos, end):
        depth += 1 if brace.group() == "{" else -1
        if depth == 0:
            return text[pos + 1 : brace.start()]
    return None


def extract_hash(text: str) -> str | None:
    """The rest of the line after the last `####`, stripped, or None if there is none or empty."""
    start = text.rfind(_HASH)
    if start == -1:
        return None
    answer = text[start + len(_HASH) :].split("\n", 1)[0].strip()
    return answer or None


def extract_last_number(text: str) -> str | None:
    """The last decimal number in `text` without thousands separators, or None."""
    last = None
    for last in _NUMBER.finditer(text):  # only the last match is wanted
        pass
    return None if last is None else last.group().replace(",", "")


def extract_answer(text: str, mode: str) -> str | None:
    """Apply extraction `mode` (one of `EXTRACTIONS`) to `text`."""
    if mode == "boxed":
        return extract_boxed(text)
    if mode == "hash":
        return extract_hash(text)
    if mode == "last_number":
        return extract_last_number(text)
    if mode == "auto":
        for extract in (extract_boxed, extract_hash, extract_last_number):
            answer = extract(text)
            if answer is not None:
                return answer
        return None
    raise ValueError(f"extraction={mode!r} is not one of {list(EXTRACTIONS)}; pick one of them")


def compare_plain_decimals(answer: str, gold: str) -> bool | None:
    """Decide `answer == gold` without sympy when both are plain decimals, else None.

    Equal values are correct, and unequal integers are wrong, exactly as math-verify decides. Two
    unequal non-integers return None, because math-verify rounds to 6 decimals ("0.3333333" equals
    "0.333333" there) and the fast path must never disagree with the slow one.
    """
    answer, gold = answer.strip(), gold.strip()
    if not (_PLAIN_DECIMAL.fullmatch(answer) and _PLAIN_DECIMAL.fullmatch(gold)):
        return None
    a, g = Decimal(answer.replace(",", "")), Decimal(gold.replace(",", ""))
    if a == g:
        return True
    if a == a.to_integral_value() and g == g.to_integral_value():
        return False
    return None
