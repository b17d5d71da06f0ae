"""The one home of the mapping from RFC 9396 `authorization_details` to a Reviewer proposal.

TAC (a resource's challenge) and CIBA (a client's back-channel request) both describe the action as
authorization details; both become the same approval request, so policies, risk classes, the page and
the digest treat them as any tool call:

- exactly one detail object (one operation, one proposal);
- its `type` is one the resource registered; the tool policies see is the type's mapped tool;
- the action is `{"tool": <tool>, "arguments": <the detail verbatim, type included>}`: its RFC 8785
  digest binds the canonical form of the detail, and the decision token's `authorization_details` is
  `[arguments]`;
- numbers are refused, as everywhere in Reviewer (amounts are strings);
- the consequence shown to reviewers states the amount and currency the detail carries (top-level
  `amount`/`currency`, or RFC 9396's `instructedAmount`).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import rfc8785
from django.conf import settings
from pydantic import ValidationError

from approvals.canonical import action_digest
from approvals.schemas import ApprovalRequest, EvidenceItem, Principal, first_number, first_problem
from oauth.errors import OAuthError

TYPE_NAME_MAX = 100


@dataclass(frozen=True)
class Operation:
    """An operation described by one authorization detail, resolved to a tool."""

    detail: dict[str, Any]
    tool: str

    @property
    def action(self) -> dict[str, Any]:
        return {"tool": self.tool, "arguments": self.detail}

    @property
    def authorization_details(self) -> list[dict[str, Any]]:
        return [self.detail]


def invalid_details(description: str) -> OAuthError:
    return OAuthError("invalid_authorization_details", description)


def operation_for(details: object, types: Mapping[str, str]) -> Operation:
    """The one operation `details` describes, with the tool its type maps to; refuses
    (`invalid_authorization_details`) anything else."""
    if not isinstance(details, list) or len(details) != 1 or not isinstance(details[0], dict):
        raise invalid_details("authorization_details must be an array of exactly one object")
    detail = details[0]
    kind = detail.get("type")
    if not isinstance(kind, str) or not kind or len(kind) > TYPE_NAME_MAX:
        raise invalid_details("authorization_details[0].type must be a non-empty string")
    tool = types.get(kind)
    if not tool:
        raise invalid_details(f"the type {kind[:TYPE_NAME_MAX]!r} is not registered for this resource")
    where = first_number(detail)
    if where is not None:
        raise invalid_details(f"authorization_details[0].{where} is a JSON number; send numbers as strings")
    try:
        size = len(rfc8785.dumps(detail))
    except rfc8785.CanonicalizationError as error:
        raise invalid_details(f"authorization_details cannot be canonicalized: {error}") from error
    if size > settings.PROPOSAL_MAX_BYTES:
        raise invalid_details(
            f"authorization_details take {size} bytes; the limit is {settings.PROPOSAL_MAX_BYTES}"
        )
    return Operation(detail=detail, tool=tool)


def consequences_of(detail: dict[str, Any]) -> dict[str, Any]:
    """The amount and currency the detail states, for the page's consequence (strings only)."""
    instructed = detail.get("instructedAmount")
    money: dict[str, Any] = instructed if isinstance(instructed, dict) else detail
    facts = {}
    for key in ("amount", "currency"):
        value = money.get(key)
        if isinstance(value, str) and value:
            facts[key] = value
    return facts


def approval_request(
    operation: Operation,
    *,
    request_id: str,
    summary: str,
    principal: str,
    extra_consequences: Mapping[str, str] | None = None,
    evidence_url: str = "",
) -> ApprovalRequest:
    """The approval request intake takes in for this operation (approvals.schemas.ApprovalRequest).
    `evidence_url`: the resource's page about the transaction (TAC's `reason_uri`), listed as evidence."""
    consequences = consequences_of(operation.detail) | dict(extra_consequences or {})
    evidence = (
        [EvidenceItem(title="The resource's page about this operation", url=evidence_url)]
        if evidence_url
        else []
    )
    action = operation.action
    try:
        return ApprovalRequest(
            request_id=request_id,
            summary=(summary.strip() or f"{operation.tool} ({operation.detail['type']})")[:500],
            action=action,
            action_digest=action_digest(action),
            principal=Principal(id=principal[:200]),
            consequences=consequences,
            evidence=evidence,
        )
    except ValidationError as error:
        _, message = first_problem(error.errors())
        raise invalid_details(message) from error
