"""Fixtures every test of the package shares: a Reviewer signing key and a fake Reviewer serving it."""

import pytest

from reviewer_gate.testing import FakeReviewer, ReviewerKey


@pytest.fixture
def key():
    return ReviewerKey()


@pytest.fixture
def reviewer(key):
    server = FakeReviewer([key]).start()
    yield server
    server.stop()
