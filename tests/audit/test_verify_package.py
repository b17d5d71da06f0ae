"""The offline verifier installs without a Reviewer checkout (sdk/verify, `reviewer-verify`) and checks a
bundle against pinned keys with the command the bundle's README names."""

import json
import os
import subprocess
import sys
import zipfile

import pytest
from django.conf import settings

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


def test_the_running_reviewer_serves_the_verifier_as_a_wheel_pip_installs_and_it_verifies(
    installed, agent, refund_policy, requester, reviewer_a, tenant, tmp_path, client
):
    """No package index has reviewer-verify: the audit page, the export page and a bundle's README say
    `pip install <this Reviewer>/audit/reviewer-verify/<wheel>`, which serves what sdk/verify builds."""
    from audit.exports import verifier_wheel

    url = verifier_wheel.install_url()
    path = url.removeprefix(settings.REVIEWER_ISSUER.rstrip("/"))
    response = client.get(path)  # no sign-in: pip cannot sign in
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    served = tmp_path / path.rsplit("/", 1)[1]
    served.write_bytes(response.content)
    assert client.get(path.replace(".whl", ".tar.gz")).status_code == 404

    [built] = installed.parents[2].glob("reviewer_verify-*.whl")
    with zipfile.ZipFile(served) as ours, zipfile.ZipFile(built) as theirs:
        assert served.name == built.name
        package = sorted(n for n in ours.namelist() if n.startswith("reviewer_verify/"))
        assert package == sorted(n for n in theirs.namelist() if n.startswith("reviewer_verify/"))
        assert all(ours.read(name) == theirs.read(name) for name in package)
        metadata = ours.read(f"{served.name.split('-py3')[0]}.dist-info/METADATA").decode()
        assert "Requires-Dist: cryptography" in metadata and "Requires-Dist: rfc8785" in metadata

    target = tmp_path / "site"
    run(
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--target",
        target,
        served,
        cwd=tmp_path,
    )
    assert (target / "bin" / "reviewer-verify").exists()  # the command, from the entry point

    lifecycle(agent, reviewer_a)
    bundle = export_bundle(tenant, tmp_path / "acme.zip")
    keys = tmp_path / "jwks.json"
    keys.write_text(json.dumps(verification_jwks()))
    with zipfile.ZipFile(bundle) as opened:
        assert f"pip install {url}" in opened.read("README.txt").decode()
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(target)}
    verified = subprocess.run(
        [sys.executable, "-m", "reviewer_verify", str(bundle), "--jwks", str(keys)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert verified.returncode == 0 and "OK" in verified.stdout, verified.stdout + verified.stderr
