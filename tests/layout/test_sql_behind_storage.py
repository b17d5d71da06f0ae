"""SQL behind one door: a product module reads and writes through the ORM; hand-written SQL, the
connection's cursor and Django's internal row state live only in a storage module (`<app>/storage.py`
or `<app>/storage/`, each statement naming the bench row that keeps it and tested against its ORM twin)
or in the few infrastructure modules pyproject.toml exempts with a reason. Ruff's banned-api list
(TID251) catches the imports; this catches what an import list cannot see: a cursor reached through an
object, SQL written in an f-string, `_state` set by hand. The exemptions are the same list as ruff's:
the `per-file-ignores` entries that name TID251."""

import re
import tomllib
from fnmatch import fnmatch

import pytest

from tests.layout.test_layout import ROOT

pytestmark = pytest.mark.database_independent  # never reaches the suite's database

# The Django project's own packages (sdk/python/src is the agent-side gate, with a store of its own).
DJANGO_PACKAGES = ("approvals", "audit", "tenants", "accounts", "signing_keys", "lib", "sso", "reviewer")
HAND_SQL = {
    "a cursor": re.compile(r"\.cursor\s*\(|\bcursor\s*\.\s*execute(many)?\s*\("),
    "RawSQL": re.compile(r"\bRawSQL\b"),
    "execute_wrapper": re.compile(r"\bexecute_wrapper\b"),
    "QuerySet.raw/extra": re.compile(r"\bobjects\s*\.\s*(raw|extra)\s*\(|\)\s*\.\s*extra\s*\("),
    "_state by hand": re.compile(r"\._state\b"),
    "SQL in an f-string": re.compile(
        r"""\b[rR]?[fF][rR]?("|')[^"'\n]*\b(SELECT|INSERT\s+INTO|UPDATE|DELETE\s+FROM|FROM|WHERE|"""
        r"""LISTEN|NOTIFY|CREATE|ALTER|DROP|GRANT|REVOKE)\b"""
    ),
}


def exempt_patterns() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    ignores = config["tool"]["ruff"]["lint"]["per-file-ignores"]
    return [pattern for pattern, rules in ignores.items() if "TID251" in rules]


def checked_modules():
    exempt = exempt_patterns()
    for package in DJANGO_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = str(path.relative_to(ROOT))
            if "migrations" in path.parts or any(fnmatch(relative, pattern) for pattern in exempt):
                continue
            yield relative, path


def test_the_exemptions_are_storage_modules_and_named_infrastructure():
    """A new exemption is a decision: it goes here with its reason in pyproject.toml."""
    assert sorted(exempt_patterns()) == [
        "**/storage.py",
        "**/storage/**",
        "bench/**",
        "tests/**",
    ]


def test_storage_modules_are_exempt_and_product_modules_are_not():
    exempt = exempt_patterns()
    assert any(fnmatch("approvals/storage/halts.py", pattern) for pattern in exempt)
    assert any(fnmatch("audit/storage/roles.py", pattern) for pattern in exempt)
    assert any(fnmatch("lib/storage/held_writes.py", pattern) for pattern in exempt)
    assert not any(fnmatch("approvals/services/halts.py", pattern) for pattern in exempt)
    assert not any(fnmatch("approvals/policy/history.py", pattern) for pattern in exempt)


def test_only_storage_modules_write_sql_or_reach_the_cursor():
    offenders = [
        f"{relative}:{number}: {what}: {line.strip()}"
        for relative, path in checked_modules()
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        for what, pattern in HAND_SQL.items()
        if pattern.search(line)
    ]
    assert offenders == [], "\n".join(offenders)
