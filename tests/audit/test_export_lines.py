"""On PostgreSQL the CSV and JSON Lines exports are formatted by the server
(audit/exports/server_lines.py): the same bytes as the Python writer (csv_page, jsonl_page), and the
same pseudonyms for the signed head,
whatever the events hold."""

import pytest
from django.db import connection, transaction

from audit import storage
from audit.chain.records import event_pages
from audit.chain.sequencer import sequence_pending
from audit.exports import server_lines
from audit.exports.lines import Selection, csv_page, jsonl_page
from audit.models import Verb
from audit.people import pseudonyms_in
from audit.trail import record
from tests.audit.util import lifecycle, tenant_ref

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.postgres,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the server formats lines on PostgreSQL"),
]

LABELS = [
    "agent:refund-demo",
    "=HYPERLINK(1)",
    "+1",
    "-1",
    "@SUM(1)",
    "\tx",
    "\rx",
    'agent:"quoted", with a comma',
    "line\nbreak",
    "person:0123456789abcdef",
    "é中\U0001f600",
    "",
]
DATA = [
    {},
    {"amount": 12.5, "small": 1e-07, "whole": 3.0, "big": 1e15, "third": 1 / 3, "zero": -0.0},
    {"n": 2**53 - 1, "negative": -(2**53) + 1, "list": [1, 2.25, [], {}], "ok": True, "none": None},
    {"text": 'quote " backslash \\ slash / comma , CR \r LF \n tab \t', "ctl": "\x01\x1f\x7f\u2028\u2029"},
    {"unicode": "é中\U0001f600\ufeff", "ключ": "значение", "\ue000": 1, "\U0001f600": 2},
    {"looks like a number": "v1.5]", "ip": "10.0.0.1,", "at": "2026-01-01T00:00:00.000001Z"},
    {"approvers": [{"sub": "person:fedcba9876543210"}], "on_behalf_of": "person:00000000000000aa"},
    {"person:0000000000000001": "a key, not a mention", "deep": {"x": [["person:00000000000000bb"]]}},
    {"=formula": "=1+1", "b": "@", "a": "-"},
]


def _hostile_trail(tenant, agent, reviewer_a):
    lifecycle(agent, reviewer_a)
    with transaction.atomic():
        for number, data in enumerate(DATA * 2):
            record(
                tenant.id,
                actor=LABELS[number % len(LABELS)],
                verb=Verb.PROPOSAL_SUBMITTED,
                subject=LABELS[(number + 5) % len(LABELS)],
                data=data,
            )
    sequence_pending()


def _compare_with_the_python_writer(events):
    for fmt, render in (("csv", csv_page), ("jsonl", jsonl_page)):
        for page_size in (4, 1000):
            python = [
                (render(page), len(page), pseudonyms_in(page))
                for page in event_pages(events, page_size=page_size)
            ]
            assert list(server_lines.pages(events, fmt, page_size)) == python, (fmt, page_size)
    assert len(python[0][2]) >= 5  # the mentions were compared on pseudonyms that are there


def test_postgresql_prints_every_line_and_mention_as_the_python_writer_does(
    tenant, agent, refund_policy, requester, reviewer_a, any_code
):
    """Inside a transaction (the test's): the pages are read on Django's connection, by keyset."""
    _hostile_trail(tenant, agent, reviewer_a)
    _compare_with_the_python_writer(Selection.for_tenant(tenant_ref(tenant)).events())


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_one_streamed_statement_prints_the_same_lines_and_mentions(
    tenant, agent, refund_policy, requester, reviewer_a, any_code, monkeypatch
):
    _hostile_trail(tenant, agent, reviewer_a)
    assert not connection.in_atomic_block

    def no_keyset(*args):
        raise AssertionError("read by keyset pages, not streamed")

    monkeypatch.setattr(storage, "_keyset_rows", no_keyset)
    _compare_with_the_python_writer(Selection.for_tenant(tenant_ref(tenant)).events())


@pytest.mark.django_db(transaction=True)
def test_a_streamed_export_lets_the_caller_use_its_connection_between_pages(
    tenant, agent, refund_policy, requester, reviewer_a, any_code
):
    """The export job saves its progress on Django's connection between pages: the stream is on a
    connection of its own, so that query runs while the export is half read."""
    _hostile_trail(tenant, agent, reviewer_a)
    events = Selection.for_tenant(tenant_ref(tenant)).events()
    expected = sum(len(page) for page in event_pages(events, page_size=3))
    read = 0
    for _, count, _ in server_lines.pages(events, "csv", page_size=3):
        read += count
        assert events.filter(seq__lte=read).count() == read
    assert read == expected
