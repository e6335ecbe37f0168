"""MathVerifier: extraction, scoring, the fast path, hostile input, timeouts, crashes, cleanup."""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import threading
import time

import pytest
from rllib_llm.envs.answer_extraction import (
    EXTRACTIONS,
    compare_plain_decimals,
    extract_answer,
    extract_boxed,
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
        ("1" * 31, "1", None),  # too long for the fast path
    ],
)
def test_compare_plain_decimals(answer, gold, verdict):
    assert compare_plain_decimals(answer, gold) is verdict


# --- scoring ------------------------------------------------------------------------------------
def test_fast_path_verdicts_and_counters():
    v = MathVerifier()
    results = v.score_batch(["the answer is 72", "#### 71", "nothing"], ["72", "72", "72"])
    assert [(r.score, r.correct, r.extracted, r.fast_path) for r in results] == [
        (1.0, True, "72", True),
        (0.0, False, "71", True),
        (0.0, False, None, False),
    ]
    assert v.metrics() == {"verifications": 3, "timeouts": 0, "errors": 0, "fast_path": 2}
    assert set(v.metrics()) == set(METRIC_NAMES)
    assert v._pool is None  # plain numbers never start a worker process
    v.close()


def test_as_info_holds_every_field():
    verdict = MathVerifier().score("\\boxed{72}", "72")
    assert verdict.as_info() == dataclasses.asdict(verdict)


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
    v.score("\\boxed{\\frac{1}{2}}", "0.5")  # start the workers outside the measured time
    start = time.perf_counter()
    results = v.score_batch(list(HOSTILE.values()), ["72"] * len(HOSTILE))
    elapsed = time.perf_counter() - start
    for name, result in zip(HOSTILE, results):
        assert (result.score, result.correct) == (0.0, False), name
    assert results[0].timed_out  # the power tower cannot finish in 0.5 s
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
    p = HardTimeoutPool(1, timeout_s=5.0)
    p.run([(math.sqrt, (4.0,))])
    process = p._workers[0].process
    p.close()
    assert process.poll() is not None
    with pytest.raises(RuntimeError, match=r"run\(\) after close\(\); create a new pool"):
        p.run([(math.sqrt, (4.0,))])

    p = HardTimeoutPool(1, timeout_s=5.0)
    p.run([(math.sqrt, (4.0,))])
    process = p._workers[0].process
    del p
    gc.collect()
    assert process.poll() is not None


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
