"""Fixtures every test of the package shares: a Reviewer signing key and a fake Reviewer serving it."""

import os

import pytest

# Before any test imports CrewAI (reviewer_gate.crewai): no install ping, no run telemetry (which would
# also set the process's OpenTelemetry tracer provider), no first-run prompt to show traces.
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TESTING", "true")

from reviewer_gate.testing import FakeReviewer, ReviewerKey


@pytest.fixture
def key():
    return ReviewerKey()


@pytest.fixture
def reviewer(key):
    server = FakeReviewer([key]).start()
    yield server
    server.stop()
