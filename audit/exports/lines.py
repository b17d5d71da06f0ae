"""Exports of one tenant's audit trail: CSV and JSON Lines (the verifiable bundle is
audit/exports/bundles.py, the PDF report audit/exports/pdf.py). They read the audit log only, page by
page, so memory stays flat for any size.

A Selection is a period of one chain, optionally narrowed to the proposals that match a policy, an
agent, a reviewer or an outcome. The narrowing is a subquery over the audit events themselves:
- policy `slug` or `slug@version`: proposals whose policy.evaluated event lists that policy version;
- agent `slug`: proposals the agent submitted, consumed or reported on (and direct edits of those);
- reviewer `username`: proposals that person acted on (voted, edited, asked, revoked);
- outcome `state`: proposals that reached that state at any time (approved includes later succeeded).
With a filter, events that are not about a proposal (agent registration, halts, exports) are left out.
The bundle is never narrowed: a chain with holes cannot be verified, so it holds the whole segment.
"""

import csv
import hashlib
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta

from django.db import connection
from django.db.models import Q
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Substr
from django.utils import timezone

from audit.chain.checkpoints import archive_public_key
from audit.chain.records import event_pages
from audit.chain.sequencer import make_seals_durable, sequence_chain
from audit.exports import server_lines
from audit.exports.server_lines import compact_json, csv_cell
from audit.labels import agent_label, tenant_chain, username_label
from audit.models import AuditEvent, ChainHead, Verb
from audit.people import display_names, pseudonyms_in
from audit.shapes import format_time
from audit.verify.chains import (
    EXPORT_HEAD_FORMAT,
    EXPORT_HEAD_MARK,
    export_head_payload,
)
from audit.verify.hashing import GENESIS_HASH

CSV_COLUMNS = ("seq", "at", "chain", "actor", "verb", "subject", "data", "prev_hash", "hash")
OUTCOMES = (
    "allowed",
    "denied",
    "approved",
    "rejected",
    "info_requested",
    "expired",
    "superseded",
    "cancelled",
    "revoked",
    "executing",
    "succeeded",
    "failed",
    "unknown",
)
PROPOSAL_PREFIX = "proposal:"


@dataclass(frozen=True)
class Selection:
    chain: str
    tenant_id: int | None = None
    tenant_slug: str = ""
    tenant_name: str = ""
    since: datetime | None = None
    until: datetime | None = None
    policy: str = ""
    agent: str = ""
    reviewer: str = ""
    outcome: str = ""
    up_to_seq: int | None = None  # a snapshot: events appended after the request are not exported

    @classmethod
    def for_tenant(cls, tenant, filters: dict | None = None, up_to_seq: int | None = None) -> "Selection":
        filters = filters or {}
        return cls(
            chain=tenant_chain(tenant.id),
            tenant_id=tenant.id,
            tenant_slug=tenant.slug,
            tenant_name=tenant.name,
            since=_parse_bound(filters.get("since")),
            until=_parse_bound(filters.get("until")),
            policy=filters.get("policy") or "",
            agent=filters.get("agent") or "",
            reviewer=filters.get("reviewer") or "",
            outcome=filters.get("outcome") or "",
            up_to_seq=up_to_seq,
        )

    def filters(self) -> dict:
        """The JSON form stored on an ExportJob and written into manifests."""
        return {
            "since": format_time(self.since) if self.since else None,
            "until": format_time(self.until) if self.until else None,
            "policy": self.policy,
            "agent": self.agent,
            "reviewer": self.reviewer,
            "outcome": self.outcome,
        }

    @property
    def narrowed(self) -> bool:
        return bool(self.policy or self.agent or self.reviewer or self.outcome)

    def describe(self) -> str:
        parts = [
            f"{format_time(self.since)[:10] if self.since else 'start'} .. "
            f"{format_time(self.until)[:10] if self.until else 'now'}"
        ]
        for name in ("policy", "agent", "reviewer", "outcome"):
            if getattr(self, name):
                parts.append(f"{name} {getattr(self, name)}")
        return ", ".join(parts)

    def period_events(self):
        """The chain's chained events in the period, up to the snapshot; not narrowed. (An event not
        chained yet has no place in the trail: the sequencer gives it one within moments.)"""
        events = AuditEvent.objects.chained(self.chain)
        if self.since:
            events = events.filter(at__gte=self.since)
        if self.until:
            events = events.filter(at__lt=self.until)
        if self.up_to_seq is not None:
            events = events.filter(seq__lte=self.up_to_seq)
        return events

    def events(self):
        """The selected events: the period, narrowed to the matching proposals."""
        events = self.period_events()
        for subjects in self._subject_filters():
            events = events.filter(subject__in=subjects)
        return events

    def _subject_filters(self):
        chain_events = AuditEvent.objects.filter(chain=self.chain)
        if self.policy:
            yield _policy_subjects(chain_events, self.policy)
        if self.agent:
            actor = agent_label(self.agent)
            own = chain_events.filter(actor=actor, subject__startswith=PROPOSAL_PREFIX)
            submitted = chain_events.filter(actor=actor, verb=Verb.PROPOSAL_SUBMITTED)
            edits = (
                chain_events.filter(verb=Verb.PROPOSAL_SUBMITTED)
                .annotate(edited_from=KeyTextTransform("edited_from", "data"))
                .filter(
                    edited_from__in=submitted.annotate(
                        proposal_id=Substr("subject", len(PROPOSAL_PREFIX) + 1)
                    ).values("proposal_id")
                )
            )
            yield chain_events.filter(Q(pk__in=own.values("pk")) | Q(pk__in=edits.values("pk"))).values(
                "subject"
            )
        if self.reviewer:
            yield chain_events.filter(
                actor=username_label(self.reviewer), subject__startswith=PROPOSAL_PREFIX
            ).values("subject")
        if self.outcome:
            yield chain_events.filter(verb=Verb.PROPOSAL_TRANSITIONED, data__to=self.outcome).values(
                "subject"
            )


def _policy_subjects(chain_events, policy: str):
    slug, _, version = policy.partition("@")
    ref = {"id": slug, **({"version": int(version)} if version.isdigit() else {})}
    evaluated = chain_events.filter(verb=Verb.POLICY_EVALUATED)
    if connection.vendor == "postgresql":
        return evaluated.filter(data__policies__contains=[ref]).values("subject")
    # SQLite has no JSON containment; its JSON_EXTRACT of the array is compact JSON in stored key order
    # (services write {"id", "version"}), so the compact text of the reference is a substring of it.
    needle = json.dumps(ref, separators=(",", ":"))[1:-1]
    return evaluated.filter(data__policies__icontains=needle).values("subject")


def _parse_bound(value) -> datetime | None:
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, date):
        return datetime.combine(value, time.min, tzinfo=UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def day_bounds(since: date | None, until: date | None) -> dict:
    """Form dates (UTC days, both inclusive) as filter bounds: until is the start of the next day."""
    return {
        "since": format_time(datetime.combine(since, time.min, tzinfo=UTC)) if since else None,
        "until": format_time(datetime.combine(until + timedelta(days=1), time.min, tzinfo=UTC))
        if until
        else None,
    }


def count(selection: Selection) -> int:
    return selection.events().count()


# --------------------------------------------------------------------------------------------------
# CSV and JSON Lines: one function yields the bytes page by page; files and HTTP responses share it.


def csv_header() -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer).writerow(CSV_COLUMNS)
    return buffer.getvalue().encode()


def csv_page(page: list[dict]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    for event in page:
        writer.writerow(
            [
                event["seq"],
                event["at"],
                event["chain"],
                csv_cell(event["actor"]),
                event["verb"],
                csv_cell(event["subject"]),
                csv_cell(compact_json(event["data"])),
                event["prev_hash"],
                event["hash"],
            ]
        )
    return buffer.getvalue().encode()


def jsonl_page(page: list[dict]) -> bytes:
    return "".join(json.dumps(event, ensure_ascii=False) + "\n" for event in page).encode()


def export_head(selection: Selection) -> tuple[int, str]:
    """(seq, hash) of the chain head the export is cut at: its snapshot (`up_to_seq`), else the head now
    once everything committed is chained."""
    if selection.up_to_seq is None:
        sequence_chain(selection.chain)
        head = ChainHead.objects.filter(chain=selection.chain).first()
        seq = head.seq if head else 0
    else:
        seq = selection.up_to_seq
    found = AuditEvent.objects.chained(selection.chain).filter(seq=seq).values_list("hash", flat=True).first()
    make_seals_durable(selection.chain)  # what the export is cut at is on disk before any of it leaves
    return seq, found or GENESIS_HASH


def head_record(
    selection: Selection, head: tuple[int, str], digest: str, events: int, people: dict | None = None
) -> dict:
    """The signed head that ends a CSV or JSON Lines export (verify.EXPORT_HEAD_FORMAT): the chain head
    it was cut at, the sha256 and number of the event lines before it, and `people`, the names of the
    pseudonyms the events mention as the directory knows them now (an erased person is absent), signed
    with Ed25519 over RFC 8785 of everything but the signature. `python -m audit.verify export.jsonl
    --jwks ...` checks it."""
    from signing_keys import sign_bytes

    record = {
        "format": EXPORT_HEAD_FORMAT,
        "chain": selection.chain,
        "seq": head[0],
        "hash": head[1],
        "at": format_time(timezone.now()),
        "events": events,
        "sha256": digest,
        "filters": selection.filters(),
        "people": people or {},
    }
    kid, signature = sign_bytes(export_head_payload(record))
    archive_public_key(kid)
    return {**record, "kid": kid, "signature": signature}


def head_line(fmt: str, record: dict) -> bytes:
    if fmt == "csv":
        buffer = io.StringIO()
        csv.writer(buffer).writerow([EXPORT_HEAD_MARK, json.dumps(record, sort_keys=True)])
        return buffer.getvalue().encode()
    return (json.dumps({EXPORT_HEAD_MARK: record}, sort_keys=True) + "\n").encode()


def _blocks(selection: Selection, fmt: str, page_size: int | None = None) -> Iterator[tuple[bytes, int]]:
    """(bytes, events written so far) page by page, then the signed head line."""
    head = export_head(selection)
    selection = replace(selection, up_to_seq=head[0])
    digest, done, mentioned = hashlib.sha256(), 0, set()
    if fmt == "csv":
        header = csv_header()
        digest.update(header)
        yield header, done
    for block, events, mentions in _pages(selection, fmt, page_size):
        digest.update(block)
        done += events
        mentioned |= mentions
        yield block, done
    people = display_names(mentioned)
    yield head_line(fmt, head_record(selection, head, digest.hexdigest(), done, people)), done


def _pages(selection: Selection, fmt: str, page_size: int | None) -> Iterator[tuple[bytes, int, set[str]]]:
    """(bytes, events, pseudonyms mentioned) page by page: formatted by PostgreSQL there
    (audit/exports/server_lines.py, the same bytes), by csv_page or jsonl_page elsewhere."""
    if connection.vendor == "postgresql":
        yield from server_lines.pages(selection.events(), fmt, page_size)
        return
    render = csv_page if fmt == "csv" else jsonl_page
    for page in event_pages(selection.events(), page_size=page_size):
        yield render(page), len(page), pseudonyms_in(page)


def chunks(selection: Selection, fmt: str, page_size: int | None = None) -> Iterator[bytes]:
    """The export as byte chunks, one page of events each (a sync iterator), ending with its signed
    head line."""
    for block, _ in _blocks(selection, fmt, page_size):
        yield block


def write_lines(selection: Selection, fmt: str, out) -> Iterator[int]:
    """Write CSV or JSON Lines to a binary file, ending with its signed head line; yields how many
    events are written after each page."""
    for block, done in _blocks(selection, fmt):
        out.write(block)
        yield done
