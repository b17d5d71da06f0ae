"""The transaction authorization endpoint's two verbs: accept a challenge, answer a poll.

Accepting a challenge reserves its `jti` first (a row unique per resource, so two relays of one
challenge race on a constraint, not on a read), then files the proposal through intake, then attaches
it with its audit event. A refusal by intake removes the reservation, so bad input changes nothing.
The same client relaying the same challenge again gets the same transaction back; anyone else, or the
same `jti` with other contents, is refused."""

import hashlib
import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals.models import Agent
from approvals.services.common import agent_actor, proposal_subject
from audit.models import Verb
from audit.trail import record
from oauth.answers import answer_for, pace
from oauth.errors import OAuthError
from oauth.intake import file_proposal
from oauth.models import TransactionAuthorization
from oauth.resources import approval_request, operation_for
from oauth.tac.challenge import Challenge, verify_challenge

VIA = "tac"


@dataclass(frozen=True)
class Accepted:
    transaction: TransactionAuthorization
    # The token response when policy decided at intake (allowed); None while people decide.
    token: dict[str, Any] | None


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def accept_challenge(client: Agent, text: str) -> Accepted:
    """Verify the challenge, file its proposal and answer the transaction (or raise OAuthError)."""
    challenge = verify_challenge(text)
    resource = challenge.resource
    if client.tenant_id != resource.agent.tenant_id:
        raise OAuthError("unauthorized_client", "the client and the resource belong to different tenants")
    if client.pk == resource.agent_id or hasattr(client, "protected_resource"):
        raise OAuthError("unauthorized_client", "a resource cannot relay challenges")
    operation = operation_for(challenge.authorization_details, resource.types)
    request = approval_request(
        operation,
        request_id=f"tac-{challenge.jti}",
        summary=challenge.reason,
        principal=challenge.subject or challenge.caller,
        evidence_url=challenge.reason_uri,
    )
    digest = _digest(text)
    existing = _reserve(client, challenge, digest)
    if existing is not None:
        return _answer(existing)
    try:
        proposal = file_proposal(
            resource.agent,
            task_id=challenge.txn,
            request=request,
            token_claims={"txn": challenge.txn, "authorization_details": operation.authorization_details},
            via=VIA,
        )
    except OAuthError:
        TransactionAuthorization.objects.filter(
            resource=resource, challenge_jti=challenge.jti, proposal=None
        ).delete()
        raise
    with transaction.atomic(durable=True):
        row = TransactionAuthorization.objects.select_for_update().get(
            resource=resource, challenge_jti=challenge.jti
        )
        row.proposal = proposal
        row.save(update_fields=["proposal"])
        record(
            proposal.tenant_id,
            actor=agent_actor(client),
            verb=Verb.TXN_CHALLENGE_ACCEPTED,
            subject=proposal_subject(proposal),
            data={
                "transaction_authorization_id": str(row.id),
                "resource": resource.agent.slug,
                "jti": challenge.jti,
                "txn": challenge.txn,
                "caller": challenge.caller,
                "challenge_digest": digest,
            },
        )
    return _answer(row)


def _reserve(client: Agent, challenge: Challenge, digest: str) -> TransactionAuthorization | None:
    """Reserve the challenge's jti: None when this call reserved it; the existing row when the same
    client relays the same challenge again; OAuthError(invalid_grant) for any other use of the jti."""
    try:
        with transaction.atomic(durable=True):
            TransactionAuthorization.objects.create(
                resource=challenge.resource,
                client=client,
                challenge_jti=challenge.jti,
                challenge_digest=digest,
                txn=challenge.txn,
                challenge_expires_at=challenge.expires_at,
                interval=settings.OAUTH_POLL_INTERVAL_SECONDS,
            )
        return None
    except IntegrityError:
        existing = TransactionAuthorization.objects.filter(
            resource=challenge.resource, challenge_jti=challenge.jti
        ).first()
        if existing is None or existing.client_id != client.pk or existing.challenge_digest != digest:
            raise OAuthError("invalid_grant", "this challenge was already used") from None
        return existing


def _answer(row: TransactionAuthorization) -> Accepted:
    if row.proposal is None:
        return Accepted(transaction=row, token=None)  # another relay of it is being taken in right now
    try:
        return Accepted(transaction=row, token=answer_for(row.proposal))
    except OAuthError as error:
        if error.error == "authorization_pending":
            return Accepted(transaction=row, token=None)
        raise


def poll(client: Agent, transaction_authorization_id: str) -> dict[str, Any]:
    """The token response, or OAuthError (authorization_pending, slow_down, access_denied,
    expired_token, invalid_grant for an id this client was not given)."""
    key = _uuid_or_none(transaction_authorization_id)
    row = (
        TransactionAuthorization.objects.select_related("proposal").filter(pk=key, client=client).first()
        if key is not None
        else None
    )
    if row is None:
        raise OAuthError("invalid_grant", "unknown transaction_authorization_id")
    now = timezone.now()
    pace(TransactionAuthorization.objects.all(), row.pk, row.interval, now)
    if row.proposal is None:
        if now >= row.challenge_expires_at:
            raise OAuthError("expired_token", "the challenge expired before it was taken in")
        raise OAuthError("authorization_pending")
    return answer_for(row.proposal, now)


def _uuid_or_none(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None
