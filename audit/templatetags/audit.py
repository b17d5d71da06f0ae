import json

from django import template

from audit.metrics.queue import format_duration

register = template.Library()


@register.filter
def as_json(value) -> str:
    """Structured data as JSON (what the agent sent and the exports hold), never a Python repr."""
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, default=str)


@register.filter
def percent(value) -> str:
    return "–" if value is None else f"{value:.1%}"


@register.filter
def rate(group, outcome: str) -> str:
    return percent(group.rate(outcome))


@register.filter
def duration(seconds) -> str:
    return format_duration(seconds)
