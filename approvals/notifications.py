"""Emails to reviewers who become eligible for a proposal (filled in by the workspace work)."""


def notify_eligible_reviewers(proposal_id) -> None:
    return None
