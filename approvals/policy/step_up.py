"""The step-up a vote needs: what a policy's `step_up` field may say, which of two is stricter, and the
one reading of a proposal's pinned mode (`mode_of`). Pure: no Django, no models."""

import re

PER_VOTE = "per_vote"
# A passkey (WebAuthn) answering this vote's own challenge: phishing-resistant, and stricter than per_vote.
PASSKEY = "passkey"

_WINDOW = re.compile(r"[0-9]{1,6}")  # ASCII digits only: "١٢" passes str.isdigit() but is no window


def validate_step_up(value: str) -> str:
    value = str(value).strip()
    if value in (PER_VOTE, PASSKEY):
        return value
    if _WINDOW.fullmatch(value) and int(value) > 0:
        return str(int(value))
    raise ValueError(
        "step-up must be 'per_vote', 'passkey' or a freshness window in seconds (a positive number)"
    )


def stricter_step_up(a: str, b: str) -> str:
    """passkey is the strictest, then per_vote; between two windows, the shorter one."""
    for mode in (PASSKEY, PER_VOTE):
        if mode in (a, b):
            return mode
    return str(min(int(a), int(b)))


def step_up_window(mode: str) -> int | None:
    """The seconds an earlier step-up in the session counts for, or None when each vote needs its own."""
    return None if mode in (PER_VOTE, PASSKEY) else int(mode)


def mode_of(requirements: dict) -> str:
    """The step-up pinned in a proposal's (or a version's) requirements; per_vote when they name none."""
    return requirements.get("step_up", PER_VOTE)


def needs_passkey(requirements: dict) -> bool:
    return mode_of(requirements) == PASSKEY
