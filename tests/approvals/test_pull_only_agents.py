"""Agents that are not A2A servers: registered without a card URL (`delivery: pull`), they read their
decisions from the intake answer or the decision pull, and Reviewer never calls them: no continuation,
no cancel, no GetTask, no ListTasks, no outbox row, ever."""

import io
import logging

import jwt
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from approvals.models import Agent, Decision, OutboxMessage, Proposal
from approvals.services.agents import register_agent, update_agent
from approvals.services.decisions import revoke_decision
from approvals.services.halts import halt
from approvals.services.reconcile import expire_due
from approvals.services.votes import cast_vote
from approvals.states import State
from approvals.worker.loop import Worker
from lib.errors import ServiceError
from reviewer_gate import gate
from tests import factories
from tests.factories import step_up_for, totp_code

pytestmark = pytest.mark.django_db

AUTH = {"HTTP_AUTHORIZATION": "Bearer pull-secret"}


@pytest.fixture
def pull_agent(tenant):
    return register_agent(
        tenant=tenant,
        slug="script",
        name="A script",
        card_url="",
        audience="urn:agent:script",
        push_token="unused-push",  # noqa: S106
        api_token="pull-secret",  # noqa: S106
    )


def submit_over_rest(client, request_kwargs=None, task_id="task-1"):
    submission = factories.approval_request(**(request_kwargs or {}))
    return client.post(
        "/api/v1/proposals",
        {"task_id": task_id, "context_id": "", "request": submission},
        content_type="application/json",
        **AUTH,
    )


def test_an_agent_without_a_card_url_is_a_pull_agent_with_its_chosen_audience(pull_agent):
    assert (pull_agent.delivery, pull_agent.card_url, pull_agent.audience) == (
        Agent.Delivery.PULL,
        "",
        "urn:agent:script",
    )


def test_two_pull_agents_have_no_card_url_but_never_share_an_audience(tenant, other_tenant, pull_agent):
    second = factories.make_agent(other_tenant, "script-2", api_token="s2", card_url="")
    assert second.delivery == Agent.Delivery.PULL and second.card_url == ""
    with pytest.raises(ServiceError) as refused:
        register_agent(
            tenant=other_tenant,
            slug="script-3",
            name="Copycat",
            card_url="",
            audience="urn:agent:script",
            push_token="p",  # noqa: S106
            api_token="a",  # noqa: S106
        )
    assert (refused.value.code, refused.value.field) == ("audience_taken", "audience")


def test_a_pull_agent_without_an_audience_is_refused_and_nothing_is_registered(tenant):
    with pytest.raises(ServiceError) as refused:
        register_agent(
            tenant=tenant,
            slug="nameless",
            name="No audience",
            card_url="",
            push_token="p",
            api_token="a",  # noqa: S106
        )
    assert refused.value.field == "audience"
    assert not Agent.objects.filter(slug="nameless").exists()


def test_register_agent_without_a_card_url_prints_the_audience_with_the_tokens(tenant):
    out = io.StringIO()
    call_command(
        "register_agent",
        "--tenant",
        tenant.slug,
        "--slug",
        "cli",
        "--name",
        "CLI",
        "--audience",
        "urn:agent:cli",
        stdout=out,
    )
    printed = out.getvalue()
    assert "delivery:  pull" in printed and "audience:  urn:agent:cli" in printed
    assert "API token (shown once)" in printed and "push URL" not in printed
    assert Agent.objects.get(slug="cli").delivery == Agent.Delivery.PULL


def test_register_agent_with_neither_card_url_nor_audience_is_an_error(tenant):
    with pytest.raises(CommandError, match="audience"):
        call_command(
            "register_agent", "--tenant", tenant.slug, "--slug", "cli", "--name", "CLI", stdout=io.StringIO()
        )


def test_a_policy_allowed_request_gets_its_decision_in_the_intake_answer(
    client, settings, tenant, pull_agent, requester
):
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund", outcome="allow")
    response = submit_over_rest(client)

    assert response.status_code == 201
    body = response.json()
    proposal = Proposal.objects.get(pk=body["proposal_id"])
    assert body["state"] == State.ALLOWED and body["token"] == Decision.objects.get(proposal=proposal).token
    the_gate = gate.Gate(
        issuer=settings.REVIEWER_ISSUER,
        audience="urn:agent:script",
        keys=gate.StaticKeySource(client.get("/.well-known/jwks.json").json()),
        used_store=gate.MemoryUsedStore(),
    )
    decision = the_gate.verify(
        body["token"], task_id="task-1", request_id=proposal.request_id, action_digest=proposal.action_digest
    )
    consumed = client.post(
        f"/api/v1/decisions/{decision.jti}/consume",
        {"rev": decision.rev},
        content_type="application/json",
        **AUTH,
    )
    assert consumed.json() == {"state": State.EXECUTING}
    assert not OutboxMessage.objects.exists()  # no continuation for an agent Reviewer cannot call


def test_a_denial_at_intake_carries_the_signed_rejection_and_a_review_carries_none(
    client, tenant, pull_agent, requester
):
    factories.make_policy(tenant, "no-refunds", tool_pattern="payments.refund", outcome="deny")
    denied = submit_over_rest(client).json()
    assert denied["state"] == State.DENIED
    assert jwt.decode(denied["token"], options={"verify_signature": False})["decision"] == "rejected"

    factories.make_policy(tenant, "lookups", tool_pattern="orders.lookup")  # needs people
    waiting = submit_over_rest(
        client, {"action": {"tool": "orders.lookup", "arguments": {"order_id": "1"}}}, "t-2"
    )
    assert waiting.status_code == 201 and waiting.json()["token"] is None


def test_a_replayed_request_answers_the_decision_made_since(
    client, tenant, pull_agent, requester, reviewer_a
):
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 1}]
    )
    request = factories.approval_request()
    body = {"task_id": "task-1", "context_id": "", "request": request}
    first = client.post("/api/v1/proposals", body, content_type="application/json", **AUTH).json()
    assert first["token"] is None
    proposal = Proposal.objects.get(pk=first["proposal_id"])
    cast_vote(
        proposal.id,
        reviewer_a,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )
    again = client.post("/api/v1/proposals", body, content_type="application/json", **AUTH)
    assert again.status_code == 200 and again.json()["token"] == Decision.objects.get(proposal=proposal).token


def test_no_decision_revocation_expiry_or_halt_of_a_pull_agent_leaves_an_outbox_row(
    tenant, pull_agent, refund_policy, requester, reviewer_a, admin_user
):
    approved, _ = factories.approve(pull_agent, reviewer_a, task_id="approved")
    revoke_decision(approved.id, reviewer_a, reason="changed my mind")
    expiring = factories.submit(pull_agent, task_id="expiring")
    expire_due(now=expiring.expires_at)
    factories.submit(pull_agent, task_id="halted")
    halt(scope="agent", actor=admin_user, reason="runaway", agent=pull_agent)

    assert set(Proposal.objects.values_list("state", flat=True)) == {
        State.REVOKED,
        State.EXPIRED,
        State.CANCELLED,
    }
    assert not OutboxMessage.objects.exists()


def test_the_worker_never_calls_a_pull_agent(tenant, pull_agent, refund_policy, requester, caplog):
    factories.submit(pull_agent, task_id="waiting")
    with caplog.at_level(logging.INFO):
        Worker().tick()
    assert not [r for r in caplog.records if "script" in r.getMessage()]  # no ListTasks, no GetTask


def test_a_pull_agent_cannot_be_given_a_card_url_without_becoming_an_a2a_agent(pull_agent, admin_user):
    with pytest.raises(ServiceError) as refused:
        update_agent(pull_agent, actor=admin_user, delivery=Agent.Delivery.A2A)
    assert refused.value.field == "card_url"
    pull_agent.refresh_from_db()
    assert pull_agent.delivery == Agent.Delivery.PULL
