"""The offline verifier as a wheel a running Reviewer serves (`/audit/reviewer-verify/<wheel name>`), so a
compliance laptop installs it with `pip install <that URL>` and needs neither a package index nor a
Reviewer checkout: no `reviewer-verify` distribution is published.

The wheel holds what sdk/verify/'s build holds: audit/verify/ as the package `reviewer_verify`, its
dependencies and its `reviewer-verify` command, at the version sdk/verify/pyproject.toml names. It is
written here with zipfile (a wheel is a zip with a .dist-info folder, PEP 427 and PEP 376), built once
per process: a build backend is not among Reviewer's run-time dependencies.
"""

import hashlib
import io
import tomllib
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

from lib import base64url

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "audit" / "verify"
PROJECT = ROOT / "sdk" / "verify" / "pyproject.toml"
PACKAGE = "reviewer_verify"
# A fixed time for every entry, so the same sources give the same bytes.
ENTRY_TIME = (2026, 1, 1, 0, 0, 0)


def _project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads(PROJECT.read_text())["project"]
    return project


def wheel_name() -> str:
    return f"{PACKAGE}-{_project()['version']}-py3-none-any.whl"


def install_url() -> str:
    """What `pip install` takes: the wheel at this Reviewer (REVIEWER_ISSUER), by its full name."""
    from django.conf import settings
    from django.urls import reverse

    path = reverse("audit:verifier_wheel", kwargs={"filename": wheel_name()})
    return f"{settings.REVIEWER_ISSUER.rstrip('/')}{path}"


def _record_line(name: str, data: bytes) -> str:
    return f"{name},sha256={base64url.encode(hashlib.sha256(data).digest())},{len(data)}"


def _metadata(project: dict[str, Any]) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project['description']}",
        f"Requires-Python: {project['requires-python']}",
        *(f"Requires-Dist: {requirement}" for requirement in project["dependencies"]),
    ]
    return "\n".join(lines) + "\n"


@cache
def wheel_bytes() -> bytes:
    """The wheel, built from the files this Reviewer runs."""
    project = _project()
    dist_info = f"{PACKAGE}-{project['version']}.dist-info"
    files: list[tuple[str, bytes]] = [
        (f"{PACKAGE}/{path.name}", path.read_bytes()) for path in sorted(SOURCE.glob("*.py"))
    ]
    scripts = "".join(f"{name} = {target}\n" for name, target in project["scripts"].items())
    files += [
        (f"{dist_info}/METADATA", _metadata(project).encode()),
        (
            f"{dist_info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: reviewer\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        ),
        (f"{dist_info}/entry_points.txt", f"[console_scripts]\n{scripts}".encode()),
    ]
    record = [_record_line(name, data) for name, data in files] + [f"{dist_info}/RECORD,,"]
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files:
            wheel.writestr(zipfile.ZipInfo(name, ENTRY_TIME), data, zipfile.ZIP_DEFLATED)
    return buffer.getvalue()
