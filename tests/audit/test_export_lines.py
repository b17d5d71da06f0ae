"""On PostgreSQL the CSV and JSON Lines exports are formatted by the server (audit/export_lines.py): the
same bytes as the Python writer (csv_page, jsonl_page), and the same pseudonyms for the signed head,
whatever the events hold."""

import pytest
from django.db import connection, transaction

from audit import export_lines
from audit.chain import sequence_pending
from audit.exports import Selection, csv_page, jsonl_page
from audit.models import Verb
from audit.people import pseudonyms_in
from audit.records import event_pages
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


def test_postgresql_prints_every_line_and_mention_as_the_python_writer_does(
    tenant, agent, refund_policy, requester, reviewer_a, any_code
):
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
    events = Selection.for_tenant(tenant_ref(tenant)).events()
    for fmt, render in (("csv", csv_page), ("jsonl", jsonl_page)):
        for page_size in (4, 1000):
            python = [
                (render(page), len(page), pseudonyms_in(page))
                for page in event_pages(events, page_size=page_size)
            ]
            assert list(export_lines.pages(events, fmt, page_size)) == python, (fmt, page_size)
    assert len(python[0][2]) >= 5  # the mentions were compared on pseudonyms that are there
