"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest
import ray


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray with the machine's 2 cores for one test module (modules opt in with
    `pytestmark = pytest.mark.usefixtures("ray_session")`)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()
