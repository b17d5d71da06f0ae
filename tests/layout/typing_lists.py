"""The two lists of the typing ratchet, read and regenerated.

The strict list is the `module = [...]` of the `[[tool.mypy.overrides]]` block in pyproject.toml that
sets `disallow_untyped_defs = true`; mypy checks those modules with that block's flags on every run.
Every other product module is named in `tests/layout/not_yet_strict.txt`, the baseline.
tests/layout/test_typing_ratchet.py holds the two lists to the tree.

    .venv/bin/python tests/layout/typing_lists.py          # rewrite both lists from a strict mypy run
    .venv/bin/python tests/layout/typing_lists.py --check  # write nothing; exit 1 if a list is stale

The strict run is mypy over the product packages with the block's flags turned on for every module: a
module with no error there is strict, the rest are not yet. A module whose names another module
imports without an explicit re-export is kept off the strict list too (`implicit_reexport = false`
would fail its importer). The run keeps its own cache (.mypy_cache/strict) so that the everyday run's
cache stays warm.
"""

import argparse
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
BASELINE = ROOT / "tests" / "layout" / "not_yet_strict.txt"
PRODUCT_PACKAGES = (
    "accounts",
    "approvals",
    "audit",
    "authzen",
    "lib",
    "oauth",
    "reviewer",
    "signing_keys",
    "sso",
    "tenants",
)

BASELINE_HEADER = """\
# Product modules not yet checked strictly by mypy (the typing ratchet, docs/testing.md).
# This list only shrinks: a module leaves it for the strict list in pyproject.toml once it passes,
# and a new module joins the strict list, never this one.
# Regenerate both lists: .venv/bin/python tests/layout/typing_lists.py
"""
STRICT_MODULES = re.compile(r"(module = \[\n)((?:    \"[^\"]+\",\n)*)(\]\ndisallow_untyped_defs = true\n)")
ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):\d+: error: (?P<message>.*)$")
NOT_EXPORTED = re.compile(r'Module "(?P<module>[\w.]+)" does not explicitly export attribute')


def module_name(path: Path) -> str:
    """`approvals/web/views.py` -> `approvals.web.views`; a package's `__init__.py` is the package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def product_modules() -> set[str]:
    """Every module mypy checks as the product (pyproject.toml [tool.mypy] files, migrations excluded)."""
    return {
        module_name(path)
        for package in PRODUCT_PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    }


def test_modules() -> set[str]:
    """Every module of tests/ (`mypy tests` checks them)."""
    return {module_name(path) for path in (ROOT / "tests").rglob("*.py")}


def mypy_overrides() -> list[dict[str, Any]]:
    return tomllib.loads(PYPROJECT.read_text())["tool"]["mypy"]["overrides"]


def strict_override() -> dict[str, Any]:
    (block,) = [block for block in mypy_overrides() if block.get("disallow_untyped_defs") is True]
    return block


def strict_list() -> list[str]:
    modules = strict_override()["module"]
    assert isinstance(modules, list)
    return [str(module) for module in modules]


def baseline_list() -> list[str]:
    lines = (line.strip() for line in BASELINE.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def strict_flags() -> list[str]:
    """The strict block's settings as mypy's command-line flags, for every module at once."""
    flags = []
    for key, value in strict_override().items():
        if key == "module":
            continue
        if key == "implicit_reexport" and value is False:
            flags.append("--no-implicit-reexport")
        elif value is True:
            flags.append("--" + key.replace("_", "-"))
        else:
            raise ValueError(f"the strict block's {key} = {value!r} has no command-line flag here")
    return flags


def modules_failing_strict() -> set[str]:
    """The product modules with at least one error under the strict flags (one mypy run, ~20 s cold)."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / ".mypy_cache" / "strict"), *strict_flags()],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode not in (0, 1):  # 1: errors found; 2: mypy itself failed
        raise RuntimeError(f"mypy did not run (exit {result.returncode}):\n{result.stdout}{result.stderr}")
    failing = set()
    for line in result.stdout.splitlines():
        if match := ERROR.match(line):
            failing.add(module_name(ROOT / match["path"]))
            if exporter := NOT_EXPORTED.search(match["message"]):
                failing.add(exporter["module"])
    return failing


def write_lists(strict: list[str], baseline: list[str]) -> None:
    text = PYPROJECT.read_text()
    entries = "".join(f'    "{module}",\n' for module in strict)
    text, replaced = STRICT_MODULES.subn(lambda match: match[1] + entries + match[3], text)
    if replaced != 1:
        raise RuntimeError("pyproject.toml: no strict block (module = [...], then disallow_untyped_defs)")
    PYPROJECT.write_text(text)
    BASELINE.write_text(BASELINE_HEADER + "".join(f"{module}\n" for module in baseline))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a list is stale")
    arguments = parser.parse_args()

    modules = product_modules()
    failing = modules_failing_strict() & modules
    strict, baseline = sorted(modules - failing), sorted(failing)
    old_strict, old_baseline = set(strict_list()), set(baseline_list())
    changes = {
        "joins the strict list": sorted(set(strict) - old_strict),
        "leaves the strict list (the ratchet turns one way: fix it, unless it moved)": sorted(
            old_strict - set(strict)
        ),
        "joins the baseline": sorted(set(baseline) - old_baseline),
        "leaves the baseline": sorted(old_baseline - set(baseline)),
    }
    for what, names in changes.items():
        for name in names:
            print(f"{name}: {what}")
    print(f"{len(strict)} strict, {len(baseline)} not yet strict, of {len(modules)} product modules")
    if arguments.check:
        return 1 if any(changes.values()) else 0
    write_lists(strict, baseline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
