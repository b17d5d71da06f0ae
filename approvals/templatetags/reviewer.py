"""Status shown as text and a shape, never by colour alone."""

from django import template

from approvals.models.risk import Risk
from approvals.states import State

register = template.Library()

# state -> (symbol, words, tone). The tone only picks a colour; the symbol and words carry the meaning.
STATES = {
    State.PROPOSED: ("…", "Proposed", "neutral"),
    State.ALLOWED: ("✓", "Allowed by policy", "good"),
    State.DENIED: ("⛔", "Denied by policy", "bad"),
    State.AWAITING_REVIEW: ("◷", "Waiting for review", "wait"),
    State.INFO_REQUESTED: ("?", "Information requested", "wait"),
    State.APPROVED: ("✓", "Approved", "good"),
    State.EXECUTING: ("▶", "Executing", "wait"),
    State.UNKNOWN: ("‽", "Outcome unknown", "bad"),
    State.REJECTED: ("✕", "Rejected", "bad"),
    State.EXPIRED: ("⌛", "Expired", "neutral"),
    State.REVOKED: ("⊘", "Revoked", "bad"),
    State.CANCELLED: ("⊘", "Cancelled", "neutral"),
    State.SUPERSEDED: ("↻", "Superseded", "neutral"),
    State.SUCCEEDED: ("✓", "Succeeded", "good"),
    State.FAILED: ("✕", "Failed", "bad"),
}

RISKS = {
    Risk.HIGH: ("▲", "High risk", "bad"),
    Risk.MEDIUM: ("◆", "Medium risk", "wait"),
    Risk.LOW: ("▽", "Low risk", "good"),
}


@register.inclusion_tag("approvals/_badge.html")
def state_badge(state):
    symbol, words, tone = STATES.get(state, ("•", str(state), "neutral"))
    return {"symbol": symbol, "words": words, "tone": tone}


@register.inclusion_tag("approvals/_badge.html")
def risk_badge(risk):
    symbol, words, tone = RISKS.get(risk, ("○", "Risk not rated", "neutral"))
    return {"symbol": symbol, "words": words, "tone": tone}


@register.filter
def described(field, hint=""):
    """Render a form field tied to its hint and error text, for screen readers (aria-describedby)."""
    ids = ([f"{field.auto_id}_hint"] if hint else []) + ([f"{field.auto_id}_error"] if field.errors else [])
    attrs = {"aria-describedby": " ".join(ids)} if ids else {}
    if field.errors:
        attrs["aria-invalid"] = "true"
    return field.as_widget(attrs=attrs)
