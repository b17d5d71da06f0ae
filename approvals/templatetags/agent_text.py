"""`{{ value|agent_text }}`: the one way a template shows text an agent wrote.

It escapes the value, isolates it in `<bdi>` (so it cannot reorder the page's own words around it),
shows every hidden or text-direction character as a marked badge ("U+202E") instead of letting it act,
and appends a visible warning for hidden characters and for words that mix scripts (look-alikes).
The rules live in lib/agent_text.py, which the PDF and the evidence packet use too.

Most of what agents write is plain ASCII, and a list page shows a hundred and more values: `is_plain`
answers for those without walking the text character by character through the Unicode tables.
"""

import re

from django import template
from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import SafeString

from lib import agent_text as rules

register = template.Library()

# The ASCII control characters the rules mark as hidden (every C0 control and DEL, but for the newline,
# tab and carriage return they let through as layout).
_HIDDEN_ASCII = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def is_plain(text: str) -> bool:
    """True when the rules have nothing to mark or say about `text`: ASCII without a hidden control
    character. ASCII has no format character, and its only letters are Latin, so no word of it mixes
    scripts; rules.pieces() gives it back as one plain run and rules.warnings() is empty
    (tests/approvals/test_agent_text.py checks every ASCII character against the rules)."""
    return text.isascii() and _HIDDEN_ASCII.search(text) is None


def agent_text_html(value, warn: bool = True) -> SafeString:
    """The HTML of an agent-written value (also used by the admin's display methods). `warn=False`
    marks a flagged value (its class) and badges its hidden characters but leaves out the warning in
    words, for a place whose warning is said once nearby (the proposal page's heading)."""
    text = "" if value is None else str(value)
    if is_plain(text):  # what html_by_rules makes of it: the escaped text in an unflagged <bdi>
        return format_html('<bdi class="agent-text">{}</bdi>', escape(text))
    return html_by_rules(text, warn)


def html_by_rules(text: str, warn: bool = True) -> SafeString:
    """agent_text_html's answer from the rules, character by character (any text)."""
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
        ((note,) for note in notes if warn),
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
    if is_plain(text):  # nothing hidden to write as a reference: the escaped text
        return escape(text)
    return value_by_rules(text)


def value_by_rules(text: str) -> SafeString:
    """agent_text_value's answer from the rules, character by character (any text)."""
    return format_html_join(
        "",
        "{}",
        ((format_html("&#x{};", f"{ord(p.text):X}") if p.hidden else p.text,) for p in rules.pieces(text)),
    )


@register.filter(name="agent_text")
def agent_text(value) -> SafeString:
    return agent_text_html(value)


@register.filter(name="agent_text_quiet")
def agent_text_quiet(value) -> SafeString:
    """Agent text whose warning is already said: hidden characters badged, no second warning. For a
    warning that quotes the agent's value ("“pаypal.com” mixes Cyrillic and Latin letters"), which the
    rules would otherwise flag again, inside its own quotes."""
    return agent_text_html(value, warn=False)


@register.filter(name="agent_text_plain")
def agent_text_plain(value) -> str:
    """For places that take no markup (the page title, attributes): hidden characters as [U+202E]."""
    return rules.visible("" if value is None else str(value))


# Tags, not included templates, for what a list shows on every row: each builds its few elements with
# format_html instead of rendering a template per call. Each ends with the newline its former template
# ended with, so the pages render byte for byte as before (the vote's page_hash is the sha256 of parts
# of the proposal page).


@register.simple_tag
def headline(h, quiet=False) -> SafeString:
    """Reviewer's own headline of the action (approvals/policy/headline.py), from the canonical
    arguments: each part through agent_text, so a look-alike or hidden character is flagged where it
    stands. `quiet`: flagged parts are marked but not explained, where the page says `h.warnings` once
    in words beside it (the proposal page's heading and "What happens")."""
    warn = not quiet
    amount = (
        format_html(' <span class="amount">{}</span>', agent_text_html(h.amount, warn)) if h.amount else ""
    )
    target = (
        format_html(
            ' <span class="headline__sep">·</span> <span class="headline__target">{}</span>',
            agent_text_html(h.target, warn),
        )
        if h.target
        else ""
    )
    recipient = (
        format_html(
            ' <span class="headline__sep">·</span> to <span class="headline__recipient">{}</span>',
            agent_text_html(h.recipient, warn),
        )
        if h.recipient
        else ""
    )
    return format_html(
        '<span class="headline"><span class="headline__verb">{}</span>{}{}{}</span>\n',
        agent_text_html(h.verb, warn),
        amount,
        target,
        recipient,
    )


@register.simple_tag
def agent_words(words, mismatch="", label="") -> SafeString:
    """The agent's summary as the agent's words: quoted, labelled, and flagged beside it when it names
    another amount than the action (`mismatch`, escaped)."""
    flag = (
        format_html(
            ' <span class="fact fact--warn" role="note"><span aria-hidden="true">⚠</span> {}</span>', mismatch
        )
        if mismatch
        else ""
    )
    # The default label is our own words, written into the format string as the former template wrote
    # it; a label the template gives is an argument, escaped like every other.
    label_slot = "{}" if label else "The agent's words:"
    return format_html(
        '<span class="agent-words{}"><span class="agent-words__label">'
        + label_slot
        + "</span> <q>{}</q>{}</span>\n",
        " agent-words--mismatch" if mismatch else "",
        *([label] if label else []),
        agent_text_html(words),
        flag,
    )
