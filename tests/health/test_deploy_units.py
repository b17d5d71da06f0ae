"""The systemd units in deploy/systemd are valid as systemd reads them (`systemd-analyze verify`), with
the checkout standing in for /opt/reviewer; their probes are the ones this checkout has."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")

pytestmark = pytest.mark.database_independent


@pytest.mark.skipif(not SYSTEMD_ANALYZE, reason="needs systemd-analyze (Debian's systemd package)")
def test_the_units_pass_systemd_analyze_verify(tmp_path):
    for unit in UNITS.glob("*.service"):
        text = (
            unit.read_text()
            .replace("/opt/reviewer", str(ROOT))
            .replace("/usr/bin/curl", shutil.which("curl") or "/usr/bin/curl")
        )
        (tmp_path / unit.name).write_text(text)
    shutil.copy(UNITS / "reviewer.target", tmp_path)
    verified = subprocess.run(
        [
            str(SYSTEMD_ANALYZE),
            "verify",
            "--man=no",
            "reviewer-daphne@8000.service",
            "reviewer-worker.service",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    complaints = [line for line in (verified.stdout + verified.stderr).splitlines() if line.strip()]
    assert (verified.returncode, complaints) == (0, [])


def test_the_daphne_unit_probes_what_the_proxy_probes():
    caddy = (ROOT / "deploy" / "Caddyfile").read_text()
    unit = (UNITS / "reviewer-daphne@.service").read_text()
    found = re.search(r"health_uri (\S+)", caddy)
    assert found is not None
    probed = found.group(1)
    assert f"http://127.0.0.1:%i{probed}" in unit


def test_the_worker_unit_waits_for_the_first_tick_with_worker_health():
    unit = (UNITS / "reviewer-worker.service").read_text()
    assert (
        "ExecStartPost=/opt/reviewer/.venv/bin/python manage.py worker_health --pid $MAINPID --wait 60"
        in unit
    )
