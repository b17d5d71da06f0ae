"""The line counts of docs/agents/connecting.md are recounted from the examples: what a user adds to an
existing agent to gate a tool is marked in each runnable example between `# reviewer: begin` and
`# reviewer: end` (`//` in JavaScript; `begin description` for the tool's optional ToolDescription),
and the table says how many code lines (not blank, not comment) those regions hold."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "agents" / "connecting.md"
HEADING = "## How many lines each path adds"
EXAMPLES = ["examples/connect/*.py", "examples/js/*.js", "examples/protected_api/*.py"]

pytestmark = pytest.mark.database_independent  # reads files only


def marked_lines(path: Path) -> tuple[int, int]:
    """(code lines in the file's reviewer regions, of them in `begin description` regions)."""
    comment = "//" if path.suffix == ".js" else "#"
    region, total, described = None, 0, 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.strip()
        if text in (f"{comment} reviewer: begin", f"{comment} reviewer: begin description"):
            assert region is None, f"{path}:{number}: a region begins inside another"
            region = "description" if text.endswith("description") else "code"
        elif text == f"{comment} reviewer: end":
            assert region is not None, f"{path}:{number}: a region ends that did not begin"
            region = None
        elif "reviewer:" in text and text.startswith(comment):
            pytest.fail(f"{path}:{number}: a reviewer marker the count does not know: {text}")
        elif region is not None and text and not text.startswith(comment):
            total += 1
            described += region == "description"
    assert region is None, f"{path}: a region never ends"
    return total, described


def table_rows() -> list[dict[str, str]]:
    section = PAGE.read_text().split(HEADING, 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header == ["path", "lines added", "of them, the tool's description", "counted in"], header
    return [
        dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        for line in lines[2:]
    ]


def files_of(row: dict[str, str]) -> list[Path]:
    return [ROOT / name for name in re.findall(r"`([^`]+\.(?:py|js))`", row["counted in"])]


def test_every_count_in_the_table_is_the_examples_marked_lines():
    for row in table_rows():
        files = files_of(row)
        if not files:  # a command (the MCP gateway)
            assert row["lines added"] == "0", row
            continue
        counts = [marked_lines(path) for path in files]
        recounted = (sum(total for total, _ in counts), sum(described for _, described in counts))
        stated = (int(row["lines added"]), int(row["of them, the tool's description"]))
        assert stated == recounted, f"{row['path']}: the table says {stated}, the examples {recounted}"


def test_every_marked_example_is_counted_in_the_table():
    counted = {path for row in table_rows() for path in files_of(row)}
    marked = {path for pattern in EXAMPLES for path in ROOT.glob(pattern) if marked_lines(path) != (0, 0)}
    assert marked - counted == set(), "marked examples the table does not count"
    assert all(path.exists() for path in counted)
