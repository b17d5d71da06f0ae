"""Batches over REST (docs/agents/batches.md): `POST /api/v1/batches`, `GET /api/v1/batches/<id>`, and the
agent's changes before the decision, `POST /api/v1/batches/<id>/members` and
`DELETE /api/v1/batches/<id>/members/<request_id>`. Each member is an ordinary proposal: its decision is
pulled, consumed and reported through the proposal and decision endpoints (approvals/agent_api/api.py).

Importing this module registers the operations on the API (approvals/urls.py imports it)."""

from datetime import datetime
from typing import Any

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from ninja import Schema, Status
from pydantic import BaseModel, ConfigDict

from approvals.agent_api.api import ERRORS, ErrorBody, api, uuid_or_404
from approvals.models import Agent, Batch, Decision
from approvals.schemas import ApprovalRequest, BatchSubmission
from approvals.services.batches import add_member, submit_announced_batch, withdraw_member
from approvals.services.intake import record_intake_refusal
from lib.errors import IntakeError


class NewMember(BaseModel):
    """Body of POST /api/v1/batches/<id>/members."""

    model_config = ConfigDict(extra="forbid")
    member: ApprovalRequest


class MemberStatus(Schema):
    position: int
    request_id: str
    proposal_id: str
    action_digest: str
    standing: str
    state: str
    # The member's signed decision once there is one (its `manifest` claim names the manifest).
    token: str | None = None


class BatchStatus(Schema):
    batch: str
    batch_id: str
    task_id: str
    manifest_digest: str
    submitted_digest: str
    status_url: str
    revoked_at: datetime | None
    members: list[MemberStatus]


def batch_status(batch: Batch) -> dict[str, Any]:
    members = list(batch.members.select_related("proposal").order_by("position"))
    tokens = dict(
        Decision.objects.filter(proposal_id__in=[m.proposal_id for m in members]).values_list(
            "proposal_id", "token"
        )
    )
    return {
        "batch": str(batch.id),
        "batch_id": batch.batch_id,
        "task_id": batch.task_id,
        "manifest_digest": batch.manifest_digest,
        "submitted_digest": batch.submitted_digest,
        "status_url": f"{settings.REVIEWER_ISSUER}/api/v1/batches/{batch.id}",
        "revoked_at": batch.revoked_at,
        "members": [
            {
                "position": m.position,
                "request_id": m.proposal.request_id,
                "proposal_id": str(m.proposal_id),
                "action_digest": m.proposal.action_digest,
                "standing": m.standing,
                "state": m.proposal.state,
                "token": tokens.get(m.proposal_id),
            }
            for m in members
        ],
    }


def _agent(request: HttpRequest) -> Agent:
    """The agent the API token authenticated (approvals/agent_api/api.py `AgentToken`)."""
    agent = getattr(request, "auth", None)
    assert isinstance(agent, Agent)
    return agent


def _audited(
    request: HttpRequest, error: IntakeError, task_id: str = "", request_id: str = ""
) -> IntakeError:
    """A refused batch is a refused intake: recorded (and counted against the agent's intake rate)."""
    record_intake_refusal(_agent(request), error, via="api", task_id=task_id, request_id=request_id)
    return error


@api.post(
    "/batches",
    response={200: BatchStatus, 201: BatchStatus, 413: ErrorBody, 429: ErrorBody, 503: ErrorBody, **ERRORS},
    summary="Announce a batch of approval requests with a fixed manifest (idempotent on task and batch id)",
    url_name="submit_batch",
)
def submit(request: HttpRequest, response: HttpResponse, submission: BatchSubmission) -> Status[Any]:
    try:
        batch, created = submit_announced_batch(_agent(request), submission, via="api")
    except IntakeError as error:
        raise _audited(request, error, submission.task_id, submission.batch_id) from None
    return Status(201 if created else 200, batch_status(batch))


def _agents_batch(request: HttpRequest, batch_pk: str) -> Batch:
    batch = Batch.objects.filter(pk=uuid_or_404(batch_pk), agent=_agent(request)).first()
    if batch is None:
        raise Http404
    return batch


@api.get("/batches/{batch_pk}", response={200: BatchStatus, **ERRORS}, summary="One of this agent's batches")
def status(request: HttpRequest, batch_pk: str) -> dict[str, Any]:
    return batch_status(_agents_batch(request, batch_pk))


@api.post(
    "/batches/{batch_pk}/members",
    response={201: BatchStatus, 409: ErrorBody, 429: ErrorBody, 503: ErrorBody, **ERRORS},
    summary="Add a member before the decision: a new manifest, and the votes on the old one are void",
)
def add(request: HttpRequest, batch_pk: str, body: NewMember) -> Status[Any]:
    batch = _agents_batch(request, batch_pk)
    try:
        batch, _ = add_member(_agent(request), batch.pk, body.member)
    except IntakeError as error:
        raise _audited(request, error, batch.task_id, body.member.request_id) from None
    return Status(201, batch_status(batch))


@api.delete(
    "/batches/{batch_pk}/members/{request_id}",
    response={200: BatchStatus, 409: ErrorBody, **ERRORS},
    summary="Withdraw a member before the decision: a new manifest, and the votes on the old one are void",
)
def withdraw(request: HttpRequest, batch_pk: str, request_id: str) -> dict[str, Any]:
    batch = _agents_batch(request, batch_pk)
    return batch_status(withdraw_member(_agent(request), batch.pk, request_id))
