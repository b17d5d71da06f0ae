"""Teams' requests to Reviewer's bot (its messaging endpoint, /teams/messages) and the page where a person
confirms the link between their Teams user and their Reviewer account.

Every activity is checked before it is read for meaning (teams_bot.verified_bot: the Bot Connector's
signed token for one of Reviewer's bots); anything else is 401 with an audit event. The bot answers
one kind of activity, the Universal Action of a card (`invoke` named `adaptiveCard/action`), with a card
that Teams shows in place of the one acted on, for the person who acted:

- Approve or Reject on a request's card (verb `reviewer.open`): the decision form (a reason and a fresh
  one-time code); for a Teams user not linked yet, a one-time link to confirm in Reviewer; where the
  policy does not allow chat decisions, a notice that sends the person to the page.
- The form's submit (`reviewer.decide`): `chat_votes.vote_from_chat`, exactly as Slack's modal: the
  form's words first (a rejection without a reason keeps its code), then the code, then the page's own
  `cast_vote` with its separation of duties, quorum and audit events. A refusal returns the form with
  the reason kept and the refusal beside its field; a vote returns the request's card as it stands. The
  worker then updates the channel's card for everyone (approvals/notify/teams.py).
"""

import json
import logging
import uuid
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from approvals.models import Proposal
from approvals.models.notifications import TeamsBot, TeamsIdentity
from approvals.notify import teams_cards
from approvals.notify.chat_votes import CHAT_DECISIONS_OFF, refuse_chat_verdict, vote_from_chat
from approvals.notify.common import proposal_link
from approvals.notify.teams_bot import BotRequestRefused, verified_bot
from approvals.services import teams_links
from lib.decorators import verified_required
from lib.errors import ServiceError

log = logging.getLogger(__name__)

BODY_CAP = 64 * 1024
CARD = "application/vnd.microsoft.card.adaptive"


def _refused(bot: TeamsBot | None, code: str, status: int = 401) -> HttpResponse:
    teams_links.note_refused_teams_request(bot, code)
    return HttpResponse(f"refused: {code}", status=status, content_type="text/plain")


@csrf_exempt
@require_POST
def messages(request: HttpRequest) -> HttpResponse:
    if len(request.body) > BODY_CAP:
        return HttpResponse("too large", status=413)
    try:
        activity = json.loads(request.body)
        if not isinstance(activity, dict):
            raise ValueError("an activity is a JSON object")
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nesting deeper than Python's
        return _refused(None, "malformed", 400)
    try:
        bot = verified_bot(request.headers.get("Authorization", ""), activity)
    except BotRequestRefused as refusal:
        return _refused(refusal.bot, refusal.code)
    if activity.get("type") == "invoke" and activity.get("name") == "adaptiveCard/action":
        return _card_action(bot, activity)
    return HttpResponse(status=200)  # messages, installs, conversation updates: nothing to do


def _answer(card: dict[str, Any]) -> JsonResponse:
    """The invoke response of a Universal Action: the card Teams shows in place of the one acted on."""
    return JsonResponse({"statusCode": 200, "type": CARD, "value": card})


def _person(bot: TeamsBot, activity: dict[str, Any]) -> tuple[str, Any]:
    aad = str((activity.get("from") or {}).get("aadObjectId") or "")
    identity = TeamsIdentity.objects.select_related("user").filter(bot=bot, aad_object_id=aad).first()
    return aad, (identity.user if identity and identity.user.is_active else None)


def _uuid(value: object) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def _card_action(bot: TeamsBot, activity: dict[str, Any]) -> JsonResponse:
    action: dict[str, Any] = (activity.get("value") or {}).get("action") or {}
    verb, data = str(action.get("verb") or ""), action.get("data") or {}
    if not isinstance(data, dict):
        data = {}
    aad, person = _person(bot, activity)
    if person is None:
        token = teams_links.offer_teams_link(bot, aad)
        link = settings.REVIEWER_ISSUER + reverse("approvals:teams_link", kwargs={"token": token})
        return _answer(
            teams_cards.notice(
                "Link your account",
                "To decide from Teams, first link this Teams user to your Reviewer account (the link works "
                "once, for 15 minutes).",
                ("Open Reviewer and confirm", link),
            )
        )
    proposal_id = _uuid(data.get("proposal"))
    proposal = (
        None
        if proposal_id is None
        else Proposal.objects.select_related("agent").filter(pk=proposal_id, tenant_id=bot.tenant_id).first()
    )
    if proposal is None:
        return _answer(teams_cards.notice("Not found", "No such request."))
    verdict = str(data.get("verdict") or "")
    if verb == teams_cards.OPEN:
        try:
            refuse_chat_verdict(proposal, verdict)
        except ServiceError as refusal:
            return _refusal_notice(bot, proposal, refusal)
        return _answer(teams_cards.decision_form(proposal, verdict))
    if verb == teams_cards.DECIDE:
        reason = str(data.get(teams_cards.REASON_INPUT) or "")[:2000]
        try:
            vote_from_chat(
                proposal,
                person,
                verdict=verdict,
                digest_seen=str(data.get("digest") or ""),
                reason=reason,
                code=str(data.get(teams_cards.CODE_INPUT) or ""),
                page_hash="teams:" + teams_cards.shown_hash(teams_cards.card(proposal, decide=True)),
            )
        except ServiceError as refusal:
            if refusal.code == CHAT_DECISIONS_OFF:
                return _refusal_notice(bot, proposal, refusal)
            on = teams_cards.REASON_INPUT if refusal.field == "reason" else teams_cards.CODE_INPUT
            return _answer(
                teams_cards.decision_form(
                    proposal, verdict, reason=reason, error=refusal.message, error_on=on
                )
            )
        proposal.refresh_from_db()
    return _answer(teams_cards.card(proposal, outcome=teams_cards.closed(proposal), decide=True))


def _refusal_notice(bot: TeamsBot, proposal: Proposal, refusal: ServiceError) -> JsonResponse:
    if refusal.code == CHAT_DECISIONS_OFF:
        teams_links.note_refused_teams_request(bot, CHAT_DECISIONS_OFF, {"proposal": str(proposal.id)})
    link = ("Review in Reviewer", proposal_link(proposal))
    return _answer(teams_cards.notice("Decide on the page", refusal.message, link))


@verified_required
@require_http_methods(["GET", "POST"])
def confirm_link(request: HttpRequest, token: str) -> HttpResponse:
    """The person sees which Teams user will act as them, and confirms (POST) or leaves."""
    offer = teams_links.pending_teams_link(token)
    context: dict[str, Any] = {"offer": offer, "error": None, "linked": None}
    if request.method == "POST" and offer is not None:
        try:
            context["linked"] = teams_links.confirm_teams_link(token, actor=request.user)
        except ServiceError as refusal:
            context["error"] = refusal.message
    status = 200 if offer is not None or context["linked"] else 410
    return render(request, "approvals/teams_link.html", context, status=status)
