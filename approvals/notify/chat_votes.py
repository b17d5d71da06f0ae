"""A vote given in a chat (a Slack modal, a Teams dialog): one order of checks for every chat, so the rules
are the page's and a form error never costs the person their code.

The order matters because a one-time code that was checked is spent (django-otp saves the step it used):

1. what does not need the person's factor: the proposal's policy allows chat decisions (never R3, never
   a passkey step-up), the verdict is approve or reject, the words are right (a rejection has a reason:
   `services.votes.check_words`, the page's own check);
2. then the code (`accounts.stepup.step_up_for`, no session: a chat has none, so every chat vote needs
   a fresh code);
3. then `services.votes.cast_vote`, which checks the step-up, separation of duties, the digest the
   person saw and the quorum exactly as for a page vote, and writes the audit events.

A refusal in step 1 leaves the code unchecked: the person fixes the form and sends the same code. A
refusal in step 3 comes after the code was checked and spent, as on the page.
"""

from typing import Any

from accounts import stepup
from approvals.models import Proposal, Vote
from approvals.policy.notifications import chat_decisions_allowed
from approvals.services.votes import cast_vote, check_words
from lib.errors import VoteRefused

CHAT_DECISIONS_OFF = "chat_decisions_off"


def refuse_chat_verdict(proposal: Proposal, verdict: str) -> None:
    """Raise VoteRefused when no chat may give this verdict on this proposal: its policy does not allow
    chat decisions, or the verdict is neither approve nor reject. Asked before a form is even shown."""
    if not chat_decisions_allowed(proposal.requirements, proposal.reversibility):
        raise VoteRefused(CHAT_DECISIONS_OFF, "this request's policy does not allow decisions from chat")
    if verdict not in Vote.Verdict.values:
        raise VoteRefused("bad_verdict", "a vote is approve or reject")


def vote_from_chat(
    proposal: Proposal, person: Any, *, verdict: str, digest_seen: str, reason: str, code: str, page_hash: str
) -> Vote:
    """Cast `person`'s vote from a chat: the form first, then the code, then the page's `cast_vote`.
    Raises VoteRefused (or another ServiceError) with the field to show it on."""
    refuse_chat_verdict(proposal, verdict)  # step 1: nothing here needs the factor
    check_words(verdict, reason=reason)
    step_up = stepup.step_up_for(person, code, None)  # a fresh code, checked (and spent) as the page does
    return cast_vote(
        proposal.id,
        person,
        verdict=verdict,
        digest_seen=digest_seen,
        reason=reason,
        step_up=step_up,
        page_hash=page_hash,
    )
