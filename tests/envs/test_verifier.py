"""MathVerifier: extraction, scoring, the fast path, hostile input, timeouts, crashes, cleanup."""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import threading
import time
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rllib_llm.envs.answer_extraction import (
    EXTRACTIONS,
    compare_plain_decimals,
    extract_answer,
    extract_boxed,
    normalize_answer,
)
from rllib_llm.envs.verifier import (
    METRIC_NAMES,
    MathVerifier,
    acquire_shared_verifier,
    release_shared_verifier,
)
from rllib_llm.envs.verify_pool import HardTimeoutPool, Outcome


@pytest.fixture(scope="module")
def verifier():
    # A generous limit: these tests are about verdicts, and a loaded CI machine must not time out.
    v = MathVerifier(timeout_s=10.0)
    yield v
    v.close()


# --- extraction ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "auto", "boxed", "hash_", "last_number"),
    [
        ("so \\boxed{\\frac{1}{2}} ok", "\\frac{1}{2}", "\\frac{1}{2}", None, "2"),
        ("\\boxed{1} then \\boxed{", "1", "1", None, "1"),
        ("\\boxed {7}", "7", "7", None, "7"),
        ("\\boxed{a {b} c}", "a {b} c", "a {b} c", None, None),
        ("work\n#### 72\nmore 5", "72", None, "72", "5"),
        ("#### \n", None, None, None, None),
        ("1,234.5 and then 1,000", "1000", None, None, "1000"),
        ("x = -3.25.", "-3.25", None, None, "-3.25"),
        ("no answer", None, None, None, None),
        ("", None, None, None, None),
    ],
)
def test_extraction_modes(text, auto, boxed, hash_, last_number):
    expected = {"auto": auto, "boxed": boxed, "hash": hash_, "last_number": last_number}
    assert {mode: extract_answer(text, mode) for mode in EXTRACTIONS} == expected


def test_auto_prefers_boxed_then_hash_then_last_number():
    assert extract_answer("#### 5 \\boxed{6} 7", "auto") == "6"
    assert extract_answer("#### 5\n7", "auto") == "5"
    assert extract_answer("5 then 7", "auto") == "7"


def test_extract_answer_unknown_mode():
    with pytest.raises(ValueError, match=r"extraction='latex' is not one of .*pick one of them"):
        extract_answer("1", "latex")


def test_boxed_extraction_is_linear_on_many_open_boxes():
    # Each open `\boxed{` would rescan the rest of the text without the bound: quadratic.
    text = "\\boxed{" * 20_000 + "1"
    start = time.perf_counter()
    assert extract_boxed(text) is None
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize(
    ("answer", "gold", "verdict"),
    [
        ("72", "72", True),
        ("72.0", "72", True),
        ("1,000", "1000", True),
        ("-0", "0", True),
        ("71", "72", False),
        ("-72", "72", False),
        ("0.5", "0.50001", None),  # math-verify rounds non-integers: let it decide
        ("\\frac{1}{2}", "0.5", None),
        ("1,00", "100", None),  # not a thousands separator
        ("1" * 31 + ".5", "1", None),  # too long for Decimal's fast path
        # Integers at any length, as digit strings (int() refuses over 4,300 digits).
        ("7" * 4301, "7" * 4301, True),
        ("0" * 3 + "7" * 4301, "7" * 4301, True),
        ("-" + "7" * 4301, "7" * 4301, False),
        ("7" * 4300 + "8", "7" * 4301, False),
        ("1" * 31, "1", False),
        ("1,000,000", "0001000000", True),
    ],
)
def test_compare_plain_decimals(answer, gold, verdict):
    assert compare_plain_decimals(answer, gold) is verdict


def verify_workers() -> set[int]:
    """The pids of this process's live verify workers (children running envs/verify_worker.py);
    one that exited, reaped or not, is not among them."""
    pids = set()
    for entry in os.listdir("/proc"):
        try:
            ppid = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"verify_worker" in cmdline:
            pids.add(int(entry))
    return pids


# --- scoring ------------------------------------------------------------------------------------
def test_fast_path_verdicts_and_counters():
    before = verify_workers()
    v = MathVerifier()
    results = v.score_batch(["the answer is 72", "#### 71", "nothing"], ["72", "72", "72"])
    assert [(r.score, r.correct, r.extracted, r.fast_path) for r in results] == [
        (1.0, True, "72", True),
        (0.0, False, "71", True),
        (0.0, False, None, False),
    ]
    assert v.metrics() == {"verifications": 3, "timeouts": 0, "errors": 0, "fast_path": 2}
    assert set(v.metrics()) == set(METRIC_NAMES)
    assert verify_workers() == before  # plain numbers never start a worker process
    v.close()


def test_as_info_holds_every_field():
    verdict = MathVerifier().score("\\boxed{72}", "72")
    # Every field of the verdict but the text it was on, which the episode's final info holds
    # already (under "response").
    fields = dataclasses.asdict(verdict)
    assert fields.pop("text") is None and verdict.as_info() == fields


def test_scores_are_configurable():
    v = MathVerifier(correct_score=1.0, wrong_score=-1.0, format_score=0.25)
    right, wrong, missing = v.score_batch(["72", "71", "none"], ["72"] * 3)
    assert (right.score, wrong.score, missing.score) == (1.25, -0.75, -1.0)
    v.close()


def test_math_verify_path(verifier):
    cases = [
        ("so \\boxed{\\frac{1}{2}}", "0.5", True),
        ("\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", True),
        ("\\boxed{\\sqrt{2}}", "\\sqrt{2}", True),
        ("\\boxed{x = 3}", "3", True),
        ("\\boxed{\\frac{1}{3}}", "0.5", False),
    ]
    results = verifier.score_batch([c[0] for c in cases], [c[1] for c in cases])
    assert [r.correct for r in results] == [c[2] for c in cases]
    assert not any(r.fast_path or r.timed_out or r.error for r in results)


def test_verification_from_a_thread(verifier):
    # Ray runs envs in threads, where math-verify's signal.alarm cannot work: the pool makes it.
    results = []
    thread = threading.Thread(target=lambda: results.append(verifier.score("\\boxed{0.5}", "1/2")))
    thread.start()
    thread.join()
    assert results[0].correct and results[0].error is None


def test_bytes_are_decoded_with_replacement(verifier):
    result = verifier.score(b"\xff\xfe the answer is 72", b"72")
    assert result.correct and result.extracted == "72"


def test_non_text_input_is_refused(verifier):
    with pytest.raises(TypeError, match=r"texts\[1\] is a int; pass str \(or UTF-8 bytes\)"):
        verifier.score_batch(["1", 1], ["1", "1"])
    with pytest.raises(TypeError, match=r"answers\[0\] is a NoneType; pass str"):
        verifier.score("1", None)


def test_score_batch_length_mismatch(verifier):
    with pytest.raises(ValueError, match="score_batch got 2 texts and 1 answers; pass one"):
        verifier.score_batch(["1", "2"], ["1"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"extraction": "latex"},
            r"extraction='latex' is not one of \['auto', 'boxed', 'hash', 'last_number'\]; pick",
        ),
        ({"correct_score": math.nan}, r"correct_score=nan must be a finite number; use e.g. 1.0"),
        ({"wrong_score": "0"}, r"wrong_score='0' must be a finite number; use e.g. 0.0"),
        ({"format_score": math.inf}, r"format_score=inf must be a finite number; use e.g. 0.0"),
        ({"timeout_s": 0}, r"timeout_s=0 must be a finite number of seconds > 0; use e.g. 5.0"),
        ({"num_workers": 0}, r"num_workers=0 must be an integer >= 1; use e.g. 1"),
        ({"num_workers": True}, r"num_workers=True must be an integer >= 1; use e.g. 1"),
    ],
)
def test_verifier_settings_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MathVerifier(**kwargs)


# --- hostile input ------------------------------------------------------------------------------
HOSTILE = {
    "power tower": "\\boxed{9^{9^{9^{9}}}}",
    "100 kB of digits": "\\boxed{" + "1" * 100_000 + "}",
    "100 kB of LaTeX": "\\boxed{" + "x+" * 50_000 + "1}",
    "500 nested fractions": "\\boxed{" + "\\frac{1}{" * 500 + "2" + "}" * 500 + "}",
    "invalid LaTeX": "\\boxed{\\frac{1}{}} \\begin{matrix",
    "unbalanced delimiters": "\\boxed{\\left( \\right]]}",
    "NUL bytes": "\\boxed{7\x002}",
    "lone surrogates": b"\\boxed{\xff\xfe}".decode("utf-8", errors="surrogateescape"),
    "non-UTF-8 bytes": b"\\boxed{\xff\xfe}",
}


def test_hostile_answers_are_bounded_and_scored_wrong():
    limit = 0.5
    v = MathVerifier(timeout_s=limit, num_workers=2)
    assert v.score("\\boxed{\\frac{1}{2}}", "0.5").correct  # start the workers, unmeasured
    start = time.perf_counter()
    results = v.score_batch(list(HOSTILE.values()), ["72"] * len(HOSTILE))
    elapsed = time.perf_counter() - start
    for name, result in zip(HOSTILE, results):
        assert (result.score, result.correct) == (0.0, False), name
    assert results[0].timed_out  # the power tower cannot finish in 0.5 s
    assert v.worker_restarts >= 1  # math-verify's own alarm (1 s) came too late: killed
    metrics = v.metrics()
    assert metrics["timeouts"] == sum(r.timed_out for r in results) >= 1
    # Each call is cut at the limit; the rest is restarting killed workers (about a second each
    # on a loaded machine, two at a time).
    assert elapsed < 60
    # The pool still verifies after the killings.
    assert v.score("\\boxed{\\frac{1}{2}}", "0.5").correct
    v.close()


# --- the pool: timeouts, crashes, cleanup -------------------------------------------------------
@pytest.fixture(scope="module")
def pool():
    p = HardTimeoutPool(2, timeout_s=0.5)
    yield p
    p.close()


def test_pool_kills_an_overrunning_call_and_keeps_working(pool):
    start = time.perf_counter()
    outcomes = pool.run([(time.sleep, (30,)), (math.sqrt, (9.0,))])
    assert time.perf_counter() - start < 20  # not 30: the sleeper was killed at 0.5 s
    assert outcomes == [Outcome(timed_out=True), Outcome(value=3.0)]
    restarts = pool.restarts
    assert pool.run([(math.sqrt, (16.0,))]) == [Outcome(value=4.0)]
    assert restarts >= 1


def test_pool_replaces_a_crashed_worker(pool):
    outcomes = pool.run([(os._exit, (3,)), (math.sqrt, (4.0,))])
    assert outcomes[0].error == "worker process died (exit code 3)"
    assert outcomes[1] == Outcome(value=2.0)
    assert pool.run([(math.sqrt, (1.0,))]) == [Outcome(value=1.0)]


def test_pool_reports_exceptions_and_unpicklable_calls(pool):
    raised, unpicklable = pool.run([(math.sqrt, ("x",)), (lambda: 1, ())])
    assert raised.error == "TypeError: must be real number, not str"
    assert "Can't pickle" in unpicklable.error


def test_pool_whose_workers_cannot_start_fails_calls_instead_of_stalling():
    p = HardTimeoutPool(1, timeout_s=5.0, preload=("no_such_module_for_rllib_llm",))
    outcomes = p.run([(math.sqrt, (4.0,)), (math.sqrt, (9.0,))])
    assert [o.error for o in outcomes] == ["worker process died (exit code 1)"] * 2
    p.close()


def test_pool_close_and_garbage_collection_stop_the_workers():
    before = verify_workers()
    p = HardTimeoutPool(1, timeout_s=5.0)
    p.run([(math.sqrt, (4.0,))])
    (worker,) = verify_workers() - before
    p.close()
    assert worker not in verify_workers()
    with pytest.raises(RuntimeError, match=r"run\(\) after close\(\); create a new pool"):
        p.run([(math.sqrt, (4.0,))])

    p = HardTimeoutPool(1, timeout_s=5.0)
    p.run([(math.sqrt, (4.0,))])
    (worker,) = verify_workers() - before
    del p
    gc.collect()
    assert worker not in verify_workers()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_workers": 0}, r"num_workers=0 must be an integer >= 1; use e.g. 1"),
        ({"timeout_s": -1}, r"timeout_s=-1 must be a finite number of seconds > 0; use e.g. 5.0"),
        ({"start_timeout_s": 0}, r"start_timeout_s=0 must be a finite number of seconds > 0; use"),
    ],
)
def test_pool_settings_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HardTimeoutPool(**kwargs)


def test_verifier_close_refuses_further_scoring():
    v = MathVerifier()
    v.close()
    with pytest.raises(RuntimeError, match=r"MathVerifier used after close\(\); create a new one"):
        v.score("1", "1")


def test_shared_verifier_is_shared_and_closed_by_the_last_holder():
    a = acquire_shared_verifier(timeout_s=3.0)
    b = acquire_shared_verifier(timeout_s=3.0)
    c = acquire_shared_verifier(timeout_s=4.0)
    assert a is b and a is not c
    release_shared_verifier(a)
    assert a.score("1", "1").correct  # b still holds it
    release_shared_verifier(b)
    with pytest.raises(RuntimeError, match="after close"):
        a.score("1", "1")
    release_shared_verifier(c)
    fresh = acquire_shared_verifier(timeout_s=3.0)
    assert fresh is not a
    release_shared_verifier(fresh)


# --- the fast path and math-verify read answers alike -------------------------------------------
def math_verify(answer: str, gold: str):
    """math-verify's verdict, in this process (pytest's main thread: its own alarms work)."""
    from rllib_llm.envs.verify_worker import math_verify_equal

    return math_verify_equal(answer, gold, 5)


@pytest.mark.parametrize(
    ("answer", "gold"),
    [
        ("٤٢", "42"),  # Arabic-Indic digits: math-verify cannot read them raw
        ("４２", "42"),  # fullwidth digits
        ("42", "٤٢"),
        ("0,042", "42"),  # math-verify reads a decimal comma there, not a thousands separator
        ("0,042", "0.042"),
        ("4.2e1", "42"),
        ("1,000", "1000"),
        ("-1,000", "-1000"),
    ],
)
def test_fast_path_defers_where_math_verify_reads_otherwise(answer, gold):
    verdict = compare_plain_decimals(answer, gold)
    assert verdict is None or verdict == math_verify(answer, gold)


@pytest.mark.parametrize(
    ("text", "gold", "correct"),
    [
        ("\\boxed{٤٢}", "42", True),
        ("\\boxed{４２}", "42", True),
        ("the answer is ٤٢", "42", True),
        ("\\boxed{42}", "４２", True),
        ("\\boxed{\\frac{٨٤}{2}}", "42", True),  # through math-verify, digits made ASCII first
        ("\\boxed{0,042}", "42", False),
        ("\\boxed{0,042}", "0.042", True),
        ("it is 0,042", "0.042", True),
        ("\\boxed{4.2e1}", "42", True),
        ("the answer is 4.2e1", "42", True),
        ("#### 1.5E-3", "0.0015", True),
        ("\\boxed{42}", "4.2e1", True),
        ("\\boxed{4.2e1}", "4.3e1", False),
        ("\\boxed{1e400}", "10^{400}", True),  # too long written out: a power of ten instead
    ],
)
def test_unicode_digits_decimal_commas_and_scientific_notation(verifier, text, gold, correct):
    assert verifier.score(text, gold).correct is correct


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("٤٢", "42"),
        (" ４２.５ ", "42.5"),
        ("x^२", "x^2"),
        ("x²", "x²"),  # a superscript is no decimal digit: left alone
        ("4.2e1", "42"),
        ("4.20e1", "42.0"),
        ("-1.5E-3", "-0.0015"),
        ("1e+20", "100000000000000000000"),
        ("1e400", "1\\times 10^{400}"),
        ("-2.5e-101", "-2.5\\times 10^{-101}"),
        ("2e^{3}", "2e^{3}"),  # not scientific notation: left alone
        ("1,000", "1,000"),
    ],
)
def test_normalize_answer(text, normal):
    assert normalize_answer(text) == normal


def test_normalised_plain_numbers_take_the_fast_path():
    before = verify_workers()
    v = MathVerifier()
    results = v.score_batch(["\\boxed{٤٢}", "so 4.2e1", "1e-05"], ["42", "４２", "0.00001"])
    assert [(r.correct, r.fast_path, r.extracted) for r in results] == [
        (True, True, "42"),
        (True, True, "42"),
        (True, True, "0.00001"),
    ]
    assert verify_workers() == before
    v.close()


def test_empty_boxed_is_no_answer():
    assert extract_boxed("\\boxed{5} and then \\boxed{}") == "5"
    assert extract_boxed("\\boxed{ }") is None
    assert extract_answer("\\boxed{} so the answer is 7", "auto") == "7"
    assert extract_answer("\\boxed{}\n#### 8", "auto") == "8"
    assert extract_answer("\\boxed{ }", "auto") is None


def test_an_integer_past_pythons_digit_limit_scores_as_math_verify_cannot():
    # math-verify reads numbers through int(): past 4,300 digits it read none, and a correct
    # answer scored 0 with no error.
    v = MathVerifier(timeout_s=10.0)
    right = v.score("\\boxed{" + "7" * 4301 + "}", "7" * 4301)
    assert (right.score, right.correct, right.error, right.fast_path) == (1.0, True, None, True)
    # Not a plain integer: math-verify cannot read it, and the verdict says so.
    unread = v.score("\\boxed{" + "7" * 4301 + "+0}", "7" * 4301)
    assert (unread.score, unread.correct, unread.timed_out) == (0.0, False, False)
    assert unread.error == (
        "UncomparableError: the answer or the ground truth holds a number of more than 4300 "
        "digits, more than math-verify can read (Python's int-string limit); only plain "
        "integers are compared at any length")
    assert v.metrics()["errors"] == 1
    v.close()


def test_an_answer_too_deep_for_math_verify_is_an_error_not_a_wrong_answer(monkeypatch):
    import math_verify
    from rllib_llm.envs.verify_worker import UncomparableError, math_verify_equal

    # (Real nesting that deep hits math-verify's own time limit first, on this machine.)
    def too_deep(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(math_verify, "parse", too_deep)
    with pytest.raises(UncomparableError, match=r"^the answer or the ground truth is nested too "
                       r"deep for math-verify to read \(Python's recursion limit\)$"):
        math_verify_equal("\\sqrt{\\sqrt{2}}", "2", 1)


def test_math_verify_own_timeout_is_a_timeout():
    # math-verify's own limit is a quarter of the hard one (2 s here); expanding the power takes
    # minutes, so its alarm ends the comparison and the worker survives.
    v = MathVerifier(timeout_s=8.0)
    result = v.score("\\boxed{(x+y+z+1)^{60}}", "1")
    assert (result.correct, result.timed_out, result.error) == (False, True, None)
    assert result.score == 0.0
    assert v.metrics()["timeouts"] == 1
    assert v.worker_restarts == 0  # not the hard limit: no worker was killed
    v.close()


def test_math_verify_own_parse_timeout_is_a_timeout():
    import subprocess
    import sys

    from rllib_llm.envs.verify_worker import INNER_TIMEOUT

    # Parsing 20,000 terms takes seconds; math-verify's own 1 s alarm ends it. In a fresh process,
    # as in a verifier worker: here hypothesis's gc callback can swallow the alarm's exception.
    code = ("from rllib_llm.envs.verify_worker import math_verify_equal; "
            "print(math_verify_equal('x+' * 20_000 + '1', '1', 1))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == INNER_TIMEOUT


def test_math_verify_equal_refuses_a_thread():
    from rllib_llm.envs.verify_worker import math_verify_equal

    errors = []

    def run():
        try:
            math_verify_equal("1", "1", 1)
        except RuntimeError as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert errors == [
        "math_verify_equal runs math-verify's signal.alarm limits and needs the main thread; call "
        "it in a verifier worker (MathVerifier does)"
    ]


# --- property: the fast path never disagrees with math-verify -----------------------------------
# Arabic-Indic, fullwidth and Devanagari digits, 0 to 9.
DIGIT_SETS = tuple("".join(chr(zero + i) for i in range(10)) for zero in (0x0660, 0xFF10, 0x0966))


def renderings(value: Decimal) -> st.SearchStrategy[str]:
    """Ways a model (or a data set) writes `value`, some of them ones math-verify reads otherwise."""
    plain = format(value, "f")
    numerator, denominator = value.as_integer_ratio()
    mantissa, exponent = f"{value:e}".split("e")
    return st.one_of(
        st.just(plain),
        st.just(format(value, ",f")),  # thousands separators
        st.just(plain.replace(",", "").replace(".", ",")),  # a decimal comma
        st.integers(1, 3).map(lambda n: plain.replace("-", "-" + "0" * n) if plain[0] == "-"
                              else "0" * n + plain),  # leading zeros
        st.integers(1, 3).map(lambda n: plain + ("" if "." in plain else ".") + "0" * n),
        st.sampled_from([f"{mantissa}e{int(exponent)}", f"{value:E}", f"{value:e}"]),
        st.sampled_from(DIGIT_SETS).map(lambda d: plain.translate(str.maketrans("0123456789", d))),
        st.just(f"\\frac{{{numerator}}}{{{denominator}}}"),
        st.just(f"{numerator}/{denominator}"),
    )  # fmt: skip


VALUES = st.one_of(
    st.integers(-(10**7), 10**7).map(Decimal),
    st.decimals(-(10**4), 10**4, places=3, allow_nan=False, allow_infinity=False),
    st.sampled_from(["0", "-0", "0.042", "42", "1000", "0.1", "1e-05", "1e20"]).map(Decimal),
)
JUNK = st.text(alphabet="0123456789,.-+eE ٤４/x{}\\", max_size=10)


@st.composite
def answer_and_gold(draw) -> tuple[str, str]:
    value = draw(VALUES)
    # Often the same value written two ways (the interesting case for "equal"), else a neighbour.
    neighbours = st.sampled_from([value + 1, -value, value / 1000])
    other = draw(st.one_of(st.just(value), VALUES, neighbours))
    answer = draw(st.one_of(renderings(value), JUNK))
    gold = draw(st.one_of(renderings(other), JUNK))
    return answer, gold


@settings(max_examples=300, deadline=None, derandomize=True)
@given(answer_and_gold())
def test_fast_path_never_disagrees_with_math_verify(pair):
    answer, gold = pair
    # As the verifier compares them (normalised), and raw: the fast path must be safe on both.
    for a, g in ((normalize_answer(answer), normalize_answer(gold)), (answer, gold)):
        fast = compare_plain_decimals(a, g)
        if fast is not None:
            assert fast == math_verify(a, g), (a, g)
