"""Erasure without breaking the chain: the trail names people by pseudonym, the directory names the
pseudonym, and `erase_person` removes the directory entry and the account's personal data; every chain
still verifies and the exports then carry the pseudonym and nothing that names the person."""

import json
import zipfile
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from audit.chain.sequencer import sequence_pending
from audit.chain.verification import all_chains, verify_chain
from audit.exports.lines import Selection, chunks
from audit.labels import user_label
from audit.models import AuditEvent, PersonDirectoryEntry, Verb
from tests.audit.util import export_bundle, lifecycle, tenant_ref, verify_offline

pytestmark = pytest.mark.django_db
NAMES = ("reviewer_a", "Alice", "reviewer_a@example.test")


def export_bytes(tenant, fmt: str) -> bytes:
    return b"".join(chunks(Selection.for_tenant(tenant_ref(tenant)), fmt))


def test_the_trail_names_people_only_by_pseudonym_and_exports_resolve_it(
    agent, refund_policy, requester, reviewer_a, tenant
):
    lifecycle(agent, reviewer_a)
    pseudonym = user_label(reviewer_a)
    assert pseudonym.startswith("person:") and "reviewer_a" not in pseudonym
    vote = AuditEvent.objects.get(verb=Verb.VOTE_CAST)
    assert vote.actor == pseudonym
    signed = AuditEvent.objects.get(verb=Verb.DECISION_SIGNED)
    assert signed.data["approvers"][0]["sub"] == pseudonym and "name" not in signed.data["approvers"][0]
    for fmt in ("jsonl", "csv"):
        exported = export_bytes(tenant, fmt)
        lines, head = exported.splitlines()[:-1], exported.splitlines()[-1]
        assert not any(name.encode() in line for line in lines for name in NAMES)  # the events: pseudonyms
        assert b'"person:' in head and b"Alice" in head  # the signed head names them, from the directory


def test_erase_person_keeps_every_chain_verifiable_and_the_exports_show_only_the_pseudonym(
    agent, refund_policy, requester, reviewer_a, admin_user, tenant, tmp_path
):
    proposal = lifecycle(agent, reviewer_a)
    pseudonym = user_label(reviewer_a)
    out = StringIO()

    call_command("erase_person", "reviewer_a", "--by", "admin", stdout=out)

    assert pseudonym in out.getvalue()
    sequence_pending()
    assert not PersonDirectoryEntry.objects.filter(pseudonym=pseudonym).exists()
    person = get_user_model().objects.get(pk=reviewer_a.pk)  # kept, for the votes that point at it
    assert person.username.startswith("erased-") and not person.is_active and not person.has_usable_password()
    assert (person.first_name, person.last_name, person.email) == ("", "", "")
    assert proposal.votes.get().voter_id == person.pk
    erased = AuditEvent.objects.filter(verb=Verb.PERSON_ERASED)
    assert {e.chain for e in erased} == {"system", f"tenant:{tenant.id}"}
    assert all(e.subject == pseudonym and e.actor == user_label(admin_user) for e in erased)
    for chain in all_chains():
        assert verify_chain(chain).ok, chain
    call_command("audit_verify", stdout=StringIO())  # exit status 0
    for fmt in ("jsonl", "csv"):
        exported = export_bytes(tenant, fmt)
        assert pseudonym.encode() in exported
        assert not [name for name in NAMES if name.encode() in exported], fmt
    bundle = export_bundle(tenant, tmp_path / "bundle.zip")
    with zipfile.ZipFile(bundle) as opened:
        everything = b"".join(opened.read(name) for name in opened.namelist())
        manifest = json.loads(opened.read("manifest.json"))
    assert pseudonym.encode() in everything and not [n for n in NAMES if n.encode() in everything]
    assert pseudonym not in manifest["people"]
    assert verify_offline(bundle, "--trust-bundle-keys").returncode == 0


def test_erase_person_refuses_an_unknown_name_and_changes_nothing(reviewer_a):
    with pytest.raises(CommandError, match="no person with username 'nobody'"):
        call_command("erase_person", "nobody", stdout=StringIO())
    with pytest.raises(CommandError, match="--by: no person with username 'ghost'"):
        call_command("erase_person", "reviewer_a", "--by", "ghost", stdout=StringIO())
    assert get_user_model().objects.get(pk=reviewer_a.pk).username == "reviewer_a"
    assert not AuditEvent.objects.filter(verb=Verb.PERSON_ERASED).exists()


def test_erase_person_pseudonymizes_the_sign_in_logs_and_the_admin_log(reviewer_a, admin_user, tenant):
    """django-axes' logs key on the username (and an attempt keeps the form it posted); the admin's log of
    a change to the account shows its username: after the erasure both name the pseudonym only."""
    from axes.models import AccessAttempt, AccessFailureLog, AccessLog
    from django.contrib.admin.models import CHANGE, LogEntry
    from django.contrib.contenttypes.models import ContentType

    pseudonym = user_label(reviewer_a)
    AccessAttempt.objects.create(
        username="reviewer_a",
        ip_address="198.51.100.1",
        user_agent="",
        http_accept="",
        path_info="/",
        get_data="",
        post_data="username=reviewer_a",
        failures_since_start=1,
    )
    AccessFailureLog.objects.create(username="reviewer_a", ip_address="198.51.100.1", user_agent="")
    AccessLog.objects.create(username="Reviewer_A", ip_address="198.51.100.1", user_agent="")
    LogEntry.objects.create(
        user=admin_user,
        content_type=ContentType.objects.get_for_model(reviewer_a),
        object_id=str(reviewer_a.pk),
        object_repr="reviewer_a",
        action_flag=CHANGE,
    )

    call_command("erase_person", "reviewer_a", stdout=StringIO())

    for model in (AccessAttempt, AccessFailureLog, AccessLog):
        assert list(model.objects.values_list("username", flat=True)) == [pseudonym]
    assert AccessAttempt.objects.get().post_data == ""
    assert LogEntry.objects.get().object_repr == pseudonym


def test_an_evidence_packet_cut_after_the_erasure_shows_the_approver_by_pseudonym_only(
    agent, refund_policy, requester, reviewer_a, tenant
):
    """The stored decision token names its approvers as they were at signing; the packet shows its
    claims, so after erase_person it shows the pseudonym there, and the token's signature still checks."""
    from audit.exports.evidence import build_packet, packet_json

    reviewer_a.first_name = "Alice"
    reviewer_a.save(update_fields=["first_name"])
    proposal = lifecycle(agent, reviewer_a)
    pseudonym = user_label(reviewer_a)
    before = build_packet(tenant, proposal.id)
    assert (
        before is not None and before["decision"]["token_check"]["claims"]["approvers"][0]["name"] == "Alice"
    )

    call_command("erase_person", "reviewer_a", stdout=StringIO())

    after = build_packet(tenant, proposal.id)
    assert after is not None
    check = after["decision"]["token_check"]
    assert check["claims"]["approvers"][0]["name"] == pseudonym and check["signature_valid"] is True
    assert not any(name.encode() in packet_json(after) for name in ("Alice", "reviewer_a@example.test"))
