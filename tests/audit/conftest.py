"""Helpers for the audit tests: verified browser sessions, full proposal lifecycles, raw tampering."""

import pytest

from audit.exports import jobs


@pytest.fixture(autouse=True)
def _audit_settings(settings, tmp_path):
    # Personas get real passwords; the default hasher's iterations would dominate the run time.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.AUDIT_EXPORT_DIR = tmp_path / "exports"
    settings.AUDIT_CHECKPOINT_EVERY = 10
    yield
    jobs._active.clear()  # an export a test left half-done must not leak into the next test


@pytest.fixture
def any_code(monkeypatch):
    """Accept any one-time code, for tests that need many votes and do not test step-up itself."""
    from accounts import stepup

    monkeypatch.setattr(stepup, "verify_code", lambda user, code: "totp" if code else None)
