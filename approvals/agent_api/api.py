"""The agent-facing REST API, /api/v1/ (DESIGN.md "A2A contract"; OpenAPI at /api/v1/openapi.json).

Every call authenticates as one registered agent with `Authorization: Bearer <agent API token>`, and
sees only that agent's proposals and decisions. Every error, whatever raised it, has one shape:
`{"error": {"code", "message", "field"}}`, with `field` the dotted path of the offending input.
"""

import uuid
from datetime import datetime

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpResponse
from ninja import NinjaAPI, Schema, Status
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser
from ninja.security import HttpBearer

from approvals.a2a.push import submit
from approvals.agent_api.tokens import agent_for_token
from approvals.agent_api.wire import HostileInput, body_too_large, load_json, too_large_message
from approvals.models import Agent, Decision, Proposal
from approvals.schemas import ConsumeBody, OutcomeBody, ProposalSubmission, first_problem
from approvals.services.decisions import consume_decision, record_outcome
from approvals.services.intake import record_intake_refusal
from approvals.states import State
from lib import tracing
from lib.errors import IntakeError, QuotaExceeded, ServiceError, error_body


class BodyTooLarge(Exception):
    pass


class CappedJSONParser(Parser):
    """Refuses an oversized body before parsing it (first by its declared length, unread)."""

    def parse_body(self, request):
        if body_too_large(request):
            raise BodyTooLarge()
        return load_json(request.body)  # refuses NaN, huge integers, NUL and deep nesting (wire.py)


class AgentToken(HttpBearer):
    def __call__(self, request):
        # ninja's own version logs the whole header on a wrong scheme in DEBUG: a token in the log.
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return self.authenticate(request, token.strip())

    def authenticate(self, request, token):
        return agent_for_token(token)  # read on every request, no cache (tokens.py)


api = NinjaAPI(
    title="Reviewer agent API",
    version="1",
    description="What an A2A agent calls: announce an approval request, read its status, consume a "
    "decision right before acting, report the outcome.",
    urls_namespace="approvals:api",  # mounted inside the approvals URLconf
    auth=AgentToken(),
    parser=CappedJSONParser(),
    docs_url=None,  # ninja's docs page loads Swagger UI from a CDN; the OpenAPI document is enough
)


# ---------------------------------------------------------------------------------------------------
# Shapes


class ErrorDetail(Schema):
    code: str
    message: str
    field: str | None = None


class ErrorBody(Schema):
    error: ErrorDetail


class ProposalReceipt(Schema):
    proposal_id: str
    state: str
    status_url: str
    # The signed decision when there is one: at intake, when policy allowed or denied the request (so an
    # allowed call is submit, verify, consume: no pull); null while people decide.
    token: str | None = None


class DecisionStatus(Schema):
    jti: str
    decision: str
    reason: str
    rev: int
    consume: bool
    expires_at: datetime
    consumed_at: datetime | None
    revoked_at: datetime | None


class ProposalStatus(ProposalReceipt):
    task_id: str
    context_id: str
    request_id: str
    action_digest: str
    rev: int
    expires_at: datetime
    decided_at: datetime | None
    settled_at: datetime | None
    transaction_id: str
    decision: DecisionStatus | None


class StateBody(Schema):
    state: str


ERRORS = {400: ErrorBody, 401: ErrorBody, 404: ErrorBody}


def _error_response(request, status: int, code: str, message: str, field: str | None = None):
    return api.create_response(request, error_body(code, message, field), status=status)


@api.exception_handler(ServiceError)
def service_error(request, exc: ServiceError):
    response = api.create_response(request, exc.as_dict(), status=exc.http_status)
    if isinstance(exc, QuotaExceeded):
        response["Retry-After"] = str(exc.retry_after)
    return response


@api.exception_handler(ValidationError)
def validation_error(request, exc: ValidationError):
    """ninja answers 422 with pydantic's list; agents get the one shape: 400, the first problem."""
    # ("body", "<parameter>", ...) for a body, ("path", "<name>") for a path parameter
    body = bool(exc.errors) and list(exc.errors[0].get("loc", ()))[:1] == ["body"]
    field, message = first_problem(exc.errors, skip=2 if body else 1)
    return _refuse(request, "invalid", message, field)


def _refuse(request, code: str, message: str, field: str | None):
    """400; a refused announcement of an authenticated agent is audited as an intake refusal, and past
    the agent's intake rate answered 429 as a valid one would be."""
    match = getattr(request, "resolver_match", None)
    if isinstance(getattr(request, "auth", None), Agent) and match and match.url_name == "submit_proposal":
        try:
            record_intake_refusal(request.auth, IntakeError(code, message, field), via="api")
        except QuotaExceeded as throttled:
            return service_error(request, throttled)
    return _error_response(request, 400, code, message, field)


@api.exception_handler(HttpError)
def http_error(request, exc: HttpError):
    if isinstance(exc.__cause__, BodyTooLarge | RequestDataTooBig):
        return too_large(request, exc)
    if isinstance(exc, AuthenticationError):
        return _error_response(
            request, 401, "unauthorized", "send this agent's API token as 'Authorization: Bearer <token>'"
        )
    if isinstance(exc.__cause__, HostileInput):
        return _refuse(request, exc.__cause__.code, exc.__cause__.message, exc.__cause__.field)
    if exc.status_code == 400:  # ninja's "Cannot parse request body"
        return _error_response(request, 400, "invalid_json", "the body is not valid JSON")
    return _error_response(request, exc.status_code, f"http_{exc.status_code}", str(exc))


@api.exception_handler(RequestDataTooBig)
def too_large(request, exc):
    return _error_response(request, 413, "too_large", too_large_message())


@api.exception_handler(Http404)
def not_found(request, exc):
    return _error_response(request, 404, "not_found", "not found")


# ---------------------------------------------------------------------------------------------------
# Endpoints


def receipt(proposal: Proposal, token: str | None = None) -> dict:
    return {
        "proposal_id": str(proposal.id),
        "state": proposal.state,
        "status_url": f"{settings.REVIEWER_ISSUER}/api/v1/proposals/{proposal.id}",
        "token": token,
    }


# The states an intake answer carries the token in: decided there (allowed, denied), or an approval
# consumed there for the agent (executing).
ANSWERED_WITH_TOKEN = frozenset({State.ALLOWED, State.DENIED, State.EXECUTING})
# RFC 7240: the agent acts on a decision in the intake answer, so its A2A continuation can wait.
DECISION_IN_ANSWER = "decision-in-answer"
# RFC 7240: an approval policy makes at intake is consumed for the agent in the same request (the
# answer's state is then `executing`), so an allowed call needs no consume request. A preference, not a
# body field: a Reviewer that does not know it ignores it (a body field would be refused as unknown),
# and Preference-Applied tells the agent whether it was honoured or whether it still consumes.
CONSUME = "consume"


def prefers(request, preference: str) -> bool:
    """Whether the request's Prefer header (RFC 7240: comma-separated, each `token[=value][;params]`)
    names `preference`."""
    named = (
        item.split(";")[0].split("=")[0].strip().lower()
        for item in request.headers.get("Prefer", "").split(",")
    )
    return preference in named


def intake_token(proposal: Proposal, created: bool) -> str | None:
    """The decision's token for the intake answer. A proposal just created and decided by policy holds
    the decision it was stored with (no read); one waiting for people has none (no read either); a
    replay reads the decision made since, if any."""
    if created:
        # Intake stored the decision with the proposal (services.intake), so it is already at hand.
        return proposal.decision.token if proposal.state in ANSWERED_WITH_TOKEN else None
    return Decision.objects.filter(proposal=proposal).values_list("token", flat=True).first()


def uuid_or_404(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise Http404 from None


@api.post(
    "/proposals",
    response={
        200: ProposalReceipt,
        201: ProposalReceipt,
        413: ErrorBody,
        429: ErrorBody,
        503: ErrorBody,
        **ERRORS,
    },
    summary="Announce an approval request (idempotent on task_id and request_id)",
    description="429 (`rate_limited`, `tenant_rate_limited`, `too_many_open`, `tenant_too_many_open`) "
    "with Retry-After when the agent or its tenant is over an intake quota: nothing was stored; send the "
    "same request again after Retry-After seconds.",
    url_name="submit_proposal",
)
def submit_proposal(request, response: HttpResponse, submission: ProposalSubmission):
    in_answer = prefers(request, DECISION_IN_ANSWER)
    consume = prefers(request, CONSUME)
    proposal, created = submit(
        request.auth,
        submission,
        via="api",
        decision_in_answer=in_answer,
        consume=consume,
        traceparent=tracing.from_headers(request.headers),
    )
    applied = []
    decided_here = created and proposal.state in ANSWERED_WITH_TOKEN
    if in_answer and decided_here:
        applied.append(DECISION_IN_ANSWER)  # its continuation was held (or, consumed, never queued)
    if consume and created and proposal.state == State.EXECUTING:
        applied.append(CONSUME)  # only the request that consumed says so: a replay never does
    if applied:
        response["Preference-Applied"] = ", ".join(applied)
    return Status(201 if created else 200, receipt(proposal, intake_token(proposal, created)))


@api.get(
    "/proposals/{proposal_id}",
    response={200: ProposalStatus, **ERRORS},
    summary="The state of one of this agent's proposals",
)
def proposal_status(request, proposal_id: str):
    proposal = (
        Proposal.objects.select_related("decision")
        .filter(pk=uuid_or_404(proposal_id), agent=request.auth)
        .first()
    )
    if proposal is None:
        raise Http404
    decision = getattr(proposal, "decision", None)
    return {
        **receipt(proposal, decision.token if decision is not None else None),
        "task_id": proposal.task_id,
        "context_id": proposal.context_id,
        "request_id": proposal.request_id,
        "action_digest": proposal.action_digest,
        "rev": proposal.rev,
        "expires_at": proposal.expires_at,
        "decided_at": proposal.decided_at,
        "settled_at": proposal.settled_at,
        "transaction_id": proposal.transaction_id,
        "decision": None
        if decision is None
        else {
            "jti": str(decision.jti),
            "decision": decision.kind,
            "reason": decision.reason,
            "rev": decision.rev,
            "consume": decision.consume_required,
            "expires_at": decision.expires_at,
            "consumed_at": decision.consumed_at,
            "revoked_at": decision.revoked_at,
        },
    }


@api.post(
    "/decisions/{jti}/consume",
    response={200: StateBody, 409: ErrorBody, **ERRORS},
    summary="Move an approved decision to executing, right before the side effect",
)
def consume(request, jti: str, body: ConsumeBody):
    incoming = tracing.from_headers(request.headers)
    with tracing.later_span("reviewer.consume", incoming=incoming) as span:
        span.set_attribute("reviewer.decision.jti", jti)
        proposal = consume_decision(request.auth, uuid_or_404(jti), rev=body.rev)
        tracing.set_parent(span, lambda: proposal.trace_parent)
        span.set_attributes(
            {"reviewer.proposal.id": str(proposal.id), "reviewer.proposal.state": proposal.state}
        )
    return {"state": proposal.state}


@api.post(
    "/decisions/{jti}/outcome",
    response={200: StateBody, 409: ErrorBody, **ERRORS},
    summary="Report what happened: succeeded, failed or unknown",
)
def outcome(request, jti: str, body: OutcomeBody):
    incoming = tracing.from_headers(request.headers)
    with tracing.later_span("reviewer.outcome", incoming=incoming) as span:
        span.set_attributes({"reviewer.decision.jti": jti, "reviewer.outcome.status": body.status})
        proposal = record_outcome(
            request.auth,
            uuid_or_404(jti),
            status=body.status,
            transaction_id=body.transaction_id or "",
            detail=body.detail or "",
            via="api",
        )
        tracing.set_parent(span, lambda: proposal.trace_parent)
        span.set_attributes(
            {"reviewer.proposal.id": str(proposal.id), "reviewer.proposal.state": proposal.state}
        )
    return {"state": proposal.state}
