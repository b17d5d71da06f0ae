"""The audit trail streamed to a SIEM carries each event's chain, seq, prev_hash and hash, and the copy the
SIEM holds verifies against the chain. The SIEM (Splunk HEC, Elastic, a syslog server) cannot be reached
from here: local collectors (tests/notify/receivers.py) stand in for them."""

import json
import re

import pytest

from audit import siem
from audit.chain.sequencer import sequence_pending
from audit.models import AuditEvent, SiemCursor
from audit.verify.hashing import GENESIS_HASH, HASHED_FIELDS, hash_body
from tests.factories import submit
from tests.notify.receivers import HttpCollector, SyslogCollector
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db


@pytest.fixture
def collector():
    server = HttpCollector()
    yield server
    server.stop()


def verify_chain(records: list[dict]) -> None:
    """What a SIEM-side check does: every hash recomputed from the hashed fields, every prev_hash the
    hash before it, no seq missing."""
    by_chain: dict[str, list[dict]] = {}
    for record in records:
        by_chain.setdefault(record["chain"], []).append(record)
    for chain_records in by_chain.values():
        chain_records.sort(key=lambda r: r["seq"])
        previous = GENESIS_HASH
        for expected_seq, record in enumerate(chain_records, start=1):
            assert record["seq"] == expected_seq
            assert record["prev_hash"] == previous
            assert hash_body({name: record[name] for name in HASHED_FIELDS}) == record["hash"]
            previous = record["hash"]


def test_hec_stream_carries_seq_and_hash_and_verifies_against_the_chain(
    settings, collector, agent, refund_policy, requester
):
    settings.AUDIT_SIEM_HTTP_URL = collector.origin + "/services/collector/event"
    settings.AUDIT_SIEM_HTTP_FORMAT = "hec"
    settings.AUDIT_SIEM_HTTP_TOKEN = "hec-token"
    submit(agent)
    sequence_pending()
    sent = siem.stream_pending()
    assert sent == AuditEvent.objects.exclude(seal=None).count() > 0
    headers, _ = collector.requests[0]
    assert headers["authorization"] == "Splunk hec-token"
    lines = collector.lines()
    assert {line["sourcetype"] for line in lines} == {"reviewer:audit"}
    records = [line["event"] for line in lines]
    verify_chain(records)
    assert "proposal.submitted" in {r["verb"] for r in records}
    assert siem.stream_pending() == 0  # the cursor moved: nothing is sent twice


def test_a_sink_that_is_down_gets_everything_once_it_is_back(
    settings, collector, agent, refund_policy, requester
):
    settings.AUDIT_SIEM_HTTP_URL = collector.origin + "/_bulk"
    settings.AUDIT_SIEM_HTTP_FORMAT = "elastic"
    submit(agent)
    sequence_pending()
    collector.status = 503
    assert siem.stream_pending() == 0
    assert set(SiemCursor.objects.values_list("seq", flat=True)) == {0}
    collector.status = 200
    submit(agent)
    sequence_pending()
    siem.stream_pending()
    lines = collector.lines()
    assert lines[0] == {"create": {}}  # the bulk API's action line before each document
    documents = lines[1::2]
    assert all("@timestamp" in d for d in documents)
    verify_chain([{k: d[k] for k in (*HASHED_FIELDS, "hash")} for d in documents])
    assert len(documents) == AuditEvent.objects.exclude(seal=None).count()


def test_syslog_messages_are_rfc5424_with_the_chain_position_as_structured_data(
    settings, agent, refund_policy, requester
):
    receiver = SyslogCollector()
    try:
        settings.AUDIT_SIEM_SYSLOG = receiver.address
        submit(agent)
        sequence_pending()
        sent = siem.stream_pending()
        wait_until(lambda: len(receiver.messages) == sent, "the syslog collector got every message")
    finally:
        receiver.stop()
    pattern = re.compile(
        rb'^<110>1 (\S+) \S+ reviewer - (\S+) \[audit@32473 chain="([^"]+)" seq="(\d+)" hash="([^"]+)" '
        rb'prev_hash="([^"]+)"\] \xef\xbb\xbf(.*)$',
        re.S,
    )
    records = []
    for message in receiver.messages:
        match = pattern.match(message)
        assert match, message[:200]
        record = json.loads(match.group(7))
        assert (match.group(3).decode(), int(match.group(4)), match.group(5).decode()) == (
            record["chain"],
            record["seq"],
            record["hash"],
        )
        assert match.group(2).decode() == record["verb"]
        records.append(record)
    verify_chain(records)


def test_cloudevents_stream_is_a_batch_the_cloudevents_sdk_reads_and_verifies_against_the_chain(
    settings, collector, agent, refund_policy, requester
):
    """CloudEvents 1.0's batched mode: one JSON array per request, each element read by the CNCF
    CloudEvents SDK (PyPI `cloudevents`, which validates every attribute as it reads)."""
    from cloudevents.core.formats.json import JSONFormat

    settings.AUDIT_SIEM_HTTP_URL = collector.origin + "/events"
    settings.AUDIT_SIEM_HTTP_FORMAT = "cloudevents"
    settings.AUDIT_SIEM_HTTP_TOKEN = "router-token"
    submit(agent)
    sequence_pending()

    sent = siem.stream_pending()

    headers, body = collector.requests[0]
    assert headers["content-type"].startswith("application/cloudevents-batch+json")
    assert headers["authorization"] == "Bearer router-token"
    batch = [event for _, body in collector.requests for event in json.loads(body)]
    assert len(batch) == sent > 0
    events = [JSONFormat().read(None, json.dumps(event)) for event in batch]
    assert {event.get_specversion() for event in events} == {"1.0"}
    assert len({(event.get_source(), event.get_id()) for event in events}) == sent  # unique, as the spec asks
    assert "reviewer.audit.proposal.submitted" in {event.get_type() for event in events}
    verify_chain([event["data"] for event in batch])
