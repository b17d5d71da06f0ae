"""The repository speaks of the product, not of how its work was organised. A benchmark run is named by
its date and commit, never by a numbered stretch of the team's time, and nothing cites a tracker entry
(a "#" or "GH-" and a number, or the word issue and one): a reader next year has neither the team's
notes nor the tracker, and a date and a commit can be looked up with git.

"Session" alone stays a word of the product (a browser's Django session, an SSO session, PostgreSQL
sessions); only the word followed by a number is the team's. Every tracked text file is read,
and every tracked path (a results folder's name is a record too)."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The examples below are written in two parts, so that this file reads clean to its own scan.
S, R = "session", "round"

pytestmark = pytest.mark.database_independent  # reads files only

WORK_PERIOD = re.compile(
    r"\bsessions?[ _-]?\d+"  # the word and a number, with a space, "_", "-" or nothing between
    r"|\brounds? \d+\b"  # the other word and a number
    r"|\b(?:this|last|previous) round\b"  # ("the next round" is one of R4's measuring rounds)
    r"|\brounds ago\b"
    r"|\bwork periods?\b",
    re.IGNORECASE,
)
ISSUE_REFERENCE = re.compile(
    r"\bissues? ?#?\d"  # the word and a number, with or without "#"
    r"|\bissue #"
    r"|\bGH-\d"
    r"|\b(?:PR|pull request) ?#?\d"
    # "#" and a number standing as a word in prose; not one after a project's name (an upstream tracker
    # cited by name), an anchor ("file.md#1-push"), an entity ("&#8212;"), a colour as a value
    # ("color: #333", '"#000"') or SQL's "%#1".
    r"|(?:^|(?<=[\s(\[,]))(?<![:=]\s)#\d{1,6}(?![\w-])",
    re.IGNORECASE,
)
# Where "#" and digits mean a colour or a glyph, never a tracker.
COLOUR_SUFFIXES = {".css", ".svg"}
# Phrases that look like a citation and are the product's own words. Keep this short.
ALLOWED = (
    "Order #1182",  # a target as an agent writes it (approvals/policy/history.py and its test)
)


def tracked_paths() -> list[str]:
    try:
        listing = subprocess.run(  # noqa: S603 (git, a fixed argument list)
            ["git", "ls-files", "-z"],  # noqa: S607 (git from PATH)
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [name for name in listing.decode().split("\0") if name]


def text_lines(path: Path) -> list[str]:
    if not path.is_file():  # listed but removed in the working tree
        return []
    content = path.read_bytes()
    if b"\0" in content[:8192]:
        return []
    return content.decode("utf-8", errors="replace").splitlines()


def offenders(pattern: re.Pattern, *, skip_suffixes: frozenset[str] = frozenset()) -> list[str]:
    found = [f"{name}: the path" for name in tracked_paths() if pattern.search(name)]
    for name in tracked_paths():
        if Path(name).suffix in skip_suffixes:
            continue
        for number, line in enumerate(text_lines(ROOT / name), start=1):
            for phrase in ALLOWED:
                line = line.replace(phrase, "")
            if match := pattern.search(line):
                found.append(f"{name}:{number}: {match.group(0)!r} in {line.strip()[:120]}")
    return found


def test_no_tracked_file_or_path_names_a_work_period():
    assert offenders(WORK_PERIOD) == []


def test_no_tracked_file_cites_an_issue_number():
    assert offenders(ISSUE_REFERENCE, skip_suffixes=frozenset(COLOUR_SUFFIXES)) == []


@pytest.mark.parametrize(
    "text",
    [
        f"{S} 16's full run",
        f"bench/load/results/knee-{S}12-first",
        f"{S}s 7 and 14 had built this",
        f"{S.title()} 4: R2",
        f"the knees of {R} 3",
        f"0.35x last {R}",
        "fixed in issue " + "42",  # in two parts, so that test_layout's own scan does not find it here
        "see " + "#123",
        "GH" + "-77",
    ],
)
def test_the_patterns_find_what_they_are_for(text):
    assert WORK_PERIOD.search(text) or ISSUE_REFERENCE.search(text)


@pytest.mark.parametrize(
    "text",
    [
        "the person's session, device and memberships",
        "SESSION_COOKIE_AGE",
        '"session_step_up_300s"',
        "the SSO session at the identity provider",
        "other sessions on the test database ended first",
        "one round trip",
        "[a2a-extension](docs/agents/a2a-extension.md#1-push-notifications)",
        "color: #333;",
        "&#8212;",
        "django/channels#1234",
        "the run of 2026-12-06 on 7a8ee39",
        "# 2 seconds: a comment",
    ],
)
def test_the_patterns_leave_the_products_words_alone(text):
    assert not WORK_PERIOD.search(text)
    assert not ISSUE_REFERENCE.search(text)
