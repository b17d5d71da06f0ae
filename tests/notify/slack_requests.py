"""Requests as Slack sends them to Reviewer, signed with Slack's algorithm, and the test workspace's
constants."""

import json
import time
from urllib.parse import urlencode

from slack_sdk.signature import SignatureVerifier

from approvals.models.notifications import SlackIdentity

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TEAM = "T0001"
FINANCE_CHANNEL = "C0FINANCE"


def link(workspace, user, slack_user_id: str) -> SlackIdentity:
    from django.utils import timezone

    return SlackIdentity.objects.create(
        workspace=workspace, slack_user_id=slack_user_id, user=user, linked_at=timezone.now()
    )


def signed_post(
    client, payload: dict, *, secret: str = SIGNING_SECRET, timestamp: int | None = None, headers=None
):
    """POST an interactivity payload as Slack does: form-encoded `payload=<json>`, signed with the
    algorithm Slack uses (slack_sdk's SignatureVerifier.generate_signature: v0 HMAC-SHA256)."""
    body = urlencode({"payload": json.dumps(payload)})
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    signature = SignatureVerifier(secret).generate_signature(timestamp=stamp, body=body)
    sent = {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": signature}
    if headers is not None:
        sent = headers
    return client.post(
        "/slack/interactivity", data=body, content_type="application/x-www-form-urlencoded", headers=sent
    )


def button(proposal, slack_user: str, action_id: str) -> dict:
    return {
        "type": "block_actions",
        "team": {"id": TEAM},
        "user": {"id": slack_user, "team_id": TEAM},
        "trigger_id": "trigger-1",
        "actions": [{"action_id": action_id, "value": str(proposal.id), "type": "button"}],
    }


def submission(modal: dict, slack_user: str, *, reason: str = "", code: str = "") -> dict:
    """The view_submission Slack sends when the person submits the modal Reviewer opened."""
    return {
        "type": "view_submission",
        "team": {"id": TEAM},
        "user": {"id": slack_user, "team_id": TEAM},
        "view": {
            "callback_id": modal["callback_id"],
            "private_metadata": modal["private_metadata"],
            "state": {
                "values": {
                    "reason": {"reason_input": {"type": "plain_text_input", "value": reason}},
                    "code": {"code_input": {"type": "plain_text_input", "value": code}},
                }
            },
        },
    }
