"""What a Teams card about a proposal shows (Adaptive Cards, schema 1.4, what Teams renders): the
request with Reviewer's facts (`common.facts`, the page's words), where it stands, and the actions; the
decision form a bot answers an Approve or Reject with; and short notices.

Agent text goes only into `TextRun`s of a `RichTextBlock`, which Adaptive Cards render without markdown
(a TextBlock would turn "[x](https://…)" into a link), through `one_line`. No card carries a token, a
digest the page does not show, or a code: the form asks for the code and Reviewer checks it.

Approve and Reject are Universal Actions (`Action.Execute`): Teams sends them to the bot as an `invoke`
activity named `adaptiveCard/action` with the action's `verb` and `data` (the form's inputs merged into
`data`), and shows the card the bot answers with in place of this one, for the person who acted. They
are on a card only when it is posted by a bot (an incoming webhook's card cannot carry them) and the
proposal's policy allows chat decisions.
"""

import hashlib
import json
from typing import Any

from approvals.models import Proposal
from approvals.notify import common
from approvals.notify.common import one_line, proposal_link
from approvals.notify.slack_messages import status_line
from approvals.policy.notifications import chat_decisions_allowed
from approvals.states import OPEN_FOR_VOTES, TERMINAL, WAITING_FOR_PEOPLE

SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
OPEN = "reviewer.open"  # Approve / Reject on the request's card: answered with the decision form
DECIDE = "reviewer.decide"  # the form's submit: the vote
BACK = "reviewer.back"  # the form's cancel: the request's card again
REASON_INPUT, CODE_INPUT = "reason", "code"


def closed(proposal: Proposal) -> bool:
    """No person is asked anything about it any more: its card says how it ended."""
    return proposal.state in TERMINAL or proposal.state not in WAITING_FOR_PEOPLE


def _runs(text: str) -> dict[str, Any]:
    return {"type": "RichTextBlock", "inlines": [{"type": "TextRun", "text": text or " "}]}


def _title(text: str) -> dict[str, Any]:
    return {"type": "TextBlock", "size": "Medium", "weight": "Bolder", "text": text, "wrap": True}


def _adaptive(body: list[dict[str, Any]], actions: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "AdaptiveCard", "$schema": SCHEMA, "version": "1.4", "body": body, "actions": actions}


def _review_link(proposal: Proposal) -> dict[str, Any]:
    return {"type": "Action.OpenUrl", "title": "Review in Reviewer", "url": proposal_link(proposal)}


def card(proposal: Proposal, *, outcome: bool = False, decide: bool = False) -> dict[str, Any]:
    """The card of a request, or of how it ended; `decide`: a bot's card, with Approve and Reject while
    the proposal waits and its policy allows chat decisions."""
    body = [
        _title("Request closed" if outcome else "Approval requested"),
        _runs(common.headline_line(proposal, 160)),
        _runs(one_line(proposal.summary, 300)),
        *(
            {
                "type": "ColumnSet",
                "columns": [
                    {
                        "type": "Column",
                        "width": "auto",
                        "items": [{"type": "TextBlock", "text": label, "weight": "Bolder"}],
                    },
                    {"type": "Column", "width": "stretch", "items": [_runs(value)]},
                ],
            }
            for label, value in common.facts(proposal)
        ),
        _runs(status_line(proposal)),
    ]
    actions = [_review_link(proposal)]
    if (
        decide
        and proposal.state in OPEN_FOR_VOTES
        and chat_decisions_allowed(proposal.requirements, proposal.reversibility)
    ):
        actions += [
            {
                "type": "Action.Execute",
                "title": title,
                "verb": OPEN,
                "data": {"proposal": str(proposal.id), "verdict": verdict},
            }
            for title, verdict in (("Approve", "approve"), ("Reject", "reject"))
        ]
    return _adaptive(body, actions)


def shown_hash(adaptive_card: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(adaptive_card, sort_keys=True).encode()).hexdigest()


def decision_form(
    proposal: Proposal, verdict: str, *, reason: str = "", error: str = "", error_on: str = ""
) -> dict[str, Any]:
    """The form an Approve or Reject answers with, for the person who clicked: a reason and a fresh
    one-time code. The proposal, the verdict and the digest the person saw travel in the submit's data
    (no secret: the page shows them). After a refusal the form comes back with the reason as typed and
    the refusal next to its field; the code field is empty (a code refused for the form's words is still
    good: the person may type it again)."""
    title = "Approve" if verdict == "approve" else "Reject"
    refusal = {"type": "TextBlock", "text": error, "color": "Attention", "wrap": True}
    reason_input = {
        "type": "Input.Text",
        "id": REASON_INPUT,
        "label": "Reason" if verdict == "reject" else "Reason (optional)",
        "isMultiline": True,
        "isRequired": verdict == "reject",
        "maxLength": 2000,
        "value": reason,
    }
    code_input = {
        "type": "Input.Text",
        "id": CODE_INPUT,
        "label": "One-time code from your authenticator",
        "isRequired": True,
        "maxLength": 12,
    }
    body = [
        _title(f"{title}: {common.headline_line(proposal, 120)}"),
        _runs(one_line(proposal.summary, 200)),
        _runs(status_line(proposal)),
        reason_input,
        *([refusal] if error and error_on == REASON_INPUT else []),
        code_input,
        *([refusal] if error and error_on != REASON_INPUT else []),
    ]
    data = {"proposal": str(proposal.id), "verdict": verdict, "digest": proposal.action_digest}
    return _adaptive(
        body,
        [
            {"type": "Action.Execute", "title": title, "verb": DECIDE, "data": data, "style": "positive"},
            {
                "type": "Action.Execute",
                "title": "Cancel",
                "verb": BACK,
                "data": {"proposal": str(proposal.id)},
            },
        ],
    )


def notice(title: str, text: str, link: tuple[str, str] | None = None) -> dict[str, Any]:
    """A card that only says something (a link to confirm, a refusal), with at most one link."""
    actions = [{"type": "Action.OpenUrl", "title": link[0], "url": link[1]}] if link else []
    return _adaptive([_title(title), {"type": "TextBlock", "text": text, "wrap": True}], actions)
