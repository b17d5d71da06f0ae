"""Slack's requests to Reviewer (interactivity: button clicks and modal submissions) and the page where a
person confirms the link between their Slack user and their Reviewer account.

Every request from Slack is checked before anything is read for meaning: the workspace it names must be
installed, its `X-Slack-Signature` must be the HMAC-SHA256 of `v0:<timestamp>:<body>` under that
workspace's signing secret with a timestamp at most five minutes old (slack_sdk's SignatureVerifier, the
algorithm Slack signs with), and its signature must not have been seen before (a replay inside the
window). Anything else is 401 with an audit event.

A decision from Slack is `chat_votes.vote_from_chat`: the modal's words are checked first (a rejection
without a reason keeps its code), then the code typed into the modal, then the page's own `cast_vote`:
the same check of the code, separation of duties, quorum and audit events as the page. It is offered
and accepted only where the proposal's policy allows chat decisions (approvals/policy/notifications.py):
never for R3, never where the policy asks for a passkey.
"""

import json
import logging
import uuid
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.signature import SignatureVerifier

from approvals.models import Proposal
from approvals.models.notifications import SlackIdentity, SlackWorkspace
from approvals.notify import slack_messages, slack_sync
from approvals.notify.chat_votes import CHAT_DECISIONS_OFF, vote_from_chat
from approvals.notify.secrets import SecretMissing, read_secret
from approvals.policy.notifications import chat_decisions_allowed
from approvals.services import slack_links
from lib.decorators import verified_required
from lib.errors import ServiceError

log = logging.getLogger(__name__)

BODY_CAP = 64 * 1024


def _team_id(payload: dict) -> str:
    return str((payload.get("team") or {}).get("id") or (payload.get("user") or {}).get("team_id") or "")


def _refused(workspace, code: str, status: int = 401) -> HttpResponse:
    slack_links.note_refused_request(workspace, code)
    return HttpResponse(f"refused: {code}", status=status, content_type="text/plain")


@csrf_exempt
@require_POST
def interactivity(request):
    body = request.body
    if len(body) > BODY_CAP:
        return HttpResponse("too large", status=413)
    try:
        payload = json.loads(parse_qs(body.decode())["payload"][0])
    except (KeyError, ValueError, UnicodeDecodeError):
        return _refused(None, "malformed", 400)
    workspace = SlackWorkspace.objects.filter(team_id=_team_id(payload), enabled=True).first()
    if workspace is None:
        return _refused(None, "unknown_workspace")
    timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
    signature = request.headers.get("X-Slack-Signature", "")
    try:
        secret = read_secret(workspace.signing_secret_ref)
    except SecretMissing:
        log.error("slack workspace %s has no signing secret", workspace.team_id)
        return _refused(workspace, "no_signing_secret", 503)
    if not _signed(secret, body, timestamp, signature):
        return _refused(workspace, "bad_signature")
    if not slack_links.first_sight(signature):
        return _refused(workspace, "replayed")
    slack_user = str((payload.get("user") or {}).get("id") or "")
    if payload.get("type") == "block_actions":
        return _button(workspace, slack_user, payload)
    if payload.get("type") == "view_submission":
        return _submission(workspace, slack_user, payload)
    return HttpResponse(status=200)  # other interactions (the link button): nothing to do


def _signed(secret: str, body: bytes, timestamp: str, signature: str) -> bool:
    """Slack's signature over this body and timestamp, the timestamp at most five minutes off."""
    if not signature or not timestamp.isdigit():
        return False
    return SignatureVerifier(secret).is_valid(body, timestamp, signature)


def _person(workspace, slack_user: str):
    identity = (
        SlackIdentity.objects.select_related("user")
        .filter(workspace=workspace, slack_user_id=slack_user)
        .first()
    )
    return identity.user if identity and identity.user.is_active else None


def _open(workspace, trigger_id: str, view: dict) -> None:
    try:
        slack_sync.client(workspace).views_open(trigger_id=trigger_id, view=view)
    except (SlackApiError, SlackClientError, SecretMissing, OSError) as error:
        log.warning("slack views.open failed: %s", error)


def _button(workspace, slack_user: str, payload: dict) -> HttpResponse:
    action: dict[str, Any] = next(iter(payload.get("actions") or []), {})
    verdict = {slack_messages.APPROVE: "approve", slack_messages.REJECT: "reject"}.get(
        action.get("action_id", "")
    )
    if verdict is None:
        return HttpResponse(status=200)
    trigger = str(payload.get("trigger_id") or "")
    person = _person(workspace, slack_user)
    if person is None:
        token = slack_links.offer_link(workspace, slack_user)
        link = _absolute(reverse("approvals:slack_link", kwargs={"token": token}))
        _open(
            workspace,
            trigger,
            slack_messages.notice_modal(
                "Link your account",
                f"To decide from Slack, first link this Slack user to your Reviewer account: <{link}|open "
                "Reviewer and confirm> (the link works once, for 15 minutes).",
            ),
        )
        return HttpResponse(status=200)
    proposal = Proposal.objects.filter(pk=_uuid(action.get("value")), tenant_id=workspace.tenant_id).first()
    if proposal is None:
        return HttpResponse(status=200)
    if not chat_decisions_allowed(proposal.requirements, proposal.reversibility):
        slack_links.note_refused_request(workspace, "chat_decisions_off", {"proposal": str(proposal.id)})
        _open(workspace, trigger, slack_messages.notice_modal("Decide on the page", _page_only(proposal)))
        return HttpResponse(status=200)
    _open(workspace, trigger, slack_messages.decision_modal(proposal, verdict))
    return HttpResponse(status=200)


def _page_only(proposal) -> str:
    link = slack_messages.escape(slack_messages.proposal_link(proposal))
    return f"This request's policy does not allow decisions from chat. <{link}|Review it in Reviewer>."


def _submission(workspace, slack_user: str, payload: dict) -> HttpResponse:
    view = payload.get("view") or {}
    if view.get("callback_id") != slack_messages.DECIDE_CALLBACK:
        return HttpResponse(status=200)
    try:
        meta = json.loads(view.get("private_metadata") or "{}")
    except ValueError:
        meta = {}
    values = (view.get("state") or {}).get("values") or {}
    reason = _value(values, slack_messages.REASON_BLOCK, slack_messages.REASON_INPUT)
    code = _value(values, slack_messages.CODE_BLOCK, slack_messages.CODE_INPUT)
    person = _person(workspace, slack_user)
    if person is None:
        return _errors(slack_messages.CODE_BLOCK, "this Slack user is not linked to a Reviewer account")
    proposal = Proposal.objects.filter(pk=_uuid(meta.get("proposal")), tenant_id=workspace.tenant_id).first()
    if proposal is None:
        return _errors(slack_messages.CODE_BLOCK, "no such proposal")
    try:
        vote_from_chat(
            proposal,
            person,
            verdict=str(meta.get("verdict") or ""),
            digest_seen=str(meta.get("digest") or ""),
            reason=reason,
            code=code,
            page_hash="slack:" + slack_messages.shown_hash(slack_messages.proposal_blocks(proposal)),
        )
    except ServiceError as refusal:
        if refusal.code == CHAT_DECISIONS_OFF:
            slack_links.note_refused_request(workspace, CHAT_DECISIONS_OFF, {"proposal": str(proposal.id)})
        block = slack_messages.REASON_BLOCK if refusal.field == "reason" else slack_messages.CODE_BLOCK
        return _errors(block, refusal.message)
    return JsonResponse({"response_action": "clear"})


def _value(values: dict, block: str, action: str) -> str:
    return str(((values.get(block) or {}).get(action) or {}).get("value") or "")


def _errors(block: str, message: str) -> JsonResponse:
    return JsonResponse({"response_action": "errors", "errors": {block: message[:150]}})


def _uuid(value):
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def _absolute(path: str) -> str:
    return settings.REVIEWER_ISSUER + path


@verified_required
@require_http_methods(["GET", "POST"])
def confirm_link(request, token: str):
    """The person sees which Slack user will act as them, and confirms (POST) or leaves."""
    offer = slack_links.pending_link(token)
    context: dict[str, Any] = {"offer": offer, "error": None, "linked": None}
    if request.method == "POST" and offer is not None:
        try:
            context["linked"] = slack_links.confirm_link(token, actor=request.user)
        except ServiceError as refusal:
            context["error"] = refusal.message
    status = 200 if offer is not None or context["linked"] else 410
    return render(request, "approvals/slack_link.html", context, status=status)
