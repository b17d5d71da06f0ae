from django import template

from audit.metrics import format_duration

register = template.Library()


@register.filter
def percent(value) -> str:
    return "–" if value is None else f"{value:.1%}"


@register.filter
def rate(group, outcome: str) -> str:
    return percent(group.rate(outcome))


@register.filter
def duration(seconds) -> str:
    return format_duration(seconds)
