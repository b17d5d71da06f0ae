"""The audit trail streamed to a SIEM, each event with its chain, seq, prev_hash and hash, so the SIEM's
copy can be checked against the chain (audit.verify.hashing.hash_body over the hashed fields gives the hash;
each prev_hash is the hash before it).

Two sinks, configured by the operator in settings (reviewer/settings.py, "SIEM"):

- `AUDIT_SIEM_HTTP_URL`: JSON over HTTPS in the shape the collector takes: `hec` (Splunk HTTP Event
  Collector: one `{"time", "sourcetype", "event"}` object per line, `Authorization: Splunk <token>`),
  `elastic` (the `_bulk` API: an `{"create": {}}` line before each event, `Authorization: ApiKey
  <key>`), `jsonl` (one event per line, `Authorization: Bearer <token>`), or `cloudevents` (CloudEvents
  1.0, the HTTP binding's batched mode: a JSON array of events in the JSON format, `Content-Type:
  application/cloudevents-batch+json`, `Authorization: Bearer <token>`);
- `AUDIT_SIEM_SYSLOG`: RFC 5424 syslog over TCP (`tcp://host:port`) or TLS (`tls://host:port`), with
  RFC 6587 octet-counting framing; the event's JSON is the message, its chain/seq/hash also as
  structured data.

The worker calls `stream_pending()` every tick: per sink and chain, the sealed events after the cursor
(SiemCursor), in seq order, a batch at a time; the cursor moves only after the sink took the batch, so
a sink that is down gets everything once it is back (at least once; seq makes duplicates visible).
"""

import json
import logging
import socket
import ssl
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.db import transaction

from audit.chain.sequencer import make_seals_durable
from audit.models import AuditEvent, ChainHead, SiemCursor
from audit.shapes import format_time, parse_time

log = logging.getLogger(__name__)

BATCH = 200
HTTP = "http"
SYSLOG = "syslog"
SYSLOG_FACILITY = 13  # log audit (RFC 5424 table 1)
SYSLOG_SEVERITY = 6  # informational
APP_NAME = "reviewer"
# The private enterprise number part of the structured data id is a placeholder, as RFC 5424 §7.2.2
# allows for examples; operators filter on the SD-ID name.
SD_ID = "audit@32473"


class SinkFailed(Exception):
    pass


def event_record(event: AuditEvent) -> dict:
    """The event as the chain hashed it, plus its hash."""
    return {
        "chain": event.chain,
        "seq": event.seq,
        "at": format_time(event.at),
        "actor": event.actor,
        "verb": event.verb,
        "subject": event.subject,
        "data": event.data,
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


def _secret(name: str) -> str:
    path = getattr(settings, f"{name}_FILE", "")
    if path:
        with open(path) as handle:
            return handle.read().strip()
    return getattr(settings, name, "")


# --- HTTP --------------------------------------------------------------------------------------------


def cloudevent(record: dict) -> dict:
    """An audit event as a CloudEvent 1.0 (its JSON format). `id` is the event's place in its chain,
    unique with `source` (so a batch sent again is recognised as duplicates, as `seq` shows them);
    `data` is the record as the other formats carry it, so the SIEM's copy verifies the same way."""
    return {
        "specversion": "1.0",
        "id": f"{record['chain']}:{record['seq']}",
        "source": f"{settings.REVIEWER_ISSUER}/audit/{record['chain']}",
        "type": f"reviewer.audit.{record['verb']}",
        "subject": record["subject"],
        "time": record["at"],
        "datacontenttype": "application/json",
        "data": record,
    }


def http_body(records: list[dict], fmt: str) -> bytes:
    if fmt == "cloudevents":
        return json.dumps([cloudevent(record) for record in records], ensure_ascii=False).encode()
    lines = []
    for record in records:
        if fmt == "hec":
            lines.append({"time": _epoch(record["at"]), "sourcetype": "reviewer:audit", "event": record})
        elif fmt == "elastic":
            lines += [{"create": {}}, {"@timestamp": record["at"], **record}]
        else:
            lines.append(record)
    return "".join(json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n" for line in lines).encode()


def _epoch(at: str) -> float:
    return round(parse_time(at).timestamp(), 6)


def _authorization(fmt: str) -> dict:
    token = _secret("AUDIT_SIEM_HTTP_TOKEN")
    if not token:
        return {}
    scheme = {"hec": "Splunk", "elastic": "ApiKey"}.get(fmt, "Bearer")
    return {"Authorization": f"{scheme} {token}"}


def send_http(records: list[dict]) -> None:
    fmt = settings.AUDIT_SIEM_HTTP_FORMAT
    content_type = {
        "elastic": "application/x-ndjson",
        "cloudevents": "application/cloudevents-batch+json; charset=utf-8",
    }.get(fmt, "application/json")
    verify = settings.AUDIT_SIEM_CA_FILE or True
    try:
        response = httpx.post(
            settings.AUDIT_SIEM_HTTP_URL,
            content=http_body(records, fmt),
            headers={"Content-Type": content_type, **_authorization(fmt)},
            timeout=10,
            verify=verify,
        )
    except httpx.HTTPError as error:
        raise SinkFailed(f"SIEM HTTP sink unreachable ({type(error).__name__})") from None
    if not 200 <= response.status_code < 300:
        raise SinkFailed(f"SIEM HTTP sink answered {response.status_code}")
    if fmt == "elastic" and response.json().get("errors"):
        raise SinkFailed("the Elastic bulk request reported errors")


# --- syslog ------------------------------------------------------------------------------------------


def _sd_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("]", "\\]")


def syslog_message(record: dict) -> bytes:
    """One RFC 5424 message: <PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID [SD] MSG."""
    pri = SYSLOG_FACILITY * 8 + SYSLOG_SEVERITY
    host = (socket.gethostname() or "-")[:255].replace(" ", "-")
    msgid = record["verb"].replace(" ", "_")[:32] or "-"
    sd = (
        f'[{SD_ID} chain="{_sd_value(record["chain"])}" seq="{record["seq"]}" '
        f'hash="{_sd_value(record["hash"])}" prev_hash="{_sd_value(record["prev_hash"])}"]'
    )
    body = json.dumps(record, ensure_ascii=False, sort_keys=True)
    # MSG is UTF-8 with the BOM RFC 5424 §6.4 asks for when it is UTF-8.
    return (
        f"<{pri}>1 {record['at']} {host} {APP_NAME} - {msgid} {sd} ".encode()
        + b"\xef\xbb\xbf"
        + body.encode()
    )


def send_syslog(records: list[dict]) -> None:
    target = urlsplit(settings.AUDIT_SIEM_SYSLOG)
    if target.scheme not in ("tcp", "tls") or not target.hostname or not target.port:
        raise SinkFailed("AUDIT_SIEM_SYSLOG is tcp://host:port or tls://host:port")
    try:
        with socket.create_connection((target.hostname, target.port), timeout=10) as raw:
            stream = raw
            if target.scheme == "tls":
                context = ssl.create_default_context(cafile=settings.AUDIT_SIEM_CA_FILE or None)
                stream = context.wrap_socket(raw, server_hostname=target.hostname)
            for record in records:
                message = syslog_message(record)
                stream.sendall(str(len(message)).encode() + b" " + message)  # RFC 6587 octet counting
    except OSError as error:
        raise SinkFailed(f"syslog sink unreachable ({type(error).__name__})") from None


# --- the worker's step ---------------------------------------------------------------------------------


def sinks() -> dict:
    found = {}
    if settings.AUDIT_SIEM_HTTP_URL:
        found[HTTP] = send_http
    if settings.AUDIT_SIEM_SYSLOG:
        found[SYSLOG] = send_syslog
    return found


def stream_pending() -> int:
    """Send every sink the sealed events after its cursor, chain by chain. Returns how many were sent."""
    sent = 0
    for sink, deliver in sinks().items():
        for chain in ChainHead.objects.order_by("chain").values_list("chain", flat=True):
            cursor, _ = SiemCursor.objects.get_or_create(sink=sink, chain=chain)
            events = list(
                AuditEvent.objects.chained(chain).filter(seq__gt=cursor.seq).order_by("seq")[:BATCH]
            )
            if not events:
                continue
            make_seals_durable(chain)  # a sink keeps what it got: never a seal a crash could still undo
            try:
                deliver([event_record(e) for e in events])
            except SinkFailed as error:
                log.warning("SIEM sink %s: %s (chain %s from seq %d)", sink, error, chain, cursor.seq + 1)
                break  # the next tick tries again from the same cursor
            with transaction.atomic():
                SiemCursor.objects.filter(pk=cursor.pk, seq=cursor.seq).update(seq=events[-1].seq)
            sent += len(events)
    return sent
