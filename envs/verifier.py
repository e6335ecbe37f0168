"""`MathVerifier`: score a model's response against a ground-truth answer, safely and fast.

Two steps per response:
1. Extract the final answer from the response, in this process (`answer_extraction`: linear-time
   scans, so even a 100 kB response costs about a millisecond), and normalise it and the ground
   truth alike (`normalize_answer`: Unicode digits to ASCII, scientific notation written out).
2. Compare them using math-verify (`parse` with LaTeX and plain-expression extraction, then
   `verify`), in a pool of worker processes with a hard wall-clock limit (`verify_pool`): answers
   are hostile input, and sympy can run for minutes or crash on them. A call that overruns is
   killed with its worker, or ended by math-verify's own shorter limit, and scored `wrong_score`
   as a timeout; a crash likewise, as an error. An answer math-verify cannot read at all (a number
   past Python's 4,300-digit int-string limit, nesting past its recursion limit) is an error
   that says so (`verify_worker.UncomparableError`), never a silent "wrong".

Fast path: when the normalised answer and ground truth are both plain decimals ("72", "-3",
"0.5"), they are compared in process with `Decimal`, never touching the pool (about a
microsecond instead of a pipe round trip); plain integers at any length, as digit strings (a
correct answer of 5,000 digits scores as correct: math-verify cannot read it). It decides only
where math-verify would decide the same: equal values, or unequal integers; unequal non-integers
still go to math-verify, which rounds to 6 decimals. A property test holds it to that on
generated answers. The built-in arithmetic task never starts a worker process at all.

Scoring: `correct_score` or `wrong_score`, plus `format_score` whenever an answer could be
extracted (a format bonus; −1/+1 scoring is `wrong_score=-1`). A response with no answer, a
timeout or a crash scores `wrong_score` alone: hostile input earns no format bonus.

Inputs are `str` (any code points, NUL and lone surrogates from `errors="surrogateescape"`
included) or `bytes`, which are decoded as UTF-8 with `errors="replace"`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from rllib_llm.envs.answer_extraction import (
    EXTRACTIONS,
    compare_plain_decimals,
    extract_answer,
    normalize_answer,
)
from rllib_llm.envs.validation import check_choice, check_finite, check_int, check_positive_seconds
from rllib_llm.envs.verify_pool import HardTimeoutPool, Outcome
from rllib_llm.envs.verify_worker import INNER_TIMEOUT

# Metric names: counters of `MathVerifier.metrics()` and `MathVerifyEnv.verifier_metrics()`.
VERIFICATIONS = "verifications"  # responses scored
TIMEOUTS = "timeouts"  # killed at the wall-clock limit or ended by math-verify's, scored wrong
ERRORS = "errors"  # math-verify raised or its worker died, scored wrong
FAST_PATH = "fast_path"  # decided in process without math-verify
METRIC_NAMES = (VERIFICATIONS, TIMEOUTS, ERRORS, FAST_PATH)


@dataclass(frozen=True, slots=True)
class Verification:
    """The verdict on one response.

    Attributes:
        score: the reward (see the module docstring for how it is composed).
        correct: whether the extracted answer equals the ground truth.
        extracted: the answer found in the response as compared (`normalize_answer`), None if
            there was none.
        timed_out: the comparison ran out of time: killed at the hard limit, or ended by
            math-verify's own limit before it found the answer equal.
        error: why the comparison failed (an exception or a dead worker), else None.
        fast_path: decided in process, without math-verify.
        text: the response text the verdict is on, where the caller decoded it (an env's
            `verify_responses`) for the step that ends the episode to reuse; None elsewhere.
            Neither compared nor part of `as_info`.
    """

    score: float
    correct: bool
    extracted: str | None
    timed_out: bool = False
    error: str | None = None
    fast_path: bool = False
    text: str | None = field(default=None, compare=False)

    def as_info(self) -> dict:
        """The verdict as a plain dict (for episode infos)."""
        # Spelled out: `dataclasses.asdict` deep-copies and was a third of an episode's cost.
        return {
            "score": self.score,
            "correct": self.correct,
            "extracted": self.extracted,
            "timed_out": self.timed_out,
            "error": self.error,
            "fast_path": self.fast_path,
        }


class VerifierCounters:
    """Running counts of `METRIC_NAMES` over the verdicts added."""

    def __init__(self) -> None:
        self._counts = dict.fromkeys(METRIC_NAMES, 0)

    def add(self, verification: Verification) -> None:
        counts = self._counts
        counts[VERIFICATIONS] += 1
        counts[TIMEOUTS] += verification.timed_out
        counts[ERRORS] += verification.error is not None
        counts[FAST_PATH] += verification.fast_path

    def as_dict(self) -> dict[str, int]:
        return dict(self._counts)


class MathVerifier:
    """Score responses against ground-truth answers (see the module docstring).

    Args:
        extraction: how to find the answer in a response, one of `EXTRACTIONS`: "auto" (boxed,
            else `#### N`, else the last number), "boxed", "hash", "last_number".
        correct_score: score of a correct answer.
        wrong_score: score of a wrong or missing answer, a timeout or a crash.
        format_score: added to the score whenever an answer could be extracted.
        timeout_s: hard wall-clock limit per math-verify comparison, seconds.
        num_workers: worker processes for math-verify; they start on first need.

    Thread-safe: calls from several threads are served one batch at a time.
    """

    def __init__(
        self,
        *,
        extraction: str = "auto",
        correct_score: float = 1.0,
        wrong_score: float = 0.0,
        format_score: float = 0.0,
        timeout_s: float = 5.0,
        num_workers: int = 1,
    ):
        self.extraction = check_choice("extraction", extraction, EXTRACTIONS)
        self.correct_score = check_finite("correct_score", correct_score, fix="use e.g. 1.0")
        self.wrong_score = check_finite("wrong_score", wrong_score, fix="use e.g. 0.0")
        self.format_score = check_finite("format_score", format_score, fix="use e.g. 0.0")
        self.timeout_s = check_positive_seconds("timeout_s", timeout_s, fix="use e.g. 5.0")
        self.num_workers = check_int("num_workers", num_workers, minimum=1, fix="use e.g. 1")
        # math-verify's own alarms take whole seconds; a quarter of the hard limit leaves room
        # for its three timed steps (parse gold, parse answer, compare) to end gracefully first.
        self._inner_timeout_s = max(1, math.floor(self.timeout_s / 4))
        self._pool: HardTimeoutPool | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._counters = VerifierCounters()

    def score(self, text: str | bytes, answer: str | bytes) -> Verification:
        """Score one response `text` against the ground truth `answer`."""
        return self.score_batch([text], [answer])[0]

    def score_batch(
        self, texts: Sequence[str | bytes], answers: Sequence[str | bytes]
    ) -> list[Verification]:
        """Score `texts[i]` against `answers[i]` for all i; comparisons overlap across workers."""
        if len(texts) != len(answers):
            raise ValueError(
                f"score_batch got {len(texts)} texts and {len(answers)} answers; pass one "
                "ground-truth answer per response"
            )
        texts = [_as_text(t, "texts", i) for i, t in enumerate(texts)]
        answers = [_as_text(a, "answers", i) for i, a in enumerate(answers)]
        with self._lock:
            if self._closed:
                raise RuntimeError("MathVerifier used after close(); create a new one")
            results: list[Verification | None] = [None] * len(texts)
            slow = []  # (index, extracted, answer) for math-verify
            for i, (text, answer) in enumerate(zip(texts, answers)):
                extracted = extract_answer(text, self.extraction)
                if extracted is None:
                    results[i] = Verification(self.wrong_score, False, None)
                    continue
                extracted, answer = normalize_answer(extracted), normalize_answer(answer)
                verdict = compare_plain_decimals(extracted, answer)
                if verdict is None:
                    slow.append((i, extracted, answer))
                else:
                    results[i] = self._verdict(verdict, extracted, fast_path=True)
            if slow:
                calls = [("math_verify_equal", (e, a, self._inner_timeout_s)) for _, e, a in slow]
                for (i, extracted, _), outcome in zip(slow, self._get_pool().run(calls)):
                    results[i] = self._from_outcome(outcome, extracted)
            for result in results:
                self._counters.add(result)
        return results  # type: ignore[return-value] - every slot is filled

    def metrics(self) -> dict[str, int]:
        """Counters since construction: `METRIC_NAMES` -> count."""
        with self._lock:
            return self._counters.as_dict()

    @property
    def worker_restarts(self) -> int:
        """Workers replaced since construction after the hard `timeout_s` or a crash (0 before
        the workers start). A timeout math-verify ends itself (a quarter of the limit) replaces
        none."""
        return 0 if self._pool is None else self._pool.restarts

    @property
    def closed(self) -> bool:
        """Whether `close()` ran: the workers are stopped and scoring is refused."""
        return self._closed

    def close(self) -> None:
        """Stop the worker processes (idempotent); scoring is refused afterwards."""
        with self._lock:
            self._closed = True
            if self._pool is not None:
                self._pool.close()

    # --- internals ------------------------------------------------------------------------------
    def _get_pool(self) -> HardTimeoutPool:
        if self._pool is None:
            self._pool = HardTimeoutPool(self.num_workers, self.timeout_s, preload=("math_verify",))
        return self._pool

    def _verdict(self, correct: bool, extracted: str, *, fast_path: bool = False) -> Verification:
        base = self.correct_score if correct else self.wrong_score
        return Verification(base + self.format_score, correct, extracted, fast_path=fast_path)

    def _from_outcome(self, outcome: Outcome, extracted: str) -> Verification:
        timed_out = outcome.timed_out or outcome.value == INNER_TIMEOUT
        if timed_out or outcome.error is not None:
            return Verification(
                self.wrong_score, False, extracted, timed_out=timed_out, error=outcome.error
            )
        return self._verdict(bool(outcome.value), extracted)


def _as_text(value, name: str, index: int) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    raise TypeError(
        f"{name}[{index}] is a {type(value).__name__}; pass str (or UTF-8 bytes), e.g. the "
        "decoded response and the answer string"
    )


# --- one verifier per process and set of options ------------------------------------------------
# Every env of a process with the same verifier options shares one MathVerifier, hence one pool of
# worker processes: an env runner with 64 envs would otherwise start 64 pools.
_shared: dict[tuple, list] = {}  # options -> [verifier, number of holders]
_shared_lock = threading.Lock()


def acquire_shared_verifier(**options) -> MathVerifier:
    """The process's `MathVerifier` for `options` (`MathVerifier` keywords), created on first use.

    Pair every call with `release_shared_verifier`; the last release closes it.
    """
    key = tuple(sorted(options.items()))
    with _shared_lock:
        entry = _shared.get(key)
        if entry is None or entry[0]._closed:
            entry = _shared[key] = [MathVerifier(**options), 0]
        entry[1] += 1
        return entry[0]


def release_shared_verifier(verifier: MathVerifier) -> None:
    """Give back a verifier from `acquire_shared_verifier`; close it when nobody holds it."""
    with _shared_lock:
        for key, entry in list(_shared.items()):
            if entry[0] is verifier:
                entry[1] -= 1
                if entry[1] <= 0:
                    del _shared[key]
                    verifier.close()
                return
