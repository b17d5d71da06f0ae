"""An AuthZEN access evaluation read as a Reviewer approval request (docs/authzen.md, "The mapping").

subject.id → the principal (a member of the PEP's tenant with that principal id), action.name → the
tool, resource type and id → the action's target, action.properties → its arguments (strings: numbers
are refused as on every path), context.summary and context.consequences → what reviewers read and
policy sees. The rest of context (time, IP address, …) is the environment: read, never bound, so the
same operation evaluated again later is the same action with the same digest.
"""

from dataclasses import dataclass
from typing import Any

import rfc8785

from approvals.canonical import action_digest
from approvals.schemas import first_number
from tenants.models import TenantMembership

ENTITIES = ("subject", "action", "resource", "context")
# The member of the re-evaluation's context the Access Request and Approval Profile names.
APPROVAL_CONTEXT_KEY = "authzen_access_request_approval"
SUMMARY_MAX = 500


class AuthZenRefusal(Exception):
    """A request Reviewer cannot evaluate: the HTTP status AuthZEN's error table names, and why."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field


@dataclass(frozen=True)
class AccessQuestion:
    """One evaluation, as Reviewer reads it."""

    principal_id: str
    principal_display: str
    action: dict[str, Any]
    digest: str
    summary: str
    consequences: dict[str, Any]
    context: dict[str, Any]
    approval_id: str  # "" unless the context carries an approval reference (re-evaluation)


def _object(value: Any, field: str, *, required: bool = True) -> dict[str, Any]:
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise AuthZenRefusal(400, "invalid", f"{field} must be an object", field)
    return value


def _string(entity: dict[str, Any], key: str, field: str, *, limit: int = 200) -> str:
    value = entity.get(key)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise AuthZenRefusal(
            400,
            "invalid",
            f"{field}.{key} must be a non-empty string of at most {limit} characters",
            f"{field}.{key}",
        )
    return value


def read_question(body: dict[str, Any]) -> AccessQuestion:
    """The evaluation in `body` (an Access Evaluation request: subject, action, resource, context).
    Unknown members are ignored, as AuthZEN's JSON binding requires. Raises AuthZenRefusal."""
    subject = _object(body.get("subject"), "subject")
    action = _object(body.get("action"), "action")
    resource = _object(body.get("resource"), "resource")
    context = _object(body.get("context"), "context", required=False)
    _string(subject, "type", "subject")
    principal_id = _string(subject, "id", "subject")
    tool = _string(action, "name", "action")
    target = {"type": _string(resource, "type", "resource"), "id": _string(resource, "id", "resource")}
    arguments = _object(action.get("properties"), "action.properties", required=False)
    number = first_number(arguments)
    if number is not None:
        raise AuthZenRefusal(
            400,
            "invalid",
            f"action.properties.{number} is a JSON number; Reviewer binds amounts as strings",
            f"action.properties.{number}",
        )
    reviewer_action = {"tool": tool, "target": target, "arguments": arguments}
    try:
        digest = action_digest(reviewer_action)
    except rfc8785.CanonicalizationError as error:
        raise AuthZenRefusal(400, "bad_action", f"the action cannot be canonicalized: {error}") from error
    summary = context.get("summary")
    if summary is not None and (not isinstance(summary, str) or not summary or len(summary) > SUMMARY_MAX):
        raise AuthZenRefusal(
            400,
            "invalid",
            f"context.summary must be a string of 1 to {SUMMARY_MAX} characters",
            "context.summary",
        )
    approval = _object(context.get(APPROVAL_CONTEXT_KEY), f"context.{APPROVAL_CONTEXT_KEY}", required=False)
    approval_id = approval.get("approval_id", "") if approval else ""
    if not isinstance(approval_id, str) or len(approval_id) > 200:
        raise AuthZenRefusal(
            400, "invalid", "the approval_id is a string", f"context.{APPROVAL_CONTEXT_KEY}.approval_id"
        )
    properties = subject.get("properties")
    display = properties.get("name", "") if isinstance(properties, dict) else ""
    return AccessQuestion(
        principal_id=principal_id,
        principal_display=display[:200] if isinstance(display, str) else "",
        action=reviewer_action,
        digest=digest,
        summary=summary or f"{tool} on {target['type']} {target['id']}"[:SUMMARY_MAX],
        consequences=_object(context.get("consequences"), "context.consequences", required=False),
        context=context,
        approval_id=approval_id,
    )


def require_known_principal(tenant_id: int, question: AccessQuestion) -> None:
    """The subject must be a principal of the PEP's own tenant: a gateway names whom it authenticated,
    and Reviewer evaluates only for the people it knows. Another tenant's person and a name nobody has
    get the same answer, so the refusal tells nothing of other tenants."""
    known = TenantMembership.objects.filter(
        tenant_id=tenant_id, principal_id=question.principal_id, user__is_active=True
    ).exists()
    if not known:
        raise AuthZenRefusal(
            403, "unknown_subject", "the subject is not a principal of this PEP's tenant", "subject.id"
        )


def merged_evaluations(body: dict[str, Any], limit: int) -> list[dict[str, Any]]:
    """The Access Evaluations request's items with the top-level defaults filled in: an item's own
    subject, action, resource or context replaces the default whole (AuthZEN 1.0, "Default values")."""
    items = body.get("evaluations")
    if items is None or items == []:
        return [{key: body[key] for key in ENTITIES if key in body}]
    if not isinstance(items, list):
        raise AuthZenRefusal(400, "invalid", "evaluations must be an array", "evaluations")
    if len(items) > limit:
        raise AuthZenRefusal(400, "invalid", f"at most {limit} evaluations in one request", "evaluations")
    merged = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise AuthZenRefusal(400, "invalid", "each evaluation is an object", f"evaluations.{index}")
        merged.append({key: item[key] if key in item else body.get(key) for key in ENTITIES})
    return merged
