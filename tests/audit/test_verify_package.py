"""The offline verifier installs without a Reviewer checkout (sdk/verify, `reviewer-verify`) and checks a
bundle against pinned keys with the command the bundle's README names."""

import json
import os
import subprocess
import sys
import zipfile

import pytest

from audit.chain.checkpoints import verification_jwks
from tests.audit.util import ROOT, export_bundle, lifecycle

pytestmark = pytest.mark.django_db


def run(*args, cwd, check=True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """`reviewer-verify` from the package's wheel, in a fresh virtualenv that has no Reviewer in it."""
    build = tmp_path_factory.mktemp("reviewer-verify")
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "--wheel-dir",
        build,
        ROOT / "sdk/verify",
        cwd=build,
    )
    [wheel] = build.glob("reviewer_verify-*.whl")
    run(sys.executable, "-m", "venv", build / "venv", cwd=build)
    run(build / "venv/bin/python", "-m", "pip", "install", "--quiet", wheel, cwd=build)
    return build / "venv/bin/reviewer-verify"


def test_the_installed_command_verifies_a_bundle_with_pinned_keys_and_refuses_a_changed_one(
    installed, agent, refund_policy, requester, reviewer_a, tenant, tmp_path
):
    lifecycle(agent, reviewer_a)
    bundle = export_bundle(tenant, tmp_path / "acme.zip")
    keys = tmp_path / "jwks.json"
    keys.write_text(json.dumps(verification_jwks()))
    with zipfile.ZipFile(bundle) as opened:
        readme = opened.read("README.txt").decode()
    assert "reviewer-verify acme.zip --jwks" in readme

    no_django = run(installed.parent / "python", "-c", "import audit", cwd=tmp_path, check=False)
    assert no_django.returncode != 0  # nothing of Reviewer is importable there
    verified = run(installed, bundle, "--jwks", keys, cwd=tmp_path)
    assert "OK" in verified.stdout

    changed = tmp_path / "changed.zip"
    with zipfile.ZipFile(bundle) as source, zipfile.ZipFile(changed, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "events.jsonl":
                assert b'"verdict":"approve"' in data  # the lines are RFC 8785 text (no spaces)
                data = data.replace(b'"verdict":"approve"', b'"verdict":"reject!"', 1)
            target.writestr(item, data)
    refused = run(installed, changed, "--jwks", keys, cwd=tmp_path, check=False)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "FAILED" in refused.stdout
    unpinned = run(installed, bundle, cwd=tmp_path, check=False)
    assert unpinned.returncode != 0 and "--jwks" in unpinned.stdout + unpinned.stderr


def test_an_unreachable_jwks_url_is_named_as_such_not_as_a_broken_bundle(tmp_path):
    """The verifier reads the keys before the bundle, and says which of the two it could not read."""
    import socket
    import zipfile

    from tests.audit.util import verify_offline

    with socket.socket() as probe:  # a loopback port nobody listens on: the connection is refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bundle = tmp_path / "acme.zip"
    with zipfile.ZipFile(bundle, "w") as archive:
        archive.writestr("manifest.json", "{}")
    url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    for target in (bundle, tmp_path / "export.jsonl"):
        target.touch()
        checked = verify_offline(target, "--jwks", url)
        assert checked.returncode == 2
        assert checked.stdout.startswith(f"cannot read the keys from {url}:"), checked.stdout
        assert "cannot read the bundle" not in checked.stdout
