"""Agent text cannot change what a reviewer reads, over HTTP through Django's test
client: the queue, the detail page, the live queue fragment, the admin, the evidence packet (page,
JSON, PDF). A right-to-left override (U+202E) never reaches the page raw: it is shown as a marked
"U+202E" badge inside an isolated <bdi>, with a warning; a word mixing scripts carries a warning.
(The rendering in a real browser: tests/browser/test_agent_text.py, with its screenshot.)
"""

import json

import pytest
from django.contrib.auth import get_user_model
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import mark_safe

from approvals.templatetags.agent_text import (
    agent_text_html,
    agent_text_value,
    agent_words,
    html_by_rules,
    is_plain,
    value_by_rules,
)
from approvals.web.list_pages import queue_context
from lib import agent_text
from tests import factories
from tests.factories import refund_action, verified_client

pytestmark = pytest.mark.django_db

RLO = "\u202e"
ZWSP = "\u200b"
LOOKALIKE = "billing@p\u0430ypal.com"  # a Cyrillic "а"
SUMMARY = f"Refund EUR 40.00 to account DE00{RLO}1234"


@pytest.fixture
def hostile(agent, refund_policy, requester):
    action = refund_action()
    action["arguments"]["account"] = f"DE00{RLO}1234"
    action["arguments"]["recipient"] = LOOKALIKE
    return factories.submit(
        agent,
        action=action,
        summary=SUMMARY,
        agent_version=f"refund{ZWSP}-agent@1",
        consequences={"effect": "Money leaves", "target": LOOKALIKE, "amount": "40.00"},
    )


def assert_shown_safely(html: str):
    assert RLO not in html and ZWSP not in html
    assert (
        '<span class="agent-text__char" title="RIGHT-TO-LEFT OVERRIDE (hidden character)">U+202E</span>'
        in html
    )
    assert '<bdi class="agent-text agent-text--flagged">' in html
    assert "hidden or text-direction character" in html


def test_the_detail_page_badges_hidden_characters_isolates_and_warns(hostile, reviewer_a):
    html = verified_client(reviewer_a).get(reverse("approvals:detail", args=[hostile.id])).content.decode()

    assert_shown_safely(html)
    assert "mixes Cyrillic and Latin letters in one word" in html
    assert "U+200B" in html  # the zero-width space in the agent version
    # The title is Reviewer's headline, in plain text (no markup in a title); the summary is quoted below.
    assert "<title>Refund EUR 40.00 · order:1182 · to billing@p\u0430ypal.com" in html


def test_the_queue_and_its_live_fragment_show_agent_text_safely(hostile, reviewer_a):
    page = verified_client(reviewer_a).get(reverse("approvals:queue")).content.decode()
    assert_shown_safely(page)

    # What the queue socket sends is this partial, rendered with the same filter.
    context = {"rows": queue_context(reviewer_a, {})["rows"], "server_now": timezone.now()}
    fragment = render_to_string("approvals/_proposal_table.html", context)
    assert_shown_safely(fragment)


def test_the_admin_shows_agent_text_safely(hostile):
    root = get_user_model().objects.create_superuser("root", "root@example.test", "pw-for-tests")
    client = verified_client(root)

    listing = client.get(reverse("admin:approvals_proposal_changelist")).content.decode()
    form = client.get(reverse("admin:approvals_proposal_change", args=[hostile.id])).content.decode()

    assert_shown_safely(listing)
    assert_shown_safely(form)
    assert "mixes Cyrillic and Latin" not in listing  # the recipient is in the action JSON, not a column


def test_the_evidence_packet_lists_warnings_by_path_and_its_page_and_pdf_hold_no_raw_override(
    hostile, compliance
):
    client = verified_client(compliance)
    args = [hostile.tenant.slug, hostile.id]

    packet = json.loads(client.get(reverse("audit:evidence_json", args=args)).content)
    page = client.get(reverse("audit:evidence", args=args)).content.decode()
    pdf = client.get(reverse("audit:evidence_pdf", args=args))

    warnings = packet["proposal"]["agent_text_warnings"]
    assert set(warnings) >= {
        "summary",
        "action.arguments.account",
        "action.arguments.recipient",
        "agent_version",
    }
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in warnings["summary"][0]
    # The JSON keeps the agent's exact bytes (it is evidence), and says what is in them.
    assert packet["proposal"]["envelope"]["summary"] == SUMMARY
    assert_shown_safely(page)
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF")


def test_the_pdf_prints_hidden_characters_as_codes():
    from audit.exports.pdf_document import Document

    document = Document("test")

    assert document.clean(SUMMARY).endswith("DE00[U+202E]1234") or not document.unicode
    assert document.clean({"to": LOOKALIKE + ZWSP}).endswith('[U+200B]"}') or not document.unicode


@pytest.mark.parametrize(
    ("value", "flagged"),
    [
        ("Refund 40.00 EUR to order 1182", False),
        ("東京タワーへ行く", False),  # Japanese mixes kanji and kana in one word: ordinary
        ("Überweisung an Müller", False),
        ("שלום world", False),  # two scripts, two words: right-to-left text is fine, isolated
        (f"a{RLO}b", True),
        ("p\u0430ypal.com", True),
        ("ＡＢＣ-abc", True),  # fullwidth letters beside Latin
        ("x\u2066y\u2069", True),
        ("tab\tand\nnewline", False),
    ],
)
def test_what_counts_as_hidden_or_mixed(value, flagged):
    assert bool(agent_text.warnings(value)) is flagged
    assert ("agent-text--flagged" in agent_text_html(value)) is flagged


def test_markup_in_agent_text_stays_text():
    html = agent_text_html(f'<script>alert(1)</script>{RLO}"')
    assert "<script>" not in html and "&lt;script&gt;" in html and "&quot;" in html
    assert agent_text_html('<b>"bold"</b> & co') == (
        '<bdi class="agent-text">&lt;b&gt;&quot;bold&quot;&lt;/b&gt; &amp; co</bdi>'
    )
    # Text handed in already marked safe is escaped all the same.
    assert agent_text_html(mark_safe("<b>x</b>")) == '<bdi class="agent-text">&lt;b&gt;x&lt;/b&gt;</bdi>'  # noqa: S308
    assert agent_text_value(mark_safe("<b>x</b>")) == "&lt;b&gt;x&lt;/b&gt;"  # noqa: S308


@pytest.mark.parametrize("code", range(128))
def test_plain_ascii_takes_the_short_way_to_what_the_rules_give(code):
    """agent_text_html and agent_text_value answer plain ASCII without the rules (is_plain): for every
    ASCII character, in a word and alone, the answer is the rules' own, and the short way is taken
    exactly when the rules find nothing hidden."""
    char = chr(code)
    for text in (char, f"a{char}b <x> & {char}", f"Refund{char}EUR 40.00"):
        assert agent_text_html(text) == html_by_rules(text)
        assert agent_text_value(text) == value_by_rules(text)
        hidden = any(piece.hidden for piece in agent_text.pieces(text))
        assert is_plain(text) is not hidden
        if is_plain(text):
            assert agent_text.warnings(text) == []


def test_text_beyond_ascii_goes_by_the_rules():
    for text in ("Überweisung", f"a{RLO}b", "p\u0430ypal.com", "EUR 40,00 …", ""):
        assert agent_text_html(text) == html_by_rules(text)
        assert agent_text_value(text) == value_by_rules(text)
    assert not is_plain("Überweisung") and is_plain("")


def test_the_review_email_shows_hidden_characters_as_codes(hostile):
    context = {
        "name": "Alice",
        "items": [{"proposal": hostile, "link": "http://x/"}],
        "summary": hostile.summary,
        "queue_link": "http://x/",
    }

    text = render_to_string("emails/review_digest.txt", context)
    subject = render_to_string("emails/review_digest_subject.txt", context)
    html = render_to_string("emails/review_digest.html", context)

    assert RLO not in text + subject and "DE00[U+202E]1234" in text and "DE00[U+202E]1234" in subject
    assert_shown_safely(html)


def test_agent_words_label_is_ours_and_what_else_it_shows_is_escaped():
    html = agent_words('<script>"x"</script>', mismatch="<b>EUR 4.00</b>")
    assert '<span class="agent-words__label">The agent\'s words:</span>' in html  # our default, as written
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<b>" not in html and "&lt;b&gt;EUR 4.00&lt;/b&gt;" in html
    labelled = agent_words("x", label="<i>The agent:</i>")
    assert '<span class="agent-words__label">&lt;i&gt;The agent:&lt;/i&gt;</span>' in labelled
