"""`{{ value|agent_text }}`: the one way a template shows text an agent wrote.

It escapes the value, isolates it in `<bdi>` (so it cannot reorder the page's own words around it),
shows every hidden or text-direction character as a marked badge ("U+202E") instead of letting it act,
and appends a visible warning for hidden characters and for words that mix scripts (look-alikes).
The rules live in lib/agent_text.py, which the PDF and the evidence packet use too.
"""

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from lib import agent_text as rules

register = template.Library()


def agent_text_html(value) -> SafeString:
    """The HTML of an agent-written value (also used by the admin's display methods)."""
    text = "" if value is None else str(value)
    body = format_html_join(
        "",
        "{}",
        (
            (
                format_html(
                    '<span class="agent-text__char" title="{} (hidden character)">{}</span>', p.name, p.code
                )
                if p.hidden
                else p.text,
            )
            for p in rules.pieces(text)
        ),
    )
    notes = rules.warnings(text)
    flagged = " agent-text--flagged" if notes else ""
    warnings = format_html_join(
        "",
        ' <span class="agent-text__warning" role="note"><span aria-hidden="true">⚠</span> {}</span>',
        ((note,) for note in notes),
    )
    # format_html escapes every argument that is not already safe HTML built above: nothing is marked
    # safe by hand, so agent text can only ever arrive here escaped.
    return format_html('<bdi class="agent-text{}">{}</bdi>{}', flagged, body, warnings)


def agent_text_value(value) -> SafeString:
    """An agent-written value for a form field's value (an attribute or a textarea), where a badge cannot
    go: escaped, with every hidden character as a character reference (&#x200B;). The browser turns the
    reference back into the character, so a value the reviewer leaves alone is submitted unchanged, and
    no raw control character is in the page."""
    text = "" if value is None else str(value)
    return format_html_join(
        "",
        "{}",
        ((format_html("&#x{};", f"{ord(p.text):X}") if p.hidden else p.text,) for p in rules.pieces(text)),
    )


@register.filter(name="agent_text")
def agent_text(value) -> SafeString:
    return agent_text_html(value)


@register.filter(name="agent_text_plain")
def agent_text_plain(value) -> str:
    """For places that take no markup (the page title, attributes): hidden characters as [U+202E]."""
    return rules.visible("" if value is None else str(value))
