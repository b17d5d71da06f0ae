"""The PDF document the reports and evidence packets are drawn on (fpdf2): fonts, headings, tables, charts."""

import json
import re
from datetime import datetime
from pathlib import Path

from django.conf import settings
from fpdf import FPDF
from fpdf.fonts import FontFace

from audit.metrics import charts
from audit.shapes import format_time
from lib import agent_text

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
# Where a word too long for its column may wrap: after the separators of ids, times, paths and hashes.
_AFTER_SEPARATOR = re.compile(r"(?:[-_:/.@=,+|]|(?<=\d)T)(?=\S)")
GRID_PADDING = 0.8
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
        # ([U+202E]), so it cannot reorder or hide what the reader sees (lib/agent_text.py).
        value = agent_text.visible(value)
        return value if self.unicode else value.encode("latin-1", "replace").decode("latin-1")

    def breakable(self, text: str, width: float) -> str:
        """`text` laid out in lines of at most `width`, joined with newlines: between words, and inside
        a word only when the word alone is longer than a line, then after the separators of ids, times
        and paths ("2026-12-01T10:00", a UUID, "order:1182"). A word that fits a line of its own starts
        one rather than being split ("refunds@1" stays whole), and no invisible character is added, so
        text copied from the PDF is the text (a zero-width space marked the break chances before)."""
        lines: list[str] = []
        line = ""
        for paragraph in text.split("\n"):
            for word in paragraph.split(" "):
                joined = f"{line} {word}" if line else word
                if self.get_string_width(joined) <= width:
                    line = joined
                    continue
                if line:
                    lines.append(line)
                    line = ""
                if self.get_string_width(word) <= width:
                    line = word
                    continue
                for piece in _AFTER_SEPARATOR.sub("\\g<0>\n", word).split("\n"):
                    joined = line + piece
                    if line and self.get_string_width(joined) > width:
                        lines.append(line)
                        joined = piece
                    line = joined  # a piece longer than a line is left to fpdf2, which breaks anywhere
            lines.append(line)
            line = ""
        return "\n".join(lines)

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
            padding=GRID_PADDING,
            cell_fill_color=(246, 247, 249),
            cell_fill_mode="ROWS",
            headings_style=FontFace(emphasis="BOLD", fill_color=(225, 229, 235)),
        ) as table:
            # A little under the cell's inner width, so fpdf2 keeps each line breakable() made.
            inner = [self.epw * width / sum(widths) - 2 * GRID_PADDING - 0.5 for width in widths]
            heading = table.row()
            for text in headings:
                heading.cell(self.clean(text))
            for values in rows:
                row = table.row()
                for value, width in zip(values, inner, strict=False):
                    row.cell(self.breakable(self.clean(value), width))
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


def percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"
