"""Telling a person's open pages that their access changed, so that they re-check and close."""

from django.db import transaction


def access_ended(user) -> None:
    """After the change commits: every open socket of this person re-checks and closes (wired in the
    consumers; until then their next message finds the session gone)."""
    transaction.on_commit(lambda: None)
