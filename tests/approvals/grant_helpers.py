"""Standing grants for the tests: the terms of "refunds of at most EUR 50, 30 uses, EUR 600 in total,
this week", asked for by the agent and approved by two people of finance, as in production."""

import uuid
from datetime import UTC, datetime, timedelta

from approvals.models import Grant
from approvals.policy.reserved import GRANT_TOOL
from tests import factories


def refund_grant_terms(**overrides) -> dict:
    now = datetime.now(UTC)
    terms = {
        "tool_pattern": "payments.refund",
        "condition": "double(args.amount) <= 50.0",
        "expires_at": (now + timedelta(days=7)).isoformat().replace("+00:00", "Z"),
        "max_uses": "30",
        "max_amount": {"EUR": "600.00"},
    }
    terms.update(overrides)
    return {key: value for key, value in terms.items() if value is not None}


def grant_action(**overrides) -> dict:
    return {"tool": GRANT_TOOL, "arguments": refund_grant_terms(**overrides)}


def grant_policy(tenant):
    """Grants need two approvals of finance."""
    return factories.make_policy(
        tenant, "grants", tool_pattern=GRANT_TOOL, thresholds=[{"group": "finance", "count": 2}]
    )


def request_grant(agent, **overrides):
    """The agent asks for a grant; returns the request's proposal."""
    return factories.submit(agent, action=grant_action(**overrides), summary="Refunds after the outage")


def active_grant(agent, first, second, **overrides) -> Grant:
    """A grant asked for by the agent and approved by two people."""
    proposal = request_grant(agent, **overrides)
    factories.vote(proposal, first)
    factories.vote(proposal, second)
    return Grant.objects.get(proposal=proposal)


def refund(agent, amount="25.00", currency="EUR", order_id=None, **kwargs):
    order = order_id or uuid.uuid4().hex[:12]
    return factories.submit(
        agent, action=factories.refund_action(order_id=order, amount=amount, currency=currency), **kwargs
    )
