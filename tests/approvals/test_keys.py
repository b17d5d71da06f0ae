"""Signing keys: Ed25519 with a kid; rotation signs with the new key at once and keeps the old public key
in the JWKS until every token it signed has expired; pruning deletes private keys no token can need.
Private keys come from files or the environment and never reach the database or the logs."""

import base64
import json
import logging
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import CommandError, call_command
from django.db import connection

import signing_keys as keys
from accounts.stepup import step_up_for
from approvals.models import Decision
from approvals.services.agents import rotate_signing_key
from approvals.services.votes import cast_vote
from approvals.signing import TOKEN_TYPE, sign_decision
from audit.chain.verification import verify_chain
from audit.models import AuditEvent, Verb
from lib.env import env_str
from tests.factories import submit, totp_code, trail_name

MAX = timedelta(seconds=3600)


@pytest.fixture(autouse=True)
def key_dir(settings, tmp_path):
    """A key folder of this test's own: rotation and pruning must not touch other tests' keys."""
    settings.SIGNING_KEY_DIR = tmp_path / "keys"
    settings.SIGNING_KEY_PEM = ""
    settings.SIGNING_KEY_AUTOGENERATE = True
    settings.DECISION_TOKEN_MAX_SECONDS = int(MAX.total_seconds())
    return tmp_path / "keys"


def new_pem() -> str:
    private = Ed25519PrivateKey.generate()
    return private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def secrets_of(key: keys.SigningKey) -> list[str]:
    """Every form a private key could leak in: its PEM body, and its raw bytes as hex and base64."""
    assert key.private_key is not None
    pem = key.private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    raw = key.private_key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    body = "".join(line for line in pem.splitlines() if "-----" not in line)
    return [
        body,
        raw.hex(),
        base64.b64encode(raw).decode().rstrip("="),
        base64.urlsafe_b64encode(raw).decode()[:40],
    ]


def verify_with_jwks(token: str, jwks: dict) -> dict:
    header = jwt.get_unverified_header(token)
    [jwk] = [k for k in jwks["keys"] if k["kid"] == header["kid"]]
    public = jwt.PyJWK(jwk).key
    return jwt.decode(token, public, algorithms=["EdDSA"], options={"verify_aud": False})


def retire_long_ago(kid: str, key_dir: Path, *, days: int = 2) -> datetime:
    """Arrange: the key was retired `days` ago (a fake clock for the `.retired` file)."""
    [retired_file] = key_dir.glob(f"*_{kid}.retired")
    when = datetime.now(UTC) - timedelta(days=days)
    rewritten = retired_file.with_suffix(".tmp")
    rewritten.write_text(when.isoformat())
    rewritten.replace(retired_file)  # by a rename, so the folder changes (docs/operations.md, signing keys)
    return when


def approve(agent, reviewer) -> Decision:
    proposal = submit(agent)
    cast_vote(
        proposal.id,
        reviewer,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer, totp_code(reviewer)),
    )
    return Decision.objects.get(proposal=proposal)


# ---------------------------------------------------------------------------------------------------
# Keys and rotation


def test_the_first_key_is_generated_on_first_use_readable_only_by_its_owner(key_dir):
    key = keys.active_key()

    assert key.kid.startswith("ed25519-")
    [path] = key_dir.glob("*.pem")
    assert path.name.endswith(f"_{key.kid}.pem")
    assert path.stat().st_mode & 0o777 == 0o600
    assert key_dir.stat().st_mode & 0o777 == 0o700


def test_rotation_signs_with_the_new_kid_from_then_on(admin_user):
    old = keys.active_key()

    new_kid = rotate_signing_key(actor=admin_user)

    assert new_kid != old.kid
    assert keys.active_key().kid == new_kid
    token, kid = sign_decision({"sub": "task-1"})
    assert kid == new_kid
    assert jwt.get_unverified_header(token) == {"alg": "EdDSA", "kid": new_kid, "typ": TOKEN_TYPE}


def test_a_decision_signed_after_rotation_names_the_new_kid(agent, refund_policy, requester, reviewer_a):
    rotate_signing_key()

    decision = approve(agent, reviewer_a)

    assert decision.kid == keys.active_key().kid
    assert jwt.get_unverified_header(decision.token)["kid"] == decision.kid


def test_rotation_is_audited_without_key_material(admin_user):
    old = keys.active_key()

    new_kid = rotate_signing_key(actor=admin_user)

    event = AuditEvent.objects.get(verb=Verb.SIGNING_KEY_ROTATED)
    assert event.chain == "system"
    assert event.actor == trail_name("admin")
    assert event.data == {"kid": new_kid, "retired": [old.kid]}


def test_a_token_signed_before_rotation_still_verifies_against_the_jwks(
    agent, refund_policy, requester, reviewer_a
):
    decision = approve(agent, reviewer_a)
    old_kid = decision.kid

    rotate_signing_key()

    jwks = keys.jwks()
    assert {old_kid, keys.active_key().kid} <= {k["kid"] for k in jwks["keys"]}
    assert verify_with_jwks(decision.token, jwks)["jti"] == str(decision.jti)


def test_the_old_kid_stays_published_until_every_token_it_signed_has_expired(
    agent, refund_policy, requester, reviewer_a
):
    last_signed = approve(agent, reviewer_a)
    old_kid = last_signed.kid
    rotate_signing_key()
    [old] = [k for k in keys.all_keys() if k.kid == old_kid]
    assert old.retired_at is not None

    assert last_signed.expires_at <= old.retired_at + MAX  # no token it signed outlives this
    published_at = lambda when: {k.kid for k in keys.published_keys(now=when)}  # noqa: E731
    assert old_kid in published_at(last_signed.expires_at)
    assert old_kid in published_at(old.retired_at + MAX - timedelta(seconds=1))
    assert old_kid in published_at(old.retired_at + MAX + timedelta(seconds=30))  # the gate's clock leeway
    assert old_kid not in published_at(old.retired_at + MAX + keys.RETIREMENT_GRACE)
    assert keys.active_key().kid in published_at(old.retired_at + timedelta(days=365))


def test_rotating_twice_publishes_both_retired_keys_while_they_are_needed(db):
    first = keys.active_key().kid
    second = rotate_signing_key()
    third = rotate_signing_key()

    assert [k.kid for k in keys.published_keys()] == [first, second, third]
    assert keys.active_key().kid == third


# ---------------------------------------------------------------------------------------------------
# Pruning


def test_prune_deletes_only_private_keys_no_token_can_need(db, key_dir):
    old = keys.active_key().kid
    rotate_signing_key()
    [old_key] = [k for k in keys.all_keys() if k.kid == old]
    assert old_key.retired_at is not None

    assert keys.prune_expired(now=old_key.retired_at + MAX) == []
    later = old_key.retired_at + MAX + keys.RETIREMENT_GRACE
    assert keys.prune_expired(now=later) == [old]

    assert not list(key_dir.glob(f"*_{old}.pem"))
    pruned = keys.key_by_kid(old)
    assert (
        pruned is not None and pruned.private_key is None
    )  # its public half stays for old audit checkpoints
    assert old not in {k.kid for k in keys.published_keys(now=later)}
    assert keys.active_key().private_key is not None


def test_prune_never_touches_the_active_key(db, key_dir):
    active = keys.active_key().kid

    assert keys.prune_expired(now=datetime.now(UTC) + timedelta(days=3650)) == []

    assert keys.active_key().kid == active
    assert list(key_dir.glob(f"*_{active}.pem"))


def test_prune_keeps_file_keys_that_are_not_retired_when_the_environment_key_is_used(settings, key_dir):
    file_key = keys.active_key().kid  # generated into the folder
    settings.SIGNING_KEY_PEM = new_pem()

    assert keys.prune_expired(now=datetime.now(UTC) + timedelta(days=3650)) == []

    assert list(key_dir.glob(f"*_{file_key}.pem"))


def test_audit_checkpoints_signed_by_a_pruned_key_still_verify(
    settings, agent, refund_policy, requester, reviewer_a
):
    settings.AUDIT_CHECKPOINT_EVERY = 1
    old = keys.active_key().kid
    approve(agent, reviewer_a)  # every event is checkpointed, signed with the old key
    rotate_signing_key()
    [old_key] = [k for k in keys.all_keys() if k.kid == old]
    assert old_key.retired_at is not None
    keys.prune_expired(now=old_key.retired_at + MAX + keys.RETIREMENT_GRACE)

    result = verify_chain(f"tenant:{agent.tenant_id}")

    assert result.ok, result
    assert result.checkpoints > 0


def test_a_key_whose_retirement_crashed_half_way_keeps_its_private_file(db, key_dir):
    old = keys.active_key()
    rotate_signing_key()
    retire_long_ago(old.kid, key_dir)
    [pem_path] = key_dir.glob(f"*_{old.kid}.pem")
    pem_path.with_suffix(".pub").write_bytes(
        old.public_key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )

    assert [k.kid for k in keys.all_keys()].count(old.kid) == 1
    kept = keys.key_by_kid(old.kid)
    assert kept is not None and kept.private_key is not None


# ---------------------------------------------------------------------------------------------------
# A key from the environment (REVIEWER_SIGNING_KEY / REVIEWER_SIGNING_KEY_FILE)


def test_the_environment_key_signs_and_is_the_only_published_key(settings, key_dir):
    pem = new_pem()
    settings.SIGNING_KEY_PEM = pem

    token, kid = sign_decision({"sub": "task-1"})

    private = serialization.load_pem_private_key(pem.encode(), password=None)
    assert isinstance(private, Ed25519PrivateKey)
    expected_kid = keys.active_key().kid
    assert kid == expected_kid
    assert [k["kid"] for k in keys.jwks()["keys"]] == [expected_kid]
    assert verify_with_jwks(token, keys.jwks())["sub"] == "task-1"
    assert jwt.decode(token, private.public_key(), algorithms=["EdDSA"])["sub"] == "task-1"
    assert not key_dir.exists()  # nothing was generated or written


def test_rotation_is_refused_while_the_environment_key_is_used(settings, db):
    settings.SIGNING_KEY_PEM = new_pem()

    with pytest.raises(RuntimeError, match="REVIEWER_SIGNING_KEY"):
        rotate_signing_key()
    with pytest.raises(CommandError, match="REVIEWER_SIGNING_KEY"):
        call_command("rotate_signing_key", stdout=StringIO())


def test_the_environment_key_can_be_given_as_a_file(monkeypatch, tmp_path):
    pem = new_pem()
    path = tmp_path / "signing.pem"
    path.write_text(pem)
    monkeypatch.setenv("REVIEWER_SIGNING_KEY_FILE", str(path))

    assert env_str("REVIEWER_SIGNING_KEY") == pem.strip()


def test_a_process_started_with_reviewer_signing_key_signs_with_it(tmp_path):
    pem = new_pem()
    private = serialization.load_pem_private_key(pem.encode(), password=None)
    assert isinstance(private, Ed25519PrivateKey)
    expected = keys._kid_for(private.public_key())
    script = "import django; django.setup(); import signing_keys as keys; print(json.dumps(keys.jwks()))"
    env = {
        **os.environ,
        "REVIEWER_SIGNING_KEY": pem,
        "REVIEWER_DATA_DIR": str(tmp_path / "data"),
        "DJANGO_SETTINGS_MODULE": "reviewer.settings",
    }
    env.pop("REVIEWER_SIGNING_KEY_DIR", None)

    started = subprocess.run(
        [sys.executable, "-c", "import json; " + script],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )

    assert started.returncode == 0, started.stderr
    assert [k["kid"] for k in json.loads(started.stdout)["keys"]] == [expected]
    assert pem.splitlines()[1] not in started.stdout + started.stderr


# ---------------------------------------------------------------------------------------------------
# The private key never reaches the database or the logs


def test_no_table_row_or_column_contains_a_private_key(
    settings, agent, refund_policy, requester, reviewer_a, caplog
):
    caplog.set_level(logging.DEBUG)
    settings.AUDIT_CHECKPOINT_EVERY = 1
    first = keys.active_key()
    approve(agent, reviewer_a)
    rotate_signing_key()
    second = keys.active_key()
    approve(agent, reviewer_a)
    call_command("rotate_signing_key", "--prune", stdout=StringIO())
    leaks = secrets_of(first) + secrets_of(second) + ["PRIVATE KEY"]

    found = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")  # noqa: S608 - names from introspection
            columns = [c[0] for c in cursor.description]
            for row in cursor.fetchall():
                for column, value in zip(columns, row, strict=True):
                    text = value.hex() if isinstance(value, bytes | memoryview) else str(value)
                    found += [(table, column) for leak in leaks if leak in text]

    assert found == []
    assert Decision.objects.count() == 2  # the scan did cover signed decisions
    assert not any(leak in caplog.text for leak in leaks)


def test_the_rotate_command_prints_key_ids_only(db):
    before = keys.active_key()
    out = StringIO()

    call_command("rotate_signing_key", stdout=out)

    after = keys.active_key()
    output = out.getvalue()
    assert f"new signing key {after.kid}" in output
    assert f"{before.kid}  retired" in output
    assert f"{after.kid}  active" in output
    assert not any(leak in output for leak in secrets_of(before) + secrets_of(after) + ["PRIVATE KEY"])


# ---------------------------------------------------------------------------------------------------
# manage.py rotate_signing_key


def test_rotate_command_records_the_operator(db, admin_user):
    call_command("rotate_signing_key", "--operator", "admin", stdout=StringIO())

    assert AuditEvent.objects.get(verb=Verb.SIGNING_KEY_ROTATED).actor == trail_name("admin")


def test_rotate_command_with_prune_rotates_and_prunes_long_retired_keys(db, key_dir):
    oldest = keys.active_key().kid
    rotate_signing_key()
    retire_long_ago(oldest, key_dir)
    out = StringIO()

    call_command("rotate_signing_key", "--prune", stdout=out)

    assert "pruned 1 retired private key(s)" in out.getvalue()
    assert not list(key_dir.glob(f"*_{oldest}.pem"))
    assert len([k for k in keys.published_keys() if k.retired_at]) == 1  # the key retired just now
    assert AuditEvent.objects.filter(verb=Verb.SIGNING_KEY_ROTATED).count() == 2


def test_prune_only_does_not_add_a_key(db, key_dir):
    active = keys.active_key().kid

    call_command("rotate_signing_key", "--prune-only", stdout=StringIO())

    assert keys.active_key().kid == active
    assert not AuditEvent.objects.filter(verb=Verb.SIGNING_KEY_ROTATED).exists()


# ---------------------------------------------------------------------------------------------------
# /.well-known/jwks.json


def test_the_jwks_view_publishes_the_published_keys(client, db):
    old = keys.active_key().kid
    new = rotate_signing_key()

    response = client.get("/.well-known/jwks.json")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    document = response.json()
    assert document == keys.jwks()
    assert [k["kid"] for k in document["keys"]] == [old, new]
    for jwk in document["keys"]:
        assert {k: jwk[k] for k in ("kty", "crv", "alg", "use")} == {
            "kty": "OKP",
            "crv": "Ed25519",
            "alg": "EdDSA",
            "use": "sig",
        }
        assert "d" not in jwk  # the private part


def test_the_jwks_view_drops_keys_no_token_can_need(client, db, key_dir):
    old = keys.active_key().kid
    rotate_signing_key()
    retire_long_ago(old, key_dir)

    kids = [k["kid"] for k in client.get("/.well-known/jwks.json").json()["keys"]]

    assert kids == [keys.active_key().kid]


def test_the_jwks_view_refuses_writes(client, db):
    assert client.post("/.well-known/jwks.json").status_code == 405


@pytest.fixture
def folder_reads(monkeypatch) -> list:
    """Each listing of the key folder (its files read and parsed)."""
    reads: list = []
    read = keys._key_files
    # Counts the listing, then lists: append() is None, so `or` goes on to the real call.
    monkeypatch.setattr(keys, "_key_files", lambda: reads.append(1) or read())  # type: ignore[func-returns-value]
    return reads


def settled(key_dir: Path) -> None:
    """The folder's last change long ago, as it is between rotations."""
    long_ago = datetime.now(UTC).timestamp() - 60
    os.utime(key_dir, (long_ago, long_ago))


def test_an_unchanged_key_folder_is_read_once_and_a_rotation_counts_at_the_next_signature(
    key_dir, folder_reads
):
    first = keys.generate_key()
    settled(key_dir)
    assert keys.active_key().kid == keys.active_key().kid == first.kid
    assert len(folder_reads) == 1
    new, retired = keys.rotate()
    assert retired == [first.kid]
    assert keys.active_key().kid == new.kid


def test_a_key_removed_by_hand_is_not_signed_with(key_dir, folder_reads):
    compromised = keys.generate_key()
    settled(key_dir)
    assert keys.active_key().kid == compromised.kid
    [path] = key_dir.glob(f"*_{compromised.kid}.pem")
    path.unlink()  # an operator's emergency removal, no service involved
    assert keys.active_key().kid != compromised.kid  # (tests autogenerate a key where none is left)


def test_a_folder_changed_within_the_racy_window_is_read_on_every_call(key_dir, folder_reads):
    keys.generate_key()  # the folder changed just now: a change in the same tick would not move its mtime
    keys.active_key()
    keys.active_key()
    assert len(folder_reads) == 2
