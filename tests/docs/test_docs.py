"""The documentation stays true to the code: every policy field and every error code the code knows is
documented, the docs name no path outside the repository, and every relative link resolves.

The facts are read from the source with `ast` (no Django, no database), found by what they are rather
than by module path, so the tests keep working when modules move: the policy fields are the
`VERSION_FIELDS` assignment, error codes are the `code` argument of every call to something whose
signature has a `code` parameter (ServiceError and its subclasses, HostileInput, PushError, GateError,
error_body and the views' error helpers), plus the `(code, message)` pairs returned by the refusal
helpers and the literal `{"code": ...}` of the overload guard.
"""

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Every package of the product at the top of the repository (found, not listed, so a new one counts).
NOT_PRODUCT = {"tests", "bench", "examples"}
PRODUCT_DIRS = sorted(
    path.name for path in ROOT.iterdir() if (path / "__init__.py").exists() and path.name not in NOT_PRODUCT
)

pytestmark = pytest.mark.database_independent  # never reaches the suite's database
GATE_SOURCE = ROOT / "sdk" / "python" / "src" / "reviewer_gate"


def gate_sources() -> list[Path]:
    # testing.py is the fake Reviewer agents test against; the faults it stages are not Reviewer's codes.
    return sorted(path for path in GATE_SOURCE.glob("*.py") if path.name != "testing.py")


CODE = re.compile(r"[a-z][a-z0-9_]*")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def product_sources() -> list[Path]:
    return sorted(
        path
        for folder in PRODUCT_DIRS
        for path in (ROOT / folder).rglob("*.py")
        if "migrations" not in path.parts
    )


@cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


# ---------------------------------------------------------------------------------------------------
# Policy fields


def assigned_strings(name: str) -> list[str]:
    """The strings of the tuple, list or set literal assigned to `name` somewhere in the product."""
    for path in product_sources():
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == name for target in node.targets
            ):
                assert isinstance(node.value, ast.Tuple | ast.List | ast.Set), f"{name} is not a literal"
                return [
                    element.value
                    for element in node.value.elts
                    if isinstance(element, ast.Constant) and isinstance(element.value, str)
                ]
    raise AssertionError(f"no assignment to {name} in {PRODUCT_DIRS}")


def documented_fields(heading: str) -> set[str]:
    """The backticked names in the first column of the first table under `heading` in policy-format.md."""
    text = (ROOT / "docs" / "policy-format.md").read_text()
    section = text.split(heading, 1)[1]
    rows = []
    for line in section.splitlines()[1:]:
        if line.startswith("#"):
            break
        if line.startswith("| `"):
            rows.append(line)
        elif rows and not line.startswith("|"):
            break
    names = [re.match(r"\| `([^`]+)`", row) for row in rows]
    assert all(names), rows
    return {name.group(1) for name in names if name}


def test_every_policy_field_the_validator_accepts_is_documented_and_no_other():
    accepted = set(assigned_strings("VERSION_FIELDS"))
    assert "consume_online" in accepted  # the validator was found, not some other tuple
    assert documented_fields("## Fields") == accepted


def test_every_break_glass_key_the_validator_accepts_is_documented_and_no_other():
    assert documented_fields("### break_glass") == set(assigned_strings("RULE_KEYS"))


# ---------------------------------------------------------------------------------------------------
# Error codes


def _code_parameters(tree: ast.Module) -> dict[str, int]:
    """name -> position of its `code` argument at a call, for every function and class whose signature
    has a `code` parameter (a class through its __init__), in one module."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            names = [arg.arg for arg in node.args.args]
            if "code" in names:
                found[node.name] = names.index("code") - (1 if names[:1] == ["self"] else 0)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    names = [arg.arg for arg in item.args.args][1:]
                    if "code" in names:
                        found[node.name] = names.index("code")
    return found


def _subclasses(trees: list[ast.Module], roots: dict[str, int]) -> dict[str, int]:
    """Classes that inherit their constructor from one of `roots` (ServiceError's subclasses)."""
    known = dict(roots)
    changed = True
    while changed:
        changed = False
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name not in known:
                    for base in node.bases:
                        name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
                        if name in known:
                            known[node.name] = known[name]
                            changed = True
                            break
    return known


def _called_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def raised_codes(paths: list[Path]) -> dict[str, str]:
    """code -> where it is first raised, over the given sources."""
    trees = [parsed(path) for path in paths]
    positions: dict[str, int] = {}
    for tree in trees:
        positions.update(_code_parameters(tree))
    positions = _subclasses(trees, positions)
    codes: dict[str, str] = {}

    def keep(value, path: Path, node: ast.expr | ast.stmt) -> None:
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and CODE.fullmatch(value.value):
            codes.setdefault(value.value, f"{path.relative_to(ROOT)}:{node.lineno}")

    for path, tree in zip(paths, trees, strict=True):
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and (called := _called_name(node)) is not None
                and called in positions
            ):
                position = positions[called]
                keyword = next((k.value for k in node.keywords if k.arg == "code"), None)
                keep(keyword if keyword is not None else (node.args + [None] * 9)[position], path, node)
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "code":
                        keep(value, path, node)
            elif isinstance(node, ast.FunctionDef) and re.search("refusal|ineligib", node.name):
                # refusal helpers answering (code, message): ineligibility, the break-glass amount check
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Return) and isinstance(inner.value, ast.Tuple):
                        keep(inner.value.elts[0], path, inner)
    return codes


def documented_codes() -> set[str]:
    return set(re.findall(r"`([a-z][a-z0-9_]*)`", (ROOT / "docs" / "agents" / "errors.md").read_text()))


def test_the_code_scan_finds_the_codes_it_must():
    """The scan below is only as good as what it finds: known codes of each kind of refusal."""
    codes = raised_codes(product_sources())
    for code in (
        "digest_mismatch",
        "stale_rev",
        "too_deep",
        "invalid_shape",
        "overloaded",
        "self_approval",
        "over_cap",
        "no_reviewers",
        "unknown_type",
        "invalid_policy",
    ):
        assert code in codes, code
    assert "replayed" in raised_codes(gate_sources())


@pytest.mark.parametrize(
    "sources",
    [pytest.param(product_sources, id="reviewer"), pytest.param(gate_sources, id="gate")],
)
def test_every_error_code_raised_is_in_errors_md(sources):
    documented = documented_codes()
    missing = {code: where for code, where in raised_codes(sources()).items() if code not in documented}
    assert not missing, f"error codes missing from docs/agents/errors.md: {missing}"


# ---------------------------------------------------------------------------------------------------
# Paths and links


def test_readme_and_docs_name_no_path_outside_the_repository():
    for page in doc_pages():
        assert "../shared" not in page.read_text(), page.relative_to(ROOT)


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#{1,6} (.+)$", page.read_text(), re.M)
    return {github_anchor(heading) for heading in headings}


LINKED_PAGES = [
    *doc_pages(),
    ROOT / "CHANGELOG.md",
    ROOT / "sdk" / "python" / "CHANGELOG.md",
    ROOT / "bench" / "README.md",
    ROOT / "bench" / "HISTORY.md",
]


@pytest.mark.parametrize("page", LINKED_PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves_to_a_file_in_the_repository(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # links in code blocks are not links
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if ROOT not in resolved.parents and resolved != ROOT:
            broken.append(f"{target} (outside the repository)")
        elif not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target} (no such heading)")
    assert not broken, broken


# A path in backticks that starts with one of the repository's folders, e.g. `approvals/agent_api/wire.py`.
FOLDERS = "|".join(sorted({*PRODUCT_DIRS, "sdk", "examples", "bench", "tests", "deploy"}))
REPO_PATH = re.compile(rf"`((?:{FOLDERS})/[\w./-]*)`")


@pytest.mark.parametrize("page", LINKED_PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_repository_path_a_page_names_exists(page):
    """Modules move; a page that names one by its path must follow."""
    missing = [path for path in REPO_PATH.findall(page.read_text()) if not (ROOT / path).exists()]
    assert not missing, missing


# ---------------------------------------------------------------------------------------------------
# The front page


def test_readme_keeps_the_sections_other_pages_refer_to_and_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    headings = set(re.findall(r"^## (.+)$", readme, re.M))
    for name in (
        "Two commands",
        "Reviewing",
        "Administering",
        "Compliance",
        "First deployment",
        "Security model",
        "Connect your agent",
        "Changes to the contract",
    ):
        assert name in headings, name
    commands_match = re.search(r"## Two commands.*?```sh\n(.*?)```", readme, re.S)
    assert commands_match is not None
    commands = commands_match.group(1)
    assert [line.split()[:2] for line in commands.splitlines()] == [["make", "demo"], ["make", "test"]]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
