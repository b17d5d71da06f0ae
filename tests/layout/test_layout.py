"""The layout's facts, read off the files as a newcomer would: every product module is short enough to
read at once, `approvals/` and `sso/` keep their capabilities in sub-packages (sso's each saying what
lives there), no comment points at an issue tracker entry (a number means nothing to whoever reads the
code next; a comment says why instead), and
a fact with one home is not written again elsewhere (two copies drift: the risk rank did)."""

import ast
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = (
    "approvals",
    "audit",
    "tenants",
    "accounts",
    "signing_keys",
    "lib",
    "sso",
    "health",
    "reviewer",
    "sdk/python/src",
)

pytestmark = pytest.mark.database_independent  # never reaches the suite's database
# Module length is a hint, not a cut line: past REVIEW_LINES a module is listed as a warning for a
# reviewer to weigh (split where a reader's question splits, never to get under a number); past
# MAX_LINES nobody reads it in one sitting, and the test fails.
REVIEW_LINES = 450
MAX_LINES = 900
MAX_APPROVALS_TOP_LEVEL = 15
MAX_SSO_TOP_LEVEL = 12
# Our own tracker's numbers (the word issue, point or item, then a number); an upstream project's issue
# is cited as project#N and is not matched.
ISSUE_REFERENCE = re.compile(r"\bissues? #?\d|\bpoints? \d+\b|\bitem \d", re.IGNORECASE)
SCANNED_FOR_REFERENCES = (*PRODUCT, "tests", "templates", "static", "docs", "bench", "examples", "sdk/python")
TEXT_SUFFIXES = {".py", ".html", ".md", ".txt", ".css", ".js", ".toml", ".yml", ".yaml"}
# The changelogs record what changed and may name where it was asked for; migrations are generated.
NOT_SCANNED = {"CHANGELOG.md"}


def product_modules():
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def scanned_text_files():
    seen = set()
    for folder in SCANNED_FOR_REFERENCES:
        for path in sorted((ROOT / folder).rglob("*")):
            if path in seen or not path.is_file() or path.suffix not in TEXT_SUFFIXES:
                continue
            if path.name in NOT_SCANNED or {"migrations", "node_modules", "vendor"} & set(path.parts):
                continue
            seen.add(path)
            yield path


def test_no_product_module_is_longer_than_900_lines_and_long_ones_are_listed():
    lengths = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in product_modules()}
    long_ones = {path: lines for path, lines in lengths.items() if lines > REVIEW_LINES}
    if long_ones:
        warnings.warn(f"over {REVIEW_LINES} lines, for a reviewer to weigh: {long_ones}", stacklevel=1)
    assert {path: lines for path, lines in long_ones.items() if lines > MAX_LINES} == {}


def test_approvals_keeps_at_most_15_top_level_modules():
    top_level = sorted(path.name for path in (ROOT / "approvals").glob("*.py"))
    assert len(top_level) <= MAX_APPROVALS_TOP_LEVEL, top_level


def test_sso_keeps_at_most_12_top_level_modules():
    top_level = sorted(path.name for path in (ROOT / "sso").glob("*.py"))
    assert len(top_level) <= MAX_SSO_TOP_LEVEL, top_level


def test_every_sub_package_of_sso_opens_with_a_docstring_saying_what_lives_there():
    undocumented = [
        str(init.relative_to(ROOT))
        for init in sorted((ROOT / "sso").glob("*/__init__.py"))
        if "migrations" not in init.parts
        and "management" not in init.parts
        and not ast.get_docstring(ast.parse(init.read_text()))
    ]
    assert undocumented == []


def test_no_comment_or_document_cites_an_issue_number():
    citations = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in scanned_text_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
        if ISSUE_REFERENCE.search(line)
    ]
    assert citations == []


def modules_containing(pattern: re.Pattern) -> list[str]:
    return sorted(
        str(path.relative_to(ROOT)) for path in product_modules() if pattern.search(path.read_text())
    )


def test_base64url_is_written_once_in_the_app_and_once_in_the_gate_package():
    """lib/base64url.py for Reviewer; its own in the two packages installed without it: reviewer_gate
    (its fake Reviewer) and reviewer-verify (audit/verify/, which imports only within its folder)."""
    assert modules_containing(re.compile(r"urlsafe_b64(en|de)code")) == [
        "audit/verify/chains.py",
        "lib/base64url.py",
        "sdk/python/src/reviewer_gate/testing.py",
    ]


def test_the_risk_levels_are_listed_once():
    """approvals/models/risk.py; every other module names them through Risk."""
    levels = re.compile(r"""["']low["'][^\n]*["']high["']|["']high["'][^\n]*["']low["']""")
    assert modules_containing(levels) == []


def test_the_decision_token_constants_come_from_reviewer_gate():
    """Reviewer signs what the gate accepts: the typ and the extension URI are written only in the gate,
    and again in the gate package's fake Reviewer (reviewer_gate.testing), on purpose: a fake that signs
    the typ of its own makes the gate's tests fail should the gate's constant ever change."""
    constants = re.compile(r"""["'](approval-decision\+jwt|urn:reviewer:a2a:approval:v1)["']""")
    assert modules_containing(constants) == [
        "sdk/python/src/reviewer_gate/decision.py",
        "sdk/python/src/reviewer_gate/testing.py",
    ]
