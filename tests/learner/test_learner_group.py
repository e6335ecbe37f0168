"""The learner group's public seam to its local learner."""

from __future__ import annotations

import pytest

from rllib_llm.learner.learner_group import RLVRLearnerGroup


class _Group(RLVRLearnerGroup):
    """The seam alone, without building learners (is_remote is what RLlib derives is_local
    from)."""

    def __init__(self, *, remote: bool, learner=None):  # noqa: D107 - no RLlib set-up needed
        self._remote, self._learner = remote, learner

    @property
    def is_remote(self) -> bool:
        return self._remote


def test_local_learner_is_the_learner_of_a_local_group():
    learner = object()
    assert _Group(remote=False, learner=learner).local_learner is learner


def test_local_learner_of_remote_learners_is_an_error_naming_the_way_to_them():
    with pytest.raises(RuntimeError, match="foreach_learner"):
        _Group(remote=True).local_learner  # noqa: B018
