"""pytest plugin of the breakage check: which tests took an optimizer step (undone by
`sitecustomize.py`) and passed anyway. Written to RLLIB_LLM_BREAK_REPORT as JSON lines."""

import json
import os

import pytest


def _steps() -> int:
    """Optimizer steps this xdist worker's tests have taken so far, in any process."""
    me = os.environ.get("PYTEST_XDIST_WORKER", "main")
    try:
        with open(os.environ["RLLIB_LLM_BREAK_LOG"]) as f:
            return sum(line.strip() == me for line in f)
    except FileNotFoundError:
        return 0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before = _steps()
    yield
    steps = _steps() - before
    outcomes = [r for name, r in item.user_properties if name == "breakage_outcome"]
    doc = (getattr(item.function, "__doc__", None) or "") if hasattr(item, "function") else ""
    with open(os.environ["RLLIB_LLM_BREAK_REPORT"], "a") as f:
        f.write(json.dumps({"test": item.nodeid, "steps": steps,
                            "passed": bool(outcomes) and all(outcomes),
                            "explained": "Not about moving weights" in doc}) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" or report.failed or report.skipped:
        item.user_properties.append(("breakage_outcome", report.passed and not report.skipped))
