"""The code that runs inside a verifier worker process; standard library only at import.

`HardTimeoutPool` runs this file as a script in a fresh interpreter (`python -P verify_worker.py
FD [MODULE ...]`): FD is the worker's end of a socket pair, the MODULEs are imported (and
math-verify warmed up by one comparison) before the worker reports ready. Running the file,
rather than importing `rllib_llm.envs.verify_worker`, keeps `rllib_llm/__init__` out of the
worker: it registers environments with Ray Tune, which costs seconds and ~160 MB per worker
(measured: a worker with only math-verify loaded holds ~56 MB), and a worker killed on a timeout
is replaced while verification waits for it.

A call is `(fn, args)`: `fn` is a picklable callable (imported by reference in the worker), or the
name of a function defined in this file, which needs no import at all.
"""

from __future__ import annotations

import importlib
import signal
import sys

READY = "ready"
INNER_TIMEOUT = "timed out"  # `math_verify_equal`'s reply when math-verify's own limit ended it
ERROR_CHARS = 500  # an exception message from hostile input can be as large as the input
# What Python says when an int of more digits than `sys.get_int_max_str_digits()` (4,300) is read
# from text: math-verify reads numbers through sympy, which meets this limit.
_DIGIT_LIMIT = "integer string conversion"


class UncomparableError(Exception):
    """math-verify cannot read an answer at all (Python's own limits): not knowing, not wrong."""


def math_verify_equal(answer: str, gold: str, inner_timeout_s: int) -> bool | str:
    """math-verify's verdict on `answer` against `gold` (both LaTeX or plain expressions).

    Returns True or False, or `INNER_TIMEOUT` when math-verify's own time limit ended a step
    before any comparison found them equal: not knowing is not a wrong answer.

    `inner_timeout_s` arms math-verify's own `signal.alarm` limits (this is the worker's main
    thread, where they work); they end most slow cases gracefully, and the pool's hard limit ends
    the rest by killing the process. math-verify swallows its own timeouts into an empty parse or
    a False unless `raise_on_error=True`, so that is set and every other error is read as it would
    read it: no parse, or not equal.
    """
    import itertools
    import logging
    import threading

    from math_verify import verify
    from math_verify.errors import TimeoutException

    if threading.current_thread() is not threading.main_thread():
        # signal.alarm would fail, and the error below would read as "not equal".
        raise RuntimeError(
            "math_verify_equal runs math-verify's signal.alarm limits and needs the main thread; "
            "call it in a verifier worker (MathVerifier does)"
        )
    # math-verify logs every timeout with the whole input, which can be 100 kB of hostile text.
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    try:
        gold_parsed = _parse(gold, inner_timeout_s)
        answer_parsed = _parse(answer, inner_timeout_s)
    except TimeoutException:
        return INNER_TIMEOUT
    timed_out = False
    # `verify(gold_parsed, answer_parsed)` tries every pair until one is equal; so do we.
    for gold_item, answer_item in itertools.product(gold_parsed, answer_parsed):
        try:
            if verify(gold_item, answer_item, timeout_seconds=inner_timeout_s, raise_on_error=True):
                return True
        except TimeoutException:
            timed_out = True
        except Exception as exc:  # noqa: BLE001 - math-verify reads a failed comparison as False
            _raise_if_beyond_limits(exc)
            continue
    return INNER_TIMEOUT if timed_out else False


def _parse(text: str, inner_timeout_s: int) -> list:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    configs = (LatexExtractionConfig(), ExprExtractionConfig())
    try:
        return parse(
            _as_math(text),
            extraction_config=configs,
            parsing_timeout=inner_timeout_s,
            raise_on_error=True,
        )
    except Exception as exc:  # noqa: BLE001 - math-verify reads a failed parse as no answer
        _raise_if_beyond_limits(exc)
        return []


def _raise_if_beyond_limits(exc: BaseException) -> None:
    """Raise UncomparableError if `exc` (or its cause) is Python refusing the input as too big or
    too deep: math-verify would read it as no answer or "not equal", scoring a correct answer
    wrong with no error to show for it; the verdict says why instead."""
    seen = exc
    while seen is not None:
        if isinstance(seen, RecursionError):
            raise UncomparableError("the answer or the ground truth is nested too deep for "
                                    "math-verify to read (Python's recursion limit)") from exc
        if _DIGIT_LIMIT in str(seen):
            raise UncomparableError(
                "the answer or the ground truth holds a number of more than "
                f"{sys.get_int_max_str_digits()} digits, more than math-verify can read "
                "(Python's int-string limit); only plain integers are compared at any length"
            ) from exc
        seen = seen.__cause__ or seen.__context__


def _as_math(text: str) -> str:
    # An extracted answer is bare LaTeX ("\frac{1}{2}"); math-verify finds LaTeX inside `$...$`.
    return text if "$" in text else f"${text}$"


def serve(conn, preload: tuple[str, ...]) -> None:
    """Loop: receive `(fn, args)`, reply `(True, value)` or `(False, message)`; None or EOF ends."""
    # Ctrl-C reaches the whole process group; the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for module in preload:
        importlib.import_module(module)
    if "math_verify" in preload:
        # The first comparison builds math-verify's LaTeX parser (~0.25 s, more on a busy machine,
        # against ~1 ms after). Done before READY, it never counts against a call's time limit,
        # in the first worker or in a replacement for a killed one.
        math_verify_equal("\\frac{1}{2}", "0.5", 1)
    conn.send(READY)
    while True:
        try:
            job = conn.recv()
        except EOFError:  # the parent is gone
            return
        if job is None:
            return
        fn, args = job
        try:
            reply = (True, (globals()[fn] if isinstance(fn, str) else fn)(*args))
        except BaseException as exc:  # noqa: BLE001 - any failure of the call is its outcome
            reply = (False, f"{type(exc).__name__}: {exc}"[:ERROR_CHARS])
        try:
            conn.send(reply)
        except Exception as exc:  # noqa: BLE001 - an unpicklable return value
            conn.send((False, f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]))


if __name__ == "__main__":
    from multiprocessing.connection import Connection

    serve(Connection(int(sys.argv[1])), tuple(sys.argv[2:]))
