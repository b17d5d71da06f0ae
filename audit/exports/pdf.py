"""PDF documents for people (fpdf2): the audit report of a period and the evidence packet of a proposal.

The report's table of decisions is capped (AUDIT_PDF_MAX_ROWS): a PDF is for reading, and fpdf2 keeps
the document in memory; CSV, JSON Lines and the bundle carry every row.
"""

import json
import logging
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from audit.chain.records import event_pages
from audit.chain.verification import verify_chain_steps
from audit.exports.pdf_document import Document, max_rows, percent
from audit.metrics import charts
from audit.metrics.queue import FIRST_OUTCOMES, collect_steps, format_duration, rubber_stamp_min_sample
from audit.models import Verb
from audit.shapes import format_time

# fpdf2 subsets embedded fonts with fontTools, which logs every table it touches at INFO.
logging.getLogger("fontTools").setLevel(logging.WARNING)


def _group_rows(groups) -> list[list]:
    return [
        [
            g.label,
            g.submitted,
            percent(g.rate("approved")),
            percent(g.rate("allowed")),
            percent(g.rate("rejected")),
            percent(g.rate("denied")),
            percent(g.rate("expired")),
            format_duration(g.median_seconds),
            format_duration(g.p95_seconds),
        ]
        for g in groups
    ]


GROUP_HEADINGS = ["", "submitted", "approved", "allowed", "rejected", "denied", "expired", "median", "p95"]
GROUP_WIDTHS = (44, 17, 17, 17, 17, 17, 17, 17, 17)


def write_report(selection, path: Path, *, created_by: str) -> Iterator[int]:
    """The audit report of a period as a PDF at `path`; yields events processed so far (for progress):
    first the whole chain is verified, then the period is summarized, then its decisions are listed."""
    check = yield from verify_chain_steps(selection.chain)
    done = check.events

    def shifted(steps):
        """The metrics scan's progress, counted after the chain check's; returns the metrics."""
        nonlocal done
        while True:
            try:
                seen = next(steps)
            except StopIteration as finished:
                return finished.value
            done = check.events + seen
            yield done

    metrics = yield from shifted(
        collect_steps(
            selection.chain, since=selection.since, until=selection.until, up_to_seq=selection.up_to_seq
        )
    )
    decisions: list[list[str]] = []
    truncated = False
    signed = selection.events().filter(verb=Verb.DECISION_SIGNED)
    for page in event_pages(signed, page_size=500):
        for event in page:
            if len(decisions) >= max_rows():
                truncated = True
                break
            data = event["data"]
            approvers = ", ".join(a.get("sub", "") for a in data.get("approvers", []))
            policy = data.get("policy") or {}
            decisions.append(
                [
                    event["at"][:19].replace("T", " "),
                    event["subject"].split(":", 1)[1][:8],
                    "\n".join(
                        part
                        for part in (
                            data.get("tool", ""),
                            (data.get("summary") or "")[:120],
                            data.get("amount", ""),
                        )
                        if part
                    ),
                    data.get("decision", ""),
                    approvers,
                    f"{policy.get('id', '')}@{policy.get('version', '')}" if policy else "",
                    (data.get("reason") or "")[:120],
                ]
            )
        done += len(page)
        yield done
        if truncated:
            break

    pdf = Document(f"Audit report — {selection.tenant_name or selection.chain}")
    pdf.alias_nb_pages()
    pdf.add_page()
    pdf.heading(f"Audit report — {selection.tenant_name} ({selection.tenant_slug})", 15)
    pdf.pairs(
        [
            ("Period", selection.describe()),
            ("Chain", selection.chain),
            ("Generated", f"{format_time(timezone.now())} by {created_by}"),
            ("Issuer", settings.REVIEWER_ISSUER),
            (
                "Chain check",
                (
                    f"OK: {check.events} events and {check.checkpoints} signed checkpoints verify"
                    if check.ok
                    else f"FAILED: {check.problems[0]} (first bad event: seq {check.first_bad_seq})"
                ),
            ),
        ]
    )
    pdf.heading("Summary", 12)
    overall = metrics.overall
    pdf.pairs(
        [
            ("Proposals submitted", metrics.submitted),
            ("Still open", metrics.open),
            (
                "First outcomes",
                ", ".join(f"{o}: {overall.outcomes[o]}" for o in FIRST_OUTCOMES if overall.outcomes[o])
                or "none",
            ),
            (
                "Time to decision",
                f"median {format_duration(overall.median_seconds)}, "
                f"p95 {format_duration(overall.p95_seconds)} ({len(overall.durations)} decisions)",
            ),
            ("Supersedes / info requests", f"{metrics.supersedes} / {metrics.info_requests}"),
            ("Unknown outcomes", f"{metrics.unknown_outcomes} (still unknown: {metrics.still_unknown})"),
            ("Revocations", metrics.revocations),
            (
                "Rubber-stamp warnings",
                ", ".join(g.label for g in metrics.rubber_stamps)
                or f"none (flagged: above 99% approval over at least {rubber_stamp_min_sample()} "
                "human decisions)",
            ),
        ]
    )
    for chart in charts.metric_charts(metrics):
        if not chart.empty:
            pdf.chart(chart)
    pdf.heading("By policy version", 12)
    pdf.grid(GROUP_HEADINGS, _group_rows(metrics.by_policy.values()), GROUP_WIDTHS)
    pdf.heading("By tool", 12)
    pdf.grid(GROUP_HEADINGS, _group_rows(metrics.by_tool.values()), GROUP_WIDTHS)
    pdf.add_page()
    pdf.heading(
        f"Decisions ({len(decisions)}{' shown: the table is capped, the CSV has all' if truncated else ''})",
        12,
    )
    pdf.grid(
        [
            "signed at (UTC)",
            "proposal",
            "what (tool, summary, amount)",
            "decision",
            "approvers",
            "policy",
            "reason",
        ],
        decisions,
        (24, 15, 45, 16, 34, 20, 26),
    )
    pdf.output(str(path))


def write_evidence(packet: dict, out) -> None:
    """The evidence packet as a PDF written to a binary file object."""
    proposal, envelope = packet["proposal"], packet["proposal"]["envelope"]
    pdf = Document(f"Evidence — proposal {proposal['id']}")
    pdf.alias_nb_pages()
    pdf.add_page()
    pdf.heading(f"Evidence packet — proposal {proposal['id']}", 14)
    pdf.pairs(
        [
            ("Tenant", f"{packet['tenant']['name']} ({packet['tenant']['slug']})"),
            ("Generated", packet["generated_at"]),
            ("State", proposal["state"]),
            ("Agent", proposal["agent"]),
            ("Checks", ", ".join(f"{k}: {json.dumps(v)}" for k, v in packet["checks"].items())),
        ]
    )
    headline = proposal.get("headline") or {}
    if headline.get("text"):
        pdf.heading("What it does (Reviewer's headline, as reviewers saw it)", 12)
        rows = [("Headline", headline["text"])]
        if headline.get("currency_note"):
            rows.append(("Currency", headline["currency_note"]))
        pdf.pairs(rows)
    pdf.heading("Envelope (as the agent sent it)", 12)
    warnings = packet["proposal"].get("agent_text_warnings") or {}
    if warnings:
        pdf.paragraph(
            "Warning: the agent's text holds hidden characters or words that mix scripts; hidden characters "
            "are printed as [U+XXXX]. "
            + " ".join(f"{path}: {'; '.join(notes)}." for path, notes in warnings.items())
        )
    pdf.pairs(
        [
            ("Summary", envelope["summary"]),
            ("Action", envelope["action"]),
            ("Action digest", envelope["action_digest"]),
            ("Task / context", f"{envelope['task_id']} / {envelope['context_id']}"),
            ("Request id", envelope["request_id"]),
            ("Principal", envelope["principal"]),
            ("Agent version", envelope["agent_version"]),
            ("Consequences", envelope["consequences"]),
            ("Diff", envelope["diff"]),
            ("Evidence", envelope["evidence"]),
            ("Expires", envelope["expires_at"]),
            ("Supersedes", envelope["supersedes"]),
        ]
    )
    pdf.heading("What reviewers were shown", 12)
    pdf.pairs(
        [
            ("Digest", packet["shown"]["action_digest"]),
            (
                "Page hashes",
                "; ".join(f"{p['reviewer']}: {p['page_hash'] or '–'}" for p in packet["shown"]["page_hashes"])
                or "no votes",
            ),
        ]
    )
    pdf.heading("Policy evaluation", 12)
    for evaluation in packet["policy"]:
        pdf.pairs([(key, value) for key, value in evaluation.items()])
    pdf.heading("Votes", 12)
    pdf.grid(
        ["reviewer", "verdict", "group", "at (UTC)", "authentication", "reason"],
        [
            [
                f"{v['name']} ({v['reviewer']})",
                v["verdict"],
                v["counted_in_group"] or ", ".join(v["groups"]),
                v["at"],
                v["authentication"],
                v["reason"],
            ]
            for v in packet["votes"]
        ],
        (38, 16, 20, 30, 40, 36),
    )
    if packet["refusals"]:
        pdf.grid(
            ["actor", "refused", "at (UTC)", "code"],
            [[r["actor"], r["verb"], r["at"], r["code"]] for r in packet["refusals"]],
            (50, 40, 50, 40),
        )
    decision = packet["decision"]
    pdf.heading("Signed decision", 12)
    pdf.pairs(
        [
            ("jti", decision.get("jti")),
            ("Decision", decision.get("kind")),
            ("kid", decision.get("kid")),
            ("Issued / expires", f"{decision.get('issued_at')} / {decision.get('expires_at')}"),
            ("Consumed", decision.get("consumed_at")),
            ("Revoked", decision.get("revoked_at")),
            ("Token check", decision.get("token_check")),
            ("Token SHA-256", decision.get("token_sha256")),
        ]
    )
    pdf.heading("Delivery", 12)
    pdf.grid(
        ["kind", "message id", "status", "attempts", "last error", "delivered at"],
        [
            [d["kind"], d["message_id"], d["status"], d["attempts"], d["last_error"], d["delivered_at"]]
            for d in packet["deliveries"]["outbox"]
        ],
        (18, 50, 20, 16, 46, 30),
    )
    pdf.heading("Consumption, outcome, revocation", 12)
    pdf.pairs(
        [
            ("Consumption", packet["consumption"]),
            ("Outcome", packet["outcome"]),
            ("Revocation", packet["revocation"]),
        ]
    )
    pdf.heading("State changes", 12)
    pdf.grid(
        ["at (UTC)", "actor", "from", "to", "reason"],
        [[t["at"], t["actor"], t["from"], t["to"], t["reason"]] for t in packet["transitions"]],
        (34, 36, 26, 26, 58),
    )
    pdf.heading("Audit events", 12)
    pdf.grid(
        ["seq", "at (UTC)", "verb", "hash"],
        [[e["seq"], e["at"], e["verb"], e["hash"]] for e in packet["events"]],
        (10, 26, 26, 118),  # a whole sha256 hash on one line
    )
    checkpoint = packet["covering_checkpoint"]
    pdf.paragraph(
        f"Covered by the checkpoint signed at seq {checkpoint['seq']} ({checkpoint['at']}, key "
        f"{checkpoint['kid']})."
        if checkpoint
        else "No checkpoint covers these events yet."
    )
    out.write(bytes(pdf.output()))
