"""Status shown as text and a shape, never by colour alone."""

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

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


def _badge(symbol: str, words: str, tone: str) -> SafeString:
    # Built here rather than by an included template: the lists show one or two on every row. The
    # newline ends it as it ended the template, so pages render byte for byte as before.
    return format_html(
        '<span class="badge badge--{}"><span class="badge__symbol" aria-hidden="true">{}</span> {}</span>\n',
        tone,
        symbol,
        words,
    )


@register.simple_tag
def state_badge(state) -> SafeString:
    symbol, words, tone = STATES.get(state, ("•", str(state), "neutral"))
    return _badge(symbol, words, tone)


@register.simple_tag
def risk_badge(risk) -> SafeString:
    symbol, words, tone = RISKS.get(risk, ("○", "Risk not rated", "neutral"))
    return _badge(symbol, words, tone)


@register.filter
def described(field, hint=""):
    """Render a form field tied to its hint and error text, for screen readers (aria-describedby)."""
    ids = ([f"{field.auto_id}_hint"] if hint else []) + ([f"{field.auto_id}_error"] if field.errors else [])
    attrs = {"aria-describedby": " ".join(ids)} if ids else {}
    if field.errors:
        attrs["aria-invalid"] = "true"
    return field.as_widget(attrs=attrs)
