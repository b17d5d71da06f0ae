"""The A2A push webhook, /a2a/push/<agent slug>/ (DESIGN.md "A2A contract" step 2).

The agent's A2A server POSTs every task event here (`MessageToDict(StreamResponse)`), with the push
token it was given in `X-A2A-Notification-Token`. An approval request becomes a proposal (idempotent:
the same request by push and by REST is one proposal), a parked batch a batch (as `POST /api/v1/batches`
takes it); a terminal task state settles an execution; anything else is acknowledged and ignored.
Nothing is stored for an unauthenticated push.
"""

import hmac
import logging

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from approvals.a2a.push import PushError, parse_push, submit
from approvals.agent_api.api import intake_token, receipt
from approvals.agent_api.batches import batch_status
from approvals.agent_api.wire import HostileInput, body_too_large, load_json, too_large_message
from approvals.models import Agent
from approvals.services.batches import submit_announced_batch
from approvals.services.intake import record_intake_refusal
from approvals.services.reconcile import apply_task_state
from lib import tracing
from lib.errors import IntakeError, QuotaExceeded, ServiceError, error_body
from lib.tokens import hash_token

log = logging.getLogger(__name__)

# Compared against when the slug is unknown, so both refusals take the same time.
_NO_AGENT_HASH = hash_token("no such agent")


def _error(status: int, code: str, message: str, field: str | None = None) -> JsonResponse:
    return JsonResponse(error_body(code, message, field), status=status)


def _authenticated_agent(slug: str, token: str) -> Agent | None:
    agent = Agent.objects.select_related("tenant").filter(slug=slug).first()
    expected = agent.push_token_hash if agent else _NO_AGENT_HASH
    matches = hmac.compare_digest(hash_token(token), expected)
    return agent if agent is not None and matches and token else None


def _refused(agent: Agent, error: HostileInput | PushError) -> JsonResponse:
    """400 for a push body intake refuses; an authenticated agent's refused request is audited, and past
    its intake rate answered 429 as a valid one would be."""
    log.info("push from %s refused: %s %s", agent.slug, error.code, error.message)
    try:
        record_intake_refusal(agent, error, via="push")
    except QuotaExceeded as throttled:
        return _service_error(throttled)
    return JsonResponse(error.as_dict(), status=400)


def _service_error(error: ServiceError) -> JsonResponse:
    response = JsonResponse(error.as_dict(), status=error.http_status)
    if isinstance(error, QuotaExceeded):
        response["Retry-After"] = str(error.retry_after)
    return response


@csrf_exempt
@require_POST
def push(request, agent_slug):
    agent = _authenticated_agent(agent_slug, request.headers.get("X-A2A-Notification-Token", ""))
    if agent is None:
        # One answer for an unknown agent and a wrong token: a caller learns nothing about which agents exist.
        return _error(401, "unauthorized", "unknown agent or wrong X-A2A-Notification-Token")
    if body_too_large(request):
        return _error(413, "too_large", too_large_message())
    try:
        # NaN, huge integers, NUL and deep nesting are refused here, anywhere in the body (metadata too).
        body = load_json(request.body)
        event = parse_push(body, agent.approval_extension)
    except (HostileInput, PushError) as error:
        return _refused(agent, error)
    except ValueError:
        return _error(400, "invalid_json", "the body is not valid JSON")

    if event is not None and event.submission is not None:
        try:
            # The agent's span that parked the task (its metadata) is the intake's parent; else the
            # push request's own traceparent header.
            traceparent = event.traceparent or tracing.from_headers(request.headers)
            proposal, created = submit(agent, event.submission, via="push", traceparent=traceparent)
        except ServiceError as error:
            log.info("push from %s refused: %s %s", agent.slug, error.code, error.message)
            return _service_error(error)
        return JsonResponse(
            receipt(proposal, intake_token(proposal, created)), status=201 if created else 200
        )
    if event is not None and event.batch is not None:
        parked = event.batch
        try:
            batch, created = submit_announced_batch(agent, parked, via="push")
        except IntakeError as error:
            # As over REST: a refused batch is a refused intake, recorded and counted.
            log.info("push from %s refused: %s %s", agent.slug, error.code, error.message)
            try:
                record_intake_refusal(
                    agent, error, via="push", task_id=parked.task_id, request_id=parked.batch_id
                )
            except QuotaExceeded as throttled:
                return _service_error(throttled)
            return _service_error(error)
        except ServiceError as error:
            return _service_error(error)
        return JsonResponse(batch_status(batch), status=201 if created else 200)
    if event is not None and event.is_terminal:
        changed = apply_task_state(agent, event.task_id, event.state, detail=event.detail)
        return JsonResponse({"task_state": event.state, "changed": [str(p.id) for p in changed]})
    return JsonResponse({"ignored": "neither an approval request nor a final task state"})
