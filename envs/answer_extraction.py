"""Find the final answer inside a model's response, cheaply and in time linear in its length.

Extraction runs in the caller's process (only the comparison with the ground truth goes to the
verifier's worker processes), so every function here is a plain scan or a regex without nested
quantifiers: a 100 kB hostile response costs about a millisecond, never a backtracking blow-up.

Modes (`EXTRACTIONS`):
- "boxed": the content of the last non-empty `\\boxed{...}` (braces balanced); an empty one is
  no answer, so it neither counts nor hides an earlier one.
- "hash": the rest of the line after the last `####` (GSM8K's convention).
- "last_number": the last decimal number, thousands separators removed ("1,234.5" -> "1234.5"),
  a decimal comma after a zero read as a point ("0,042" -> "0.042"), an exponent kept ("4.2e1").
- "auto": boxed if the response has one, else hash, else the last number.

Reading numbers the way math-verify does: the verifier compares an answer with math-verify, or with
the in-process fast path `compare_plain_decimals` where both are plain decimals, and the two must
never disagree. So both read the same normalised text (`normalize_answer`, applied to the extracted
answer and the ground truth alike): Unicode decimal digits become ASCII ("٤٢", "４２" -> "42"; raw,
math-verify reads no number there), and scientific notation is written out ("4.2e1" -> "42"; raw,
math-verify reads the `e` as Euler's number). The fast path follows math-verify on commas: "1,000"
is a thousand, while "0,042" (no thousands group starts with 0) is 0.042 there, so the fast path
leaves it to math-verify.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal

EXTRACTIONS = ("auto", "boxed", "hash", "last_number")

_BOXED = "\\boxed"
_HASH = "####"
_BRACE = re.compile(r"[{}]")
# Thousands groups only after a short first group that does not start with 0, as in math-verify,
# so "12345,678" reads as two numbers, like a human would; "0,042" is a decimal comma. No nested
# quantifiers, so matching is linear.
_NUMBER = re.compile(r"-?(?:0,\d+|(?:[1-9]\d{0,2}(?:,\d{3})+|\d+)(?:\.\d+)?)(?:[eE][+-]?\d+)?")
# The fast path compares these in process (thousands separators allowed, as math-verify reads
# "1,000" as 1000); 30 digits keeps Decimal exact and cheap. ASCII digits only: `\d` would take
# "٤٢", which math-verify cannot read.
_PLAIN_DECIMAL = re.compile(r"-?(?:[1-9][0-9]{0,2}(?:,[0-9]{3})+|[0-9]{1,30})(?:\.[0-9]{1,30})?")
# Integers of any length: compared as digit strings, which needs no int() (Python refuses to read
# one of over 4,300 digits, and math-verify, which reads them through int(), scored such a correct
# answer 0 with no error).
_PLAIN_INTEGER = re.compile(r"-?(?:[1-9][0-9]{0,2}(?:,[0-9]{3})+|[0-9]+)")
_NON_ASCII_DIGIT = re.compile(r"(?![0-9])\d")  # any Unicode decimal digit (category Nd) but 0-9
_SCIENTIFIC = re.compile(r"(-?)([0-9]+(?:\.[0-9]+)?)[eE]([+-]?[0-9]{1,9})")
# Beyond this exponent "1e400" is not written out (401 digits) but as LaTeX, "1\times 10^{400}".
_MAX_WRITTEN_EXPONENT = 100


def ascii_digits(text: str) -> str:
    """`text` with every Unicode decimal digit replaced by its ASCII digit ("٤٢" -> "42")."""
    if text.isascii():
        return text
    return _NON_ASCII_DIGIT.sub(lambda m: str(unicodedata.decimal(m.group())), text)


def normalize_answer(text: str) -> str:
    """An answer or ground truth as both comparison paths read it (see the module docstring).

    Digits become ASCII; a whole answer in scientific notation ("4.2e1", "-1.5E-3") is written as
    a plain decimal ("42", "-0.0015"), or as `m\\times 10^{e}` when the exponent exceeds 100.
    Anything else is returned stripped and otherwise unchanged.
    """
    text = ascii_digits(text).strip()
    scientific = _SCIENTIFIC.fullmatch(text)
    if scientific is None:
        return text
    sign, mantissa, exponent = scientific.groups()
    if abs(int(exponent)) > _MAX_WRITTEN_EXPONENT:
        return f"{sign}{mantissa}\\times 10^{{{int(exponent)}}}"
    return format(Decimal(text), "f")


def extract_boxed(text: str) -> str | None:
    """Content of the last non-empty `\\boxed{...}` whose braces balance, stripped, or None."""
    end = len(text)
    start = text.rfind(_BOXED)
    while start != -1:
        brace = start + len(_BOXED)
        while brace < end and text[brace] == " ":
            brace += 1
        if brace < end and text[brace] == "{":
            content = _balanced_braces(text, brace, end)
            if content is not None and content.strip():
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
    """The last decimal number in `text`, thousands separators removed, or None.

    A comma after a lone zero is a decimal comma ("0,042" -> "0.042"), as math-verify reads it.
    """
    last = None
    for last in _NUMBER.finditer(text):  # only the last match is wanted
        pass
    if last is None:
        return None
    number = last.group()
    if number.lstrip("-").startswith("0,"):
        return number.replace(",", ".")
    return number.replace(",", "")


def extract_answer(text: str, mode: str) -> str | None:
    """Apply extraction `mode` (one of `EXTRACTIONS`) to `text`, its digits made ASCII first."""
    text = ascii_digits(text)
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

    Plain: ASCII digits, an optional minus, thousands separators only in math-verify's grouping
    ("1,000", not "0,042" or "1,00"), an optional fraction. Equal values are correct, and unequal
    integers are wrong, exactly as math-verify decides; integers are compared at any length (as
    digit strings), past the 4,300 digits math-verify can read. Two unequal non-integers return
    None, because math-verify rounds to 6 decimals ("0.3333333" equals "0.333333" there) and the
    fast path must never disagree with the slow one. Pass `normalize_answer`'s output to decide
    on Unicode digits and scientific notation too.
    """
    answer, gold = answer.strip(), gold.strip()
    if _PLAIN_INTEGER.fullmatch(answer) and _PLAIN_INTEGER.fullmatch(gold):
        return _integer_digits(answer) == _integer_digits(gold)
    if not (_PLAIN_DECIMAL.fullmatch(answer) and _PLAIN_DECIMAL.fullmatch(gold)):
        return None
    a, g = Decimal(answer.replace(",", "")), Decimal(gold.replace(",", ""))
    if a == g:
        return True
    if a == a.to_integral_value() and g == g.to_integral_value():
        return False
    return None


def _integer_digits(number: str) -> str:
    """A plain integer's canonical text, at any length: "1,000" -> "1000", "007" -> "7",
    "-0" -> "0"."""
    digits = number.replace(",", "")
    sign = "-" if digits.startswith("-") else ""
    digits = digits.lstrip("-").lstrip("0") or "0"
    return digits if digits == "0" else sign + digits
