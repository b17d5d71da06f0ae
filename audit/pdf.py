"""PDF documents for people (fpdf2): the audit report of a period and the evidence packet of a proposal.

The report's table of decisions is capped (AUDIT_PDF_MAX_ROWS): a PDF is for reading, and fpdf2 keeps
the document in memory; CSV, JSON Lines and the bundle carry every row.
"""

import json
import logging
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.utils import timezone
from fpdf import FPDF
from fpdf.fonts import FontFace

from audit import charts
from audit.chain import format_time
from audit.metrics import FIRST_OUTCOMES, collect_steps, format_duration, rubber_stamp_min_sample
from audit.models import Verb
from audit.records import event_pages
from audit.verify_db import verify_chain_steps
from reviewer import agent_text

# fpdf2 subsets embedded fonts with fontTools, which logs every table it touches at INFO.
logging.getLogger("fontTools").setLevel(logging.WARNING)

FONT_CANDIDATES = [
    (
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf",
    ),
    ("/usr/share/fonts/dejavu/DejaVuSans.ttf", "/usr/share/fonts/dejavu/DejaVuSans-Bold.ttf"),
    (
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Bold.ttf",
    ),
]
CHART_SCALE = 180 / 720  # chart units to millimetres on A4 with 15 mm margins


def max_rows() -> int:
    return settings.AUDIT_PDF_MAX_ROWS


class Document(FPDF):
    """A4 portrait with a Unicode font when one is installed (agent text can be any language)."""

    def __init__(self, title: str):
        super().__init__(orientation="P", unit="mm", format="A4")
        self.doc_title = title
        self.set_margins(15, 15, 15)
        self.set_auto_page_break(True, margin=15)
        self.set_title(title)
        self.set_creator("Reviewer")
        self.family, self.unicode = "helvetica", False
        configured = settings.AUDIT_PDF_FONT
        candidates = [(configured, configured)] if configured else FONT_CANDIDATES
        for regular, bold in candidates:
            if Path(regular).exists() and Path(bold).exists():
                self.add_font("body", "", regular)
                self.add_font("body", "B", bold)
                self.family, self.unicode = "body", True
                break
        self.set_font(self.family, size=9)

    def clean(self, value) -> str:
        if isinstance(value, datetime):
            value = format_time(value)
        elif value is None:
            value = "–"
        elif not isinstance(value, str):
            value = json.dumps(value, ensure_ascii=False, default=str)
        # Agent text reaches every cell: a hidden or text-direction character is printed as its code
        # ([U+202E]), so it cannot reorder or hide what the reader sees (reviewer/agent_text.py).
        value = agent_text.visible(value)
        return value if self.unicode else value.encode("latin-1", "replace").decode("latin-1")

    def footer(self):
        self.set_y(-10)
        self.set_font(self.family, size=7)
        self.cell(0, 5, self.clean(f"{self.doc_title} — page {self.page_no()}/{{nb}}"), align="C")
        self.set_font(self.family, size=9)

    def heading(self, text: str, size: int = 13):
        self.set_font(self.family, "B", size)
        self.multi_cell(0, 7, self.clean(text), align="L", new_x="LMARGIN", new_y="NEXT")
        self.set_font(self.family, size=9)
        self.ln(1)

    def paragraph(self, text: str):
        self.multi_cell(0, 5, self.clean(text), align="L", new_x="LMARGIN", new_y="NEXT")
        self.ln(1)

    def pairs(self, rows: list[tuple[str, object]]):
        with self.table(
            col_widths=(45, 135),
            first_row_as_headings=False,
            text_align="LEFT",
            line_height=4.5,
            padding=1,
            cell_fill_color=(246, 247, 249),
            cell_fill_mode="EVEN_COLUMNS",
        ) as table:
            for key, value in rows:
                row = table.row()
                row.cell(self.clean(key), style=FontFace(emphasis="BOLD"))
                row.cell(self.clean(value))
        self.ln(3)

    def grid(self, headings: list[str], rows: list[list], widths: tuple):
        self.set_font(self.family, size=7.5)
        with self.table(
            col_widths=widths,
            text_align="LEFT",
            line_height=3.8,
            padding=0.8,
            cell_fill_color=(246, 247, 249),
            cell_fill_mode="ROWS",
            headings_style=FontFace(emphasis="BOLD", fill_color=(225, 229, 235)),
        ) as table:
            heading = table.row()
            for text in headings:
                heading.cell(self.clean(text))
            for values in rows:
                row = table.row()
                for value in values:
                    row.cell(self.clean(value))
        self.set_font(self.family, size=9)
        self.ln(3)

    def chart(self, chart: charts.Chart):
        self.heading(chart.title, 11)
        height = chart.height * CHART_SCALE
        if self.get_y() + height + 10 > self.h - 15:
            self.add_page()
        x0, y0 = self.l_margin, self.get_y()
        self.set_draw_color(180, 180, 180)
        for line in chart.lines:
            self.line(
                x0 + line.x1 * CHART_SCALE,
                y0 + line.y1 * CHART_SCALE,
                x0 + line.x2 * CHART_SCALE,
                y0 + line.y2 * CHART_SCALE,
            )
        for rect in chart.rects:
            self.set_fill_color(*_rgb(rect.fill))
            self.rect(
                x0 + rect.x * CHART_SCALE,
                y0 + rect.y * CHART_SCALE,
                rect.w * CHART_SCALE,
                rect.h * CHART_SCALE,
                style="F",
            )
        self.set_font(self.family, size=6)
        for text in chart.texts:
            width = self.get_string_width(self.clean(text.text))
            shift = {"start": 0, "middle": width / 2, "end": width}[text.anchor]
            self.text(x0 + text.x * CHART_SCALE - shift, y0 + text.y * CHART_SCALE, self.clean(text.text))
        self.set_y(y0 + height + 2)
        x = x0
        for colour, label in chart.legend:
            self.set_fill_color(*_rgb(colour))
            self.rect(x, self.get_y(), 3, 3, style="F")
            self.text(x + 4, self.get_y() + 2.6, self.clean(label))
            x += 6 + self.get_string_width(self.clean(label))
        self.set_font(self.family, size=9)
        self.set_fill_color(255, 255, 255)
        self.ln(7)


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _group_rows(groups) -> list[list]:
    return [
        [
            g.label,
            g.submitted,
            _pct(g.rate("approved")),
            _pct(g.rate("allowed")),
            _pct(g.rate("rejected")),
            _pct(g.rate("denied")),
            _pct(g.rate("expired")),
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
    decisions, truncated = [], False
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
        (24, 14, 46, 16, 34, 20, 26),
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
        (12, 38, 34, 96),
    )
    checkpoint = packet["covering_checkpoint"]
    pdf.paragraph(
        f"Covered by the checkpoint signed at seq {checkpoint['seq']} ({checkpoint['at']}, key "
        f"{checkpoint['kid']})."
        if checkpoint
        else "No checkpoint covers these events yet."
    )
    out.write(bytes(pdf.output()))
