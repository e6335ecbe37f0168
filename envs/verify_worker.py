"""The code that runs inside a verifier worker process; standard library only at import.

`HardTimeoutPool` runs this file as a script in a fresh interpreter (`python -P verify_worker.py
FD [MODULE ...]`): FD is the worker's end of a socket pair, the MODULEs are imported before the
worker reports ready. Running the file, rather than importing `rllib_llm.envs.verify_worker`,
keeps `rllib_llm/__init__` out of the worker: it registers environments with Ray Tune, which costs
seconds and ~160 MB per worker (measured: a worker with only math-verify loaded holds ~56 MB),
and a worker killed on a timeout is replaced while verification waits for it.

A call is `(fn, args)`: `fn` is a picklable callable (imported by reference in the worker), or the
name of a function defined in this file, which needs no import at all.
"""

from __future__ import annotations

import importlib
import signal
import sys

READY = "ready"
ERROR_CHARS = 500  # an exception message from hostile input can be as large as the input


def math_verify_equal(answer: str, gold: str, inner_timeout_s: int) -> bool:
    """math-verify's verdict on `answer` against `gold` (both LaTeX or plain expressions).

    `inner_timeout_s` arms math-verify's own `signal.alarm` limits (this is the worker's main
    thread, where they work); they end most slow cases gracefully, and the pool's hard limit ends
    the rest by killing the process.
    """
    import logging

    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    # math-verify logs every timeout with the whole input, which can be 100 kB of hostile text.
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    configs = (LatexExtractionConfig(), ExprExtractionConfig())
    gold_parsed = parse(_as_math(gold), extraction_config=configs, parsing_timeout=inner_timeout_s)
    answer_parsed = parse(
        _as_math(answer), extraction_config=configs, parsing_timeout=inner_timeout_s
    )
    if not gold_parsed or not answer_parsed:
        return False
    return bool(verify(gold_parsed, answer_parsed, timeout_seconds=inner_timeout_s))


def _as_math(text: str) -> str:
    # An extracted answer is bare LaTeX ("\frac{1}{2}"); math-verify finds LaTeX inside `$...$`.
    return text if "$" in text else f"${text}$"


def serve(conn, preload: tuple[str, ...]) -> None:
    """Loop: receive `(fn, args)`, reply `(True, value)` or `(False, message)`; None or EOF ends."""
    # Ctrl-C reaches the whole process group; the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for module in preload:
        importlib.import_module(module)
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
