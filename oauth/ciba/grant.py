"""The CIBA back-channel request and its grant at the token endpoint (poll mode).

The client is a registered agent; `login_hint` names the principal (a member's principal id in the
client's tenant, or Auth0's `iss_sub` JSON form with that id as `sub`); `authorization_details` is the
action, one detail of a type a protected resource of the tenant registered (its `locations`, when
given, choose between resources that registered the same type); `binding_message` is shown on the page
beside the consequence, never instead of it. The proposal is filed under the client's registration, so
the tokens it is answered (its decision token, whose `aud` is the client's audience) are consumed and
reported through the REST API as any pull agent's."""

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import jwt
from django.conf import settings
from django.db import transaction
from django.utils import timezone

import signing_keys as keys
from approvals.models import Agent
from approvals.services.common import agent_actor, proposal_subject
from audit.models import Verb
from audit.trail import record
from oauth.answers import answer_for, pace
from oauth.errors import OAuthError
from oauth.intake import file_proposal
from oauth.models import BackchannelRequest, ProtectedResource
from oauth.resources import Operation, approval_request, invalid_details, operation_for
from oauth.wire import json_parameter
from tenants.models import TenantMembership

CIBA_GRANT = "urn:openid:params:grant-type:ciba"
VIA = "ciba"
BINDING_MESSAGE_MAX = 200
REQUESTED_EXPIRY_MAX = 7 * 24 * 3600
ID_TOKEN_SECONDS = 300


@dataclass(frozen=True)
class Started:
    request: BackchannelRequest
    expires_in: int


def _principal(client: Agent, login_hint: str) -> str:
    hint = login_hint.strip()
    if hint.startswith("{"):
        parsed = json_parameter(hint, "login_hint")
        hint = (
            parsed.get("sub", "") if isinstance(parsed, dict) and isinstance(parsed.get("sub"), str) else ""
        )
    if not hint or len(hint) > 200:
        raise OAuthError("unknown_user_id", "login_hint names no principal")
    if not TenantMembership.objects.filter(tenant_id=client.tenant_id, principal_id=hint).exists():
        raise OAuthError("unknown_user_id", "login_hint names no principal of this tenant")
    return hint


def _binding_message(form: dict[str, str]) -> str:
    message = form.get("binding_message", "")
    if len(message) > BINDING_MESSAGE_MAX or any(ord(char) < 32 for char in message):
        raise OAuthError(
            "invalid_binding_message",
            f"binding_message is at most {BINDING_MESSAGE_MAX} characters of one line of text",
        )
    return message.strip()


def _expiry(form: dict[str, str]) -> datetime | None:
    raw = form.get("requested_expiry")
    if raw is None:
        return None
    if not raw.isdigit() or not 0 < int(raw) <= REQUESTED_EXPIRY_MAX:
        raise OAuthError("invalid_request", f"requested_expiry is seconds, 1 to {REQUESTED_EXPIRY_MAX}")
    return timezone.now() + timedelta(seconds=int(raw))


def _operation(client: Agent, raw: str) -> Operation:
    details = json_parameter(raw, "authorization_details", error="invalid_authorization_details")
    if not isinstance(details, list) or len(details) != 1 or not isinstance(details[0], dict):
        raise invalid_details("authorization_details must be an array of exactly one object")
    kind, locations = details[0].get("type"), details[0].get("locations")
    resources = [
        resource
        for resource in ProtectedResource.objects.select_related("agent").filter(
            agent__tenant_id=client.tenant_id
        )
        if kind in resource.types
    ]
    if isinstance(locations, list) and locations:
        resources = [resource for resource in resources if resource.agent.audience in locations]
    if len(resources) != 1:
        raise invalid_details(
            "the type is registered by no resource of this tenant"
            if not resources
            else "several resources registered this type: name one in locations"
        )
    return operation_for(details, resources[0].types)


def start(client: Agent, form: dict[str, str]) -> Started:
    """The back-channel authentication request (CIBA §7.1): file the proposal, answer its auth_req_id."""
    if "openid" not in form.get("scope", "").split():
        raise OAuthError("invalid_scope", "scope must include openid")
    if form.get("client_notification_token"):
        raise OAuthError("invalid_request", "only the poll mode is supported")
    if form.get("login_hint_token") or form.get("id_token_hint"):
        raise OAuthError("invalid_request", "only login_hint is supported")
    if not form.get("login_hint"):
        raise OAuthError("invalid_request", "login_hint is required")
    if hasattr(client, "protected_resource"):
        raise OAuthError("unauthorized_client", "a resource cannot request back-channel authorization")
    if "authorization_details" not in form:
        raise invalid_details("authorization_details (the action to authorise) is required")
    principal = _principal(client, form["login_hint"])
    operation = _operation(client, form["authorization_details"])
    binding_message = _binding_message(form)
    request_id = f"ciba-{uuid.uuid4()}"
    request = approval_request(
        operation,
        request_id=request_id,
        summary=f"{client.name} asks, for {principal}, to {operation.tool}",
        principal=principal,
        extra_consequences={"binding_message": binding_message} if binding_message else None,
    )
    expires_at = _expiry(form)
    if expires_at is not None:
        request = request.model_copy(update={"expires_at": expires_at})
    proposal = file_proposal(
        client,
        task_id=request_id,
        request=request,
        token_claims={"authorization_details": operation.authorization_details},
        via=VIA,
    )
    with transaction.atomic(durable=True):
        row = BackchannelRequest.objects.create(
            client=client,
            proposal=proposal,
            login_hint=principal,
            interval=settings.OAUTH_POLL_INTERVAL_SECONDS,
        )
        record(
            proposal.tenant_id,
            actor=agent_actor(client),
            verb=Verb.BACKCHANNEL_REQUESTED,
            subject=proposal_subject(proposal),
            data={"auth_req_id": str(row.id), "principal": principal, "binding_message": binding_message},
        )
    return Started(
        request=row, expires_in=max(0, int((proposal.expires_at - timezone.now()).total_seconds()))
    )


def id_token(row: BackchannelRequest, client: Agent) -> str:
    """The ID Token CIBA's token response carries (CIBA §10.1.1, OpenID Core §2): who was asked, for
    which client, signed with Reviewer's key (typ JWT, so no gate takes it for a decision)."""
    now = int(timezone.now().timestamp())
    key = keys.active_key()
    claims = {
        "iss": settings.REVIEWER_ISSUER,
        "sub": row.login_hint,
        "aud": client.slug,
        "iat": now,
        "exp": now + ID_TOKEN_SECONDS,
        "urn:openid:params:jwt:claim:auth_req_id": str(row.id),
    }
    return jwt.encode(claims, key.signer(), algorithm="EdDSA", headers={"kid": key.kid, "typ": "JWT"})


def redeem(client: Agent, form: dict[str, str]) -> dict[str, Any]:
    """The token endpoint's CIBA grant (CIBA §10.1): the token response, or OAuthError."""
    try:
        request_id = uuid.UUID(form.get("auth_req_id", ""))
    except ValueError:
        raise OAuthError("invalid_grant", "unknown auth_req_id") from None
    row = BackchannelRequest.objects.select_related("proposal").filter(pk=request_id, client=client).first()
    if row is None:
        raise OAuthError("invalid_grant", "unknown auth_req_id")
    now = timezone.now()
    pace(BackchannelRequest.objects.all(), row.pk, row.interval, now)
    answer = answer_for(row.proposal, now)
    answer["id_token"] = id_token(row, client)
    answer["scope"] = "openid"
    return answer
