"""The agent and demo management commands: register_agent, seed_demo, totp_code."""

import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django_otp.plugins.otp_totp.models import TOTPDevice

from approvals.management.commands import seed_demo
from approvals.management.commands.run_demo import (
    data_dir_prefix,
    demo_client_state_file,
    refund_agent_command,
)
from approvals.management.commands.seed_demo import seconds_left
from approvals.models import Agent, PolicyVersion
from approvals.policy.step_up import PER_VOTE
from audit.models import AuditEvent, Verb
from examples.refund_agent.config import parse_settings
from lib.tokens import hash_token
from tenants.models import Tenant, TenantMembership
from tests.factories import submit

pytestmark = pytest.mark.django_db


def run(*args, **options) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, **options)
    return out.getvalue()


def test_register_agent_prints_generated_tokens_once_and_stores_their_hashes(tenant):
    output = run(
        "register_agent",
        "--tenant",
        "acme",
        "--slug",
        "billing",
        "--name",
        "Billing agent",
        "--card-url",
        "http://127.0.0.1:9000/.well-known/agent-card.json",
        "--outbound-bearer",
        "out-1",
    )

    push_token_match = re.search(r"push token \(shown once\): (\S+)", output)
    assert push_token_match is not None
    push_token = push_token_match.group(1)
    api_token_match = re.search(r"API token \(shown once\):\s+(\S+)", output)
    assert api_token_match is not None
    api_token = api_token_match.group(1)
    agent = Agent.objects.get(slug="billing")
    assert (agent.push_token_hash, agent.api_token_hash) == (hash_token(push_token), hash_token(api_token))
    assert agent.audience == agent.card_url
    assert (agent.outbound_auth_scheme, agent.outbound_auth_credentials) == ("bearer", "out-1")
    assert AuditEvent.objects.filter(verb=Verb.AGENT_REGISTERED, subject="agent:billing").exists()


def test_register_agent_takes_given_tokens_without_printing_them(tenant):
    output = run(
        "register_agent",
        "--tenant",
        "acme",
        "--slug",
        "billing",
        "--name",
        "Billing",
        "--card-url",
        "http://127.0.0.1:9000/card",
        "--push-token",
        "p-1",
        "--api-token",
        "a-1",
        "--audience",
        "urn:billing",
    )

    assert "p-1" not in output and "a-1" not in output
    agent = Agent.objects.get(slug="billing")
    assert (agent.push_token_hash, agent.audience) == (hash_token("p-1"), "urn:billing")


def test_register_agent_needs_an_existing_tenant(db):
    with pytest.raises(CommandError, match="no tenant"):
        run("register_agent", "--tenant", "nope", "--slug", "x", "--name", "X", "--card-url", "http://x/card")


def test_seed_demo_is_idempotent_and_routes_large_refunds_to_two_approvers():
    first = run("seed_demo", "--push-token", "p", "--api-token", "a")
    run("seed_demo", "--quiet", "--push-token", "p", "--api-token", "a")

    tenant = Tenant.objects.get(slug="demo")
    assert tenant.admin_group is not None and tenant.admin_group.slug == "admins"
    assert set(get_user_model().objects.values_list("username", flat=True)) >= {
        "reviewer1",
        "reviewer2",
        "requester",
        "demo-admin",
        "auditor",
    }
    assert TOTPDevice.objects.filter(confirmed=True).count() == get_user_model().objects.count()
    assert get_user_model().objects.get(username="demo-admin").is_superuser
    assert TenantMembership.objects.get(user__username="auditor").role == "compliance"
    assert PolicyVersion.objects.filter(status="active").count() == 2
    assert "otpauth://totp/" in first
    agent = Agent.objects.get(slug="refund-demo")
    assert agent.api_token_hash == hash_token("a")

    small = submit(agent, principal_id="cust-ops-7")
    large = submit(
        agent,
        action={
            "tool": "payments.refund",
            "arguments": {"order_id": "1204", "amount": "1850.00", "currency": "EUR"},
        },
    )
    assert small.requirements["thresholds"] == [{"group": "finance", "count": 1}]
    assert large.requirements["thresholds"] == [{"group": "finance", "count": 2}]
    assert large.requirements["step_up"] == PER_VOTE


def test_totp_code_prints_a_code_per_person(django_user_model):
    run("seed_demo", "--quiet")

    output = run("totp_code", "reviewer1", "reviewer2")

    assert re.fullmatch(r"reviewer1\s+\d{6}  \(\d+ s left\)\nreviewer2\s+\d{6}  \(\d+ s left\)\n", output)
    with pytest.raises(CommandError, match="no such user: ghost"):
        run("totp_code", "ghost")


def test_totp_code_says_how_long_a_code_stays_current(django_user_model):
    run("seed_demo", "--quiet")
    device = TOTPDevice.objects.get(user__username="reviewer1")
    start = device.t0 + 1000 * device.step
    device.last_t = 999  # the step before: this step's code is unused

    assert seconds_left(device, now=start) == device.step
    assert seconds_left(device, now=start + device.step - 1) == 1
    device.last_t = 1000  # this step's code was used: the next step's is the one to type, a step longer
    assert seconds_left(device, now=start + 10) == 2 * device.step - 10


def test_the_demo_starts_its_agent_with_its_slug_and_tenant(tmp_path):
    """So the worker's ListTasks sweep adopts the demo agent's parked tasks instead of warning of each."""
    command = refund_agent_command("python", 8001, "http://127.0.0.1:8000", "token", tmp_path)
    assert command[:3] == ["python", "-m", "examples.refund_agent"]

    agent = parse_settings(command[3:])

    assert (agent.agent_slug, agent.tenant) == (seed_demo.AGENT_SLUG, seed_demo.TENANT)
    assert agent.port == 8001 and agent.state_dir == tmp_path.resolve()


def test_the_demo_keeps_the_client_count_in_its_data_folder_and_names_it_for_other_terminals(
    tmp_path, monkeypatch
):
    """A demo on another REVIEWER_DATA_DIR starts with the sample refunds whatever data/ counted, and the
    totp_code command it prints finds that demo's database from another terminal."""
    assert demo_client_state_file(tmp_path / "demo") == tmp_path / "demo" / "demo-client.sent"

    monkeypatch.delenv("REVIEWER_DATA_DIR", raising=False)
    assert data_dir_prefix() == ""
    monkeypatch.setenv("REVIEWER_DATA_DIR", str(tmp_path / "my demo"))
    assert data_dir_prefix() == f"REVIEWER_DATA_DIR='{tmp_path / 'my demo'}' "
