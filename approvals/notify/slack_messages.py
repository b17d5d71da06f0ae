"""What a Slack message about a proposal shows (Block Kit), and the chat-decision modal.

Reviewer's own summary, as the page states it (`common.facts`: the headline's amount with its currency
and the target as its history spells it): the action, the amount, the target, risk, reversibility, who
asks, the expiry, and where it stands now (votes, decided, expired, withdrawn),
with a "Review in Reviewer" link button. Agent text goes only into `plain_text` objects (Slack renders
no markup, mention or link in them), through `one_line` (hidden characters written out, one line,
capped: never more than the page shows), and messages are posted with unfurling off. Nothing carries a
token, a digest or a code; the modal asks for the code and Reviewer checks it.
"""

import hashlib
import json

from approvals.notify import common
from approvals.notify.common import one_line, proposal_link, when
from approvals.policy.notifications import chat_decisions_allowed
from approvals.services.quorum import count_quorum
from approvals.states import OPEN_FOR_VOTES, RELEASED, STARTED, State

APPROVE = "reviewer_approve"
REJECT = "reviewer_reject"
REVIEW = "reviewer_review"
DECIDE_CALLBACK = "reviewer_decide"
REASON_BLOCK, REASON_INPUT = "reason", "reason_input"
CODE_BLOCK, CODE_INPUT = "code", "code_input"
SUMMARY_CAP = 300


def escape(text: str) -> str:
    """Slack's own escaping for the mrkdwn `text` fallback: &, < and > (what makes links and mentions)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _plain(text: str) -> dict:
    return {"type": "plain_text", "text": text or " ", "emoji": False}


def _names(votes) -> str:
    return ", ".join(v.voter.get_full_name() or v.voter.get_username() for v in votes) or "nobody"


def status_line(proposal) -> str:
    """Where the proposal stands, in Reviewer's words."""
    state = proposal.state
    if state in OPEN_FOR_VOTES:
        quorum = count_quorum(proposal)
        have = sum(len(v) for v in quorum.slots.values())
        need = sum(int(t["count"]) for t in quorum.required)
        return f"Waiting for review: {have} of {need} approvals. Expires at {when(proposal.expires_at)}."
    if state == State.INFO_REQUESTED:
        return "A reviewer asked the agent a question; the answer comes as a new request."
    votes = list(proposal.votes.select_related("voter").order_by("created_at"))
    if state == State.REJECTED:
        return f"Rejected by {_names([v for v in votes if v.verdict == 'reject'])}."
    if state in RELEASED or state in STARTED:
        approvers = [v for v in votes if v.verdict == "approve"]
        by = f"Approved by {_names(approvers)}." if approvers else "Released by policy."
        return by if state in RELEASED else f"{by} The agent ran it: {state}."
    if state == State.EXPIRED:
        return f"Expired at {when(proposal.expires_at)}: nobody decided it in time, nothing was released."
    if state in (State.CANCELLED, State.SUPERSEDED):
        return f"Withdrawn ({state}): no decision is open here."
    if state == State.REVOKED:
        return "Approved, then revoked: the decision no longer holds."
    return f"Closed ({state})."


def proposal_blocks(proposal) -> list[dict]:
    facts = [f"{label}: {value}" for label, value in common.facts(proposal)]
    buttons = [
        {
            "type": "button",
            "action_id": REVIEW,
            "text": _plain("Review in Reviewer"),
            "url": proposal_link(proposal),
        }
    ]
    if proposal.state in OPEN_FOR_VOTES and chat_decisions_allowed(
        proposal.requirements, proposal.reversibility
    ):
        buttons += [
            {"type": "button", "action_id": APPROVE, "text": _plain("Approve"), "value": str(proposal.id)},
            {"type": "button", "action_id": REJECT, "text": _plain("Reject"), "value": str(proposal.id)},
        ]
    return [
        {"type": "header", "text": _plain(f"Approval requested: {common.headline_line(proposal, 120)}")},
        {"type": "section", "text": _plain(one_line(proposal.summary, SUMMARY_CAP))},
        {"type": "section", "fields": [_plain(fact) for fact in facts]},
        {"type": "section", "text": _plain(status_line(proposal))},
        {"type": "actions", "elements": buttons},
    ]


def fallback_text(proposal) -> str:
    """The notification text (Slack parses mrkdwn here, so it is escaped)."""
    return escape(f"Approval requested: {common.headline_line(proposal, 100)} ({status_line(proposal)})")


def shown_hash(blocks: list[dict]) -> str:
    return hashlib.sha256(json.dumps(blocks, sort_keys=True).encode()).hexdigest()


def decision_modal(proposal, verdict: str) -> dict:
    """The modal an Approve or Reject button opens: a reason and a fresh one-time code. The proposal, the
    verdict and the digest the person saw travel in private_metadata (no secret: the page shows them)."""
    title = "Approve" if verdict == "approve" else "Reject"
    reason = {
        "type": "input",
        "block_id": REASON_BLOCK,
        "optional": verdict == "approve",
        "label": _plain("Reason" if verdict == "reject" else "Reason (optional)"),
        "element": {
            "type": "plain_text_input",
            "action_id": REASON_INPUT,
            "multiline": True,
            "max_length": 2000,
        },
    }
    code = {
        "type": "input",
        "block_id": CODE_BLOCK,
        "label": _plain("One-time code from your authenticator"),
        "element": {"type": "plain_text_input", "action_id": CODE_INPUT, "min_length": 6, "max_length": 12},
    }
    return {
        "type": "modal",
        "callback_id": DECIDE_CALLBACK,
        "private_metadata": json.dumps(
            {"proposal": str(proposal.id), "verdict": verdict, "digest": proposal.action_digest}
        ),
        "title": _plain(title),
        "submit": _plain(title),
        "close": _plain("Cancel"),
        "blocks": [
            {
                "type": "section",
                "text": _plain(f"{common.headline_line(proposal, 100)}: {one_line(proposal.summary, 200)}"),
            },
            {"type": "section", "text": _plain(status_line(proposal))},
            reason,
            code,
        ],
    }


def notice_modal(title: str, text: str) -> dict:
    """A modal that only says something (a link to confirm, a refusal)."""
    return {
        "type": "modal",
        "title": _plain(title[:24]),
        "close": _plain("Close"),
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
    }
