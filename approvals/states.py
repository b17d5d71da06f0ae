"""The proposal lifecycle: one state table, checked in one place.

DESIGN.md "The proposal lifecycle" is the source of this table. `transition()` in services/lifecycle.py is the
only code that changes `Proposal.state`, and it consults `ALLOWED` before writing.
"""

from django.db import models


class State(models.TextChoices):
    PROPOSED = "proposed"
    ALLOWED = "allowed"
    DENIED = "denied"
    AWAITING_REVIEW = "awaiting_review"
    INFO_REQUESTED = "info_requested"
    APPROVED = "approved"
    EXECUTING = "executing"
    UNKNOWN = "unknown"
    REJECTED = "rejected"
    EXPIRED = "expired"
    REVOKED = "revoked"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


ALLOWED: dict[str, set[str]] = {
    State.PROPOSED: {State.ALLOWED, State.DENIED, State.AWAITING_REVIEW},
    State.ALLOWED: {State.EXECUTING, State.REVOKED, State.EXPIRED},
    State.DENIED: set(),
    State.AWAITING_REVIEW: {
        State.APPROVED,
        State.REJECTED,
        State.EXPIRED,
        State.SUPERSEDED,
        State.CANCELLED,
        State.INFO_REQUESTED,
    },
    State.INFO_REQUESTED: {State.SUPERSEDED, State.EXPIRED, State.CANCELLED},
    State.APPROVED: {State.EXECUTING, State.REVOKED, State.EXPIRED},
    State.EXECUTING: {State.SUCCEEDED, State.FAILED, State.UNKNOWN},
    State.UNKNOWN: {State.SUCCEEDED, State.FAILED},
    State.REJECTED: set(),
    State.EXPIRED: set(),
    State.REVOKED: set(),
    State.CANCELLED: set(),
    State.SUPERSEDED: set(),
    State.SUCCEEDED: set(),
    State.FAILED: set(),
}

TERMINAL = frozenset(state for state, nexts in ALLOWED.items() if not nexts)
# States in which a signed "go" decision exists that has not been consumed yet.
RELEASED = frozenset({State.ALLOWED, State.APPROVED})
# States in which people may still vote.
OPEN_FOR_VOTES = frozenset({State.AWAITING_REVIEW})
# States in which a request waits for people: their votes, or the agent's answer to their question.
WAITING_FOR_PEOPLE = frozenset({State.AWAITING_REVIEW, State.INFO_REQUESTED})
# States after the agent consumed its decision: the work has started and can no longer be revoked.
STARTED = frozenset({State.EXECUTING, State.UNKNOWN, State.SUCCEEDED, State.FAILED})


class IllegalTransition(Exception):
    def __init__(self, current: str, target: str):
        super().__init__(f"a proposal cannot move from {current} to {target}")
        self.current = current
        self.target = target


def check_transition(current: str, target: str) -> None:
    if target not in ALLOWED[current]:
        raise IllegalTransition(current, target)
