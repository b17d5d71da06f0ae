"""The AuthZEN endpoints (docs/authzen.md): the Access Evaluation API and its batch, the Access Request
and Approval Profile's request and task status, and the PDP metadata.

The PEP (an API gateway, a resource) authenticates as a registered Reviewer agent with that agent's
API token (`Authorization: Bearer …`), and sees only that agent's proposals, in its tenant.
"""

import uuid
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from approvals.agent_api.tokens import agent_for_token
from approvals.agent_api.wire import HostileInput, body_too_large, load_json, too_large_message
from approvals.models import Agent
from authzen.access_requests import ProblemError, submit_access_request, task_answer, task_for
from authzen.evaluation import access_request_endpoint, evaluate_access
from authzen.mapping import AuthZenRefusal, merged_evaluations, read_question, require_known_principal
from lib.errors import QuotaExceeded, ServiceError, error_body

EVALUATIONS_MAX = 50
SEMANTICS = ("execute_all", "deny_on_first_deny", "permit_on_first_permit")
CAPABILITY = "urn:openid:authzen:capability:access-request"


def _answer(
    request: HttpRequest, body: dict[str, Any], status: int = 200, content_type: str = "application/json"
) -> JsonResponse:
    response = JsonResponse(body, status=status, content_type=content_type)
    # AuthZEN's request identification: the PEP's X-Request-ID comes back unchanged.
    request_id = request.headers.get("X-Request-ID")
    if request_id is not None:
        response["X-Request-ID"] = request_id[:200]
    return response


def _error_answer(
    request: HttpRequest, status: int, code: str, message: str, field: str | None = None
) -> JsonResponse:
    response = _answer(request, error_body(code, message, field), status)
    if status == 401:
        response["WWW-Authenticate"] = f'Bearer realm="{settings.REVIEWER_ISSUER}"'
    return response


def _service_error(request: HttpRequest, error: ServiceError) -> JsonResponse:
    response = _answer(request, error.as_dict(), error.http_status)
    if isinstance(error, QuotaExceeded):
        response["Retry-After"] = str(error.retry_after)
    return response


def _pep(request: HttpRequest) -> Agent | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return agent_for_token(token.strip())


def _body(request: HttpRequest) -> dict[str, Any]:
    """The JSON object of the request, or a refusal (too large, not JSON, hostile values)."""
    if body_too_large(request):
        raise AuthZenRefusal(413, "too_large", too_large_message())
    if request.content_type != "application/json":
        # AuthZEN's HTTPS binding: requests are application/json, anything else is a bad request.
        raise AuthZenRefusal(400, "bad_content_type", "send the body as Content-Type: application/json")
    try:
        body = load_json(request.body)
    except HostileInput as error:
        raise AuthZenRefusal(400, error.code, error.message, error.field) from error
    except ValueError as error:
        raise AuthZenRefusal(400, "invalid_json", "the body is not valid JSON") from error
    if not isinstance(body, dict):
        raise AuthZenRefusal(400, "invalid", "the body is a JSON object")
    return body


def _unauthorized(request: HttpRequest) -> JsonResponse:
    return _error_answer(
        request, 401, "unauthorized", "send this PEP's agent API token as 'Authorization: Bearer <token>'"
    )


def _one(agent: Agent, item: dict[str, Any]) -> dict[str, Any]:
    question = read_question(item)
    require_known_principal(agent.tenant_id, question)
    return evaluate_access(agent, question)


@csrf_exempt
@require_POST
def evaluation(request: HttpRequest) -> JsonResponse:
    """POST /access/v1/evaluation: one Decision."""
    agent = _pep(request)
    if agent is None:
        return _unauthorized(request)
    try:
        body = _body(request)
    except AuthZenRefusal as refusal:
        return _error_answer(request, refusal.status, refusal.code, refusal.message, refusal.field)
    return evaluation_answer(request, agent, body)


@csrf_exempt
@require_POST
def evaluations(request: HttpRequest) -> JsonResponse:
    """POST /access/v1/evaluations: the Decisions of several evaluations, in order. A problem with one
    evaluation is that evaluation's `false` with the error in its context; a problem with the payload
    is the HTTP error."""
    agent = _pep(request)
    if agent is None:
        return _unauthorized(request)
    try:
        body = _body(request)
        items = merged_evaluations(body, EVALUATIONS_MAX)
        options = body.get("options")
        semantic = (
            options.get("evaluations_semantic", "execute_all") if isinstance(options, dict) else "execute_all"
        )
        if semantic not in SEMANTICS:
            raise AuthZenRefusal(
                400,
                "invalid",
                f"evaluations_semantic is one of {', '.join(SEMANTICS)}",
                "options.evaluations_semantic",
            )
    except AuthZenRefusal as refusal:
        return _error_answer(request, refusal.status, refusal.code, refusal.message, refusal.field)
    if "evaluations" not in body or not body["evaluations"]:
        # Without an evaluations array the request is a single evaluation (AuthZEN 1.0).
        return evaluation_answer(request, agent, items[0])
    decisions = []
    for item in items:
        try:
            decision = _one(agent, item)
        except AuthZenRefusal as refusal:
            decision = {
                "decision": False,
                "context": {"error": {"status": refusal.status, "message": refusal.message}},
            }
        except ServiceError as error:
            decision = {
                "decision": False,
                "context": {"error": {"status": error.http_status, "message": str(error)}},
            }
        decisions.append(decision)
        if (semantic == "deny_on_first_deny" and not decision["decision"]) or (
            semantic == "permit_on_first_permit" and decision["decision"]
        ):
            break  # the rest is not evaluated: nothing is taken in for it
    return _answer(request, {"evaluations": decisions})


def evaluation_answer(request: HttpRequest, agent: Agent, item: dict[str, Any]) -> JsonResponse:
    try:
        return _answer(request, _one(agent, item))
    except AuthZenRefusal as refusal:
        return _error_answer(request, refusal.status, refusal.code, refusal.message, refusal.field)
    except ServiceError as error:
        return _service_error(request, error)


def _problem(request: HttpRequest, error: ProblemError) -> JsonResponse:
    return _answer(request, error.as_dict(), error.status, content_type="application/problem+json")


@csrf_exempt
@require_POST
def access_request(request: HttpRequest) -> JsonResponse:
    """POST /access/v1/requests: a requestable denial submitted; answers the task handle."""
    agent = _pep(request)
    if agent is None:
        return _unauthorized(request)
    try:
        body = _body(request)
        question = read_question(body)
        require_known_principal(agent.tenant_id, question)
        proposal, _ = submit_access_request(agent, question, body)
    except ProblemError as error:
        return _problem(request, error)
    except AuthZenRefusal as refusal:
        return _error_answer(request, refusal.status, refusal.code, refusal.message, refusal.field)
    except ServiceError as error:
        return _service_error(request, error)
    answer = task_answer(proposal)
    # The profile: 201 with the result when the request is settled at once (policy changed since the
    # evaluation), 202 while people decide.
    response = _answer(request, answer, 202 if answer["task"]["status"] == "pending" else 201)
    response["Location"] = answer["task"]["status_endpoint"]
    return response


@require_GET
def task_status(request: HttpRequest, task_id: str) -> JsonResponse:
    """GET /access/v1/requests/<id>: the task's status and, once approved, its result."""
    agent = _pep(request)
    if agent is None:
        return _unauthorized(request)
    try:
        try:
            proposal_id = uuid.UUID(task_id)
        except ValueError:
            raise ProblemError(404, "unknown_task", "no such task for this PEP") from None
        return _answer(request, task_answer(task_for(agent, proposal_id)))
    except ProblemError as error:
        return _problem(request, error)


@require_GET
def configuration(request: HttpRequest) -> JsonResponse:
    """GET /.well-known/authzen-configuration: the PDP metadata (AuthZEN 1.0 and the profile)."""
    issuer = settings.REVIEWER_ISSUER
    return _answer(
        request,
        {
            "policy_decision_point": issuer,
            "access_evaluation_endpoint": f"{issuer}/access/v1/evaluation",
            "access_evaluations_endpoint": f"{issuer}/access/v1/evaluations",
            "access_request_endpoint": access_request_endpoint(),
            "capabilities": [CAPABILITY],
        },
    )
