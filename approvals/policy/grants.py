"""The rules of standing grants, as pure functions: what a grant request's terms may be, whether a call
fits a grant and what it leaves, and where the policies forbid grants. The writes are
approvals/services/grants.py.

A grant is asked for as an ordinary approval request whose action is the reserved tool `reviewer.grant`
and whose arguments are the terms (strings, as every argument):

    {"tool_pattern": "payments.refund", "condition": "double(args.amount) <= 50.0",
     "not_before": "2026-12-07T00:00:00Z", "expires_at": "2026-12-14T00:00:00Z",
     "max_uses": "30", "max_amount": {"EUR": "600.00"},
     "principal": "*", "environment": "production", "data_class": "payments"}

Only `tool_pattern`, `expires_at` and `max_uses` are required. `principal` defaults to the request's
own principal ("*": any principal of the agent); `not_before` to the moment it is approved;
`max_amount` to no cap on the total (then `condition` should bound each call). A call fits when it comes
from the grant's agent for its principal, names a tool its pattern matches, satisfies its condition,
states its environment and data class (when the grant names them) in `consequences`, falls in its
window, and its amount in a granted currency fits what is left.
"""

import fnmatch
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from approvals.models import Grant, PolicyVersion
from approvals.policy.evaluation import (
    PolicyConditionError,
    compile_condition,
    condition_matches,
    pattern_matches,
)
from approvals.policy.reserved import GRANT_TOOL

TERM_KEYS = {
    "tool_pattern",
    "condition",
    "not_before",
    "expires_at",
    "max_uses",
    "max_amount",
    "principal",
    "environment",
    "data_class",
}
ANY_PRINCIPAL = "*"
MAX_USES = 10_000
MAX_WINDOW = timedelta(days=90)
CONDITION_MAX = 2000
_AMOUNT = re.compile(r"\d{1,12}(\.\d{1,4})?")
_CURRENCY = re.compile(r"[A-Z]{3}")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")


class GrantTermsError(ValueError):
    """A term that cannot be granted: `key` names the argument."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key
        self.message = message


@dataclass(frozen=True)
class GrantTerms:
    tool_pattern: str
    condition: str
    not_before: datetime | None
    expires_at: datetime
    max_uses: int
    max_amount: dict[str, str] = field(default_factory=dict)
    principal: str = ANY_PRINCIPAL
    environment: str = ""
    data_class: str = ""


def is_grant_request(tool: str) -> bool:
    return tool == GRANT_TOOL


def parse_terms(arguments: dict[str, Any], *, principal_id: str, now: datetime) -> GrantTerms:
    """The terms of a grant request's arguments, or GrantTermsError naming the first wrong one. The
    condition is compiled here: one that does not compile is refused before anyone is asked."""
    unknown = set(arguments) - TERM_KEYS
    if unknown:
        raise GrantTermsError(sorted(unknown)[0], "unknown grant terms: " + ", ".join(sorted(unknown)))
    pattern = arguments.get("tool_pattern")
    if not isinstance(pattern, str) or not pattern.strip() or len(pattern) > 200:
        raise GrantTermsError("tool_pattern", "tool_pattern is a tool name or glob such as payments.refund")
    if not re.search(r"[A-Za-z0-9]", pattern):
        raise GrantTermsError(
            "tool_pattern", "tool_pattern must name a tool: a bare wildcard grants everything"
        )
    if fnmatch.fnmatchcase(GRANT_TOOL, pattern):
        raise GrantTermsError("tool_pattern", "a grant cannot cover asking for grants (reviewer.grant)")
    condition = arguments.get("condition", "")
    if not isinstance(condition, str) or len(condition) > CONDITION_MAX:
        raise GrantTermsError(
            "condition", f"condition is a CEL expression of at most {CONDITION_MAX} characters"
        )
    if condition.strip():
        try:
            compile_condition(condition)
        except ValueError as error:
            raise GrantTermsError("condition", f"the condition does not compile: {error}") from error
    not_before = _time(arguments, "not_before", required=False)
    expires_at = _time(arguments, "expires_at", required=True)
    assert expires_at is not None  # (required)
    start = not_before or now
    if expires_at <= now:
        raise GrantTermsError("expires_at", "expires_at is in the past")
    if expires_at <= start:
        raise GrantTermsError("expires_at", "expires_at must come after not_before")
    if expires_at - start > MAX_WINDOW:
        raise GrantTermsError("expires_at", f"a grant lasts at most {MAX_WINDOW.days} days")
    uses = arguments.get("max_uses")
    if not isinstance(uses, str) or not uses.isdigit() or not 1 <= int(uses) <= MAX_USES:
        raise GrantTermsError("max_uses", f'max_uses is a whole number from 1 to {MAX_USES}, as text ("30")')
    max_amount = arguments.get("max_amount", {})
    if not isinstance(max_amount, dict) or len(max_amount) > 10:
        raise GrantTermsError("max_amount", 'max_amount is an object such as {"EUR": "600.00"}')
    for currency, cap in max_amount.items():
        if not _CURRENCY.fullmatch(currency):
            raise GrantTermsError(
                "max_amount", f"{currency!r} is not a three-letter currency code such as EUR"
            )
        if not isinstance(cap, str) or not _AMOUNT.fullmatch(cap) or Decimal(cap) <= 0:
            raise GrantTermsError("max_amount", f'the {currency} cap is a positive amount as text ("600.00")')
    texts = {}
    for key in ("principal", "environment", "data_class"):
        value = arguments.get(key, "")
        if not isinstance(value, str) or len(value) > 100:
            raise GrantTermsError(key, f"{key} is text of at most 100 characters")
        texts[key] = value.strip()
    return GrantTerms(
        tool_pattern=pattern.strip(),
        condition=condition.strip(),
        not_before=not_before,
        expires_at=expires_at,
        max_uses=int(uses),
        max_amount={currency: str(Decimal(cap)) for currency, cap in sorted(max_amount.items())},
        principal=texts["principal"] or principal_id,
        environment=texts["environment"],
        data_class=texts["data_class"],
    )


def _time(arguments: dict[str, Any], key: str, *, required: bool) -> datetime | None:
    value = arguments.get(key)
    if value in (None, "") and not required:
        return None
    if not isinstance(value, str) or not _TIME.fullmatch(value):
        raise GrantTermsError(key, f"{key} is an RFC 3339 time with a zone, e.g. 2026-12-14T00:00:00Z")
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as error:
        raise GrantTermsError(key, f"{key} is not a valid time: {error}") from error


# ---------------------------------------------------------------------------------------------------
# Where the policies forbid grants (a version's `forbid_grants`)


def forbidding_request(
    versions: list[PolicyVersion], agent_slug: str, tool_pattern: str
) -> PolicyVersion | None:
    """The first active version that forbids grants for tools this pattern may cover (its agent pattern
    matches the agent, and either tool pattern matches the other), whatever its condition: a request is
    refused when any call it could cover might be forbidden."""
    for version in versions:
        if not version.forbid_grants:
            continue
        theirs = version.tool_pattern or "*"
        if fnmatch.fnmatchcase(agent_slug, version.agent_pattern or "*") and (
            fnmatch.fnmatchcase(tool_pattern, theirs) or fnmatch.fnmatchcase(theirs, tool_pattern)
        ):
            return version
    return None


def forbidding_call(versions: list[PolicyVersion], context: dict[str, Any]) -> PolicyVersion | None:
    """The first active version that forbids grants for this call: its patterns match and its condition
    holds or cannot be evaluated (fail closed)."""
    for version in versions:
        if not version.forbid_grants or not pattern_matches(version, context["agent"], context["tool"]):
            continue
        try:
            if condition_matches(version.condition, context):
                return version
        except PolicyConditionError:
            return version
    return None


# ---------------------------------------------------------------------------------------------------
# Whether a call fits a grant


def amount_of(arguments: dict[str, Any]) -> tuple[Decimal | None, str]:
    """The call's amount and currency (None: it states no usable amount)."""
    amount, currency = arguments.get("amount"), arguments.get("currency")
    try:
        figure = Decimal(amount.strip()) if isinstance(amount, str) else None
    except InvalidOperation:
        figure = None
    if figure is not None and (not figure.is_finite() or figure < 0):
        figure = None
    return figure, currency if isinstance(currency, str) else ""


def amount_left(grant: "Grant") -> dict[str, str]:
    return {
        currency: str(Decimal(cap) - Decimal(grant.spent.get(currency, "0")))
        for currency, cap in sorted(grant.max_amount.items())
    }


def applies_to(grant: "Grant", *, principal_id: str, tool: str) -> bool:
    """Whether the grant names this call at all (its principal and tool): only then is a miss worth
    telling the reviewers."""
    principal_ok = grant.principal_id in (ANY_PRINCIPAL, principal_id)
    return principal_ok and fnmatch.fnmatchcase(tool, grant.tool_pattern)


def misfit(grant: "Grant", context: dict[str, Any], now: datetime) -> str | None:
    """Why the call does not fit the grant as it stands (its state, window, condition, scope and what is
    left), in words for the proposal page; None when it fits."""
    if grant.state == grant.State.REVOKED:
        return f"it was revoked: {grant.end_reason}"[:300]
    if grant.state == grant.State.LAPSED or now >= grant.expires_at:
        return f"it expired at {grant.expires_at:%Y-%m-%d %H:%M} UTC"
    if grant.state != grant.State.ACTIVE:
        return f"it is {grant.state}"
    start = grant.not_before or grant.activated_at
    if start is not None and now < start:
        return f"it applies from {start:%Y-%m-%d %H:%M} UTC"
    consequences = context.get("consequences") or {}
    for key, wanted in (("environment", grant.environment), ("data_class", grant.data_class)):
        stated = consequences.get(key)
        if wanted and stated != wanted:
            return f"it covers {key} {wanted!r}; the call states {stated if stated else 'none'!r}"[:300]
    if grant.condition:
        try:
            if not condition_matches(grant.condition, context):
                return "its condition does not hold for these arguments"
        except PolicyConditionError as error:
            return f"its condition could not be evaluated: {error}"[:300]
    if grant.uses >= grant.max_uses:
        return f"all {grant.max_uses} uses are spent"
    if grant.max_amount:
        figure, currency = amount_of(context.get("args") or {})
        if figure is None:
            return "it caps amounts, and the call states no amount"
        if currency not in grant.max_amount:
            granted = ", ".join(sorted(grant.max_amount))
            return f"it caps {granted}; the call is in {currency or 'no currency'}"
        left = Decimal(amount_left(grant)[currency])
        if figure > left:
            return f"{currency} {figure} is more than the {currency} {left} left"
    return None
