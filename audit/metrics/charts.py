"""Chart geometry for server-rendered SVG (templates/audit/_chart.html) and the PDF report.

Python computes where the bars go; the template only draws them, so the page needs no JavaScript and
no chart library, and the PDF draws the very same shapes.
"""

import math
from dataclasses import dataclass, field

from audit.metrics.queue import FIRST_OUTCOMES

# Colours chosen to stay distinguishable for the common colour-vision deficiencies (Okabe-Ito palette);
# every chart also has a legend and a table with the same numbers.
COLOURS = {
    "approved": "#009E73",
    "allowed": "#56B4E9",
    "rejected": "#D55E00",
    "denied": "#CC79A7",
    "info_requested": "#E69F00",
    "expired": "#999999",
    "superseded": "#0072B2",
    "cancelled": "#666666",
    "other": "#0072B2",
    "open": "#DDDDDD",
}
LABELS = {
    "approved": "approved",
    "allowed": "allowed by policy",
    "rejected": "rejected",
    "denied": "denied by policy",
    "info_requested": "info requested",
    "expired": "expired",
    "superseded": "superseded",
    "cancelled": "cancelled",
    "other": "other",
    "open": "still open",
}


@dataclass
class Rect:
    x: float
    y: float
    w: float
    h: float
    fill: str
    title: str


@dataclass
class Text:
    x: float
    y: float
    text: str
    anchor: str = "start"


@dataclass
class Line:
    x1: float
    y1: float
    x2: float
    y2: float


@dataclass
class Chart:
    title: str
    description: str
    width: int
    height: int
    rects: list[Rect] = field(default_factory=list)
    texts: list[Text] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)  # (colour, label)

    @property
    def empty(self) -> bool:
        return not self.rects

    @property
    def dom_id(self) -> str:
        return "chart-" + "".join(c if c.isalnum() else "-" for c in self.title.lower())


def _nice_max(value: int) -> int:
    if value <= 5:
        return max(value, 1)
    magnitude = 10 ** int(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * magnitude:
            return int(step * magnitude)
    return value


def stacked_columns(
    title: str,
    description: str,
    columns: list[tuple[str, dict[str, int]]],
    categories: list[str],
    width: int = 720,
    height: int = 240,
) -> Chart:
    """One column per label (e.g. a day), stacked by category."""
    chart = Chart(title, description, width, height)
    left, right, top, bottom = 40, 10, 10, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    totals = [sum(counts.get(c, 0) for c in categories) for _, counts in columns]
    top_value = _nice_max(max(totals, default=0))
    chart.lines.append(Line(left, top + plot_h, left + plot_w, top + plot_h))
    for fraction in (0, 0.5, 1):
        y = top + plot_h - plot_h * fraction
        chart.texts.append(Text(left - 6, y + 4, f"{top_value * fraction:g}", "end"))
        if fraction:
            chart.lines.append(Line(left, y, left + plot_w, y))
    if not columns:
        return chart
    slot = plot_w / len(columns)
    bar = max(1.0, slot * 0.8)
    label_every = max(1, math.ceil(len(columns) / 10))
    for index, (label, counts) in enumerate(columns):
        x = left + index * slot + (slot - bar) / 2
        y = top + plot_h
        for category in categories:
            value = counts.get(category, 0)
            if not value:
                continue
            h = plot_h * value / top_value
            y -= h
            chart.rects.append(
                Rect(
                    round(x, 2),
                    round(y, 2),
                    round(bar, 2),
                    round(h, 2),
                    COLOURS[category],
                    f"{label}: {value} {LABELS[category]}",
                )
            )
        # Counted from the last column, so the latest day is always labelled.
        if (len(columns) - 1 - index) % label_every == 0:
            chart.texts.append(Text(round(x + bar / 2, 2), top + plot_h + 16, label, "middle"))
    chart.legend = [(COLOURS[c], LABELS[c]) for c in categories]
    return chart


def stacked_shares(
    title: str,
    description: str,
    rows: list[tuple[str, dict[str, int]]],
    categories: list[str],
    width: int = 720,
) -> Chart:
    """One horizontal 100% bar per label (e.g. a policy version): the share of each outcome."""
    row_h, gap, left, right, top = 18, 8, 170, 50, 6
    height = top + len(rows) * (row_h + gap) + 6
    chart = Chart(title, description, width, max(height, 30))
    plot_w = width - left - right
    for index, (label, counts) in enumerate(rows):
        y = top + index * (row_h + gap)
        total = sum(counts.get(c, 0) for c in categories)
        chart.texts.append(
            Text(left - 6, y + row_h - 5, label if len(label) <= 26 else label[:25] + "…", "end")
        )
        chart.texts.append(Text(left + plot_w + 6, y + row_h - 5, str(total)))
        x = float(left)
        for category in categories:
            value = counts.get(category, 0)
            if not value or not total:
                continue
            w = plot_w * value / total
            chart.rects.append(
                Rect(
                    round(x, 2),
                    y,
                    round(w, 2),
                    row_h,
                    COLOURS[category],
                    f"{label}: {value} of {total} {LABELS[category]} ({value / total:.1%})",
                )
            )
            x += w
    chart.legend = [(COLOURS[c], LABELS[c]) for c in categories]
    return chart


DAY_CATEGORIES = ["approved", "rejected", "expired", "other", "open"]
# The outcome shares show every first outcome, in the order audit.metrics.queue counts them.
SHARE_CATEGORIES = list(FIRST_OUTCOMES)


def metric_charts(metrics) -> list[Chart]:
    """The charts of the metrics page and the PDF report, from an audit.metrics.Metrics."""
    return [
        stacked_columns(
            "Proposals per day",
            "Proposals submitted each day (UTC), coloured by their first outcome.",
            [(day.strftime("%m-%d"), counts) for day, counts in metrics.days()],
            DAY_CATEGORIES,
        ),
        stacked_shares(
            "Outcomes by policy version",
            "Share of each first outcome among the closed proposals a policy version evaluated.",
            [(g.label, g.outcomes) for g in metrics.by_policy.values()],
            SHARE_CATEGORIES,
        ),
        stacked_shares(
            "Outcomes by tool",
            "Share of each first outcome among the closed proposals per tool.",
            [(g.label, g.outcomes) for g in metrics.by_tool.values()],
            SHARE_CATEGORIES,
        ),
    ]
