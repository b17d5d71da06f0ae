"""Reviewer as the approver of an a2a-rust agent (approvals/a2a/rust_approval.py,
docs/agents/a2a-rust.md): the extension's request read from a push or a listed task, its digest
recomputed from the action where the request carries it, routed through policy and people, and the
task continued with the extension's decision (Reviewer's signed decision beside it) under the approver
identity the agent accepts. The messages are a2a-rust's own shapes (tests/approvals/a2a_rust_shapes.py)."""

import json
import uuid

import pytest
from django.utils import timezone
from google.protobuf.json_format import MessageToDict

from approvals.a2a.client import continuation_message, forget_cards
from approvals.a2a.parked_tasks import ParkedTaskLister
from approvals.a2a.push import EXTENSION_URI as REVIEWER_URI
from approvals.a2a.rust_approval import OPAQUE_TOOL, RUST_EXTENSION_URI, RUST_METADATA_KEY
from approvals.canonical import action_digest
from approvals.models import Agent, Decision, OutboxMessage, PolicyVersion, Proposal
from approvals.services.votes import edit_proposal
from approvals.worker.loop import Worker
from audit.models import AuditEvent, Verb
from tests import factories
from tests.approvals import a2a_rust_shapes as shapes
from tests.approvals.a2a_rust_agent import RustAgent, RustRefunds

pytestmark = pytest.mark.django_db


def rust_agent_row(tenant, card_url=None, slug="rust-refunds"):
    agent = factories.make_agent(tenant, slug, card_url=card_url)
    Agent.objects.filter(pk=agent.pk).update(
        approval_extension=Agent.ApprovalExtension.A2A_RUST,
        outbound_auth_scheme=Agent.AuthScheme.BEARER,
        outbound_auth_credentials="reviewer-token",
    )
    agent.refresh_from_db()
    return agent


@pytest.fixture
def rust(tenant):
    return rust_agent_row(tenant)


@pytest.fixture
def refund_tool_policy(tenant):
    """The a2a-rust refund (tool `refund`) needs one finance approval."""
    return factories.make_policy(tenant, "rust-refunds", tool_pattern="refund")


def push(client, agent, body):
    return client.post(
        f"/a2a/push/{agent.slug}/",
        data=json.dumps(body),
        content_type="application/json",
        HTTP_X_A2A_NOTIFICATION_TOKEN="push-secret",
    )


def parked(request, task_id=None):
    return shapes.parked_status_update(task_id or f"task-{uuid.uuid4()}", "ctx-1", request)


def test_reviewers_digest_is_a2a_rusts_for_a2a_rusts_own_vector():
    assert action_digest(shapes.REFUND_ACTION) == shapes.REFUND_DIGEST


def test_a_pushed_request_with_its_action_becomes_a_proposal_bound_to_its_digest(
    client, rust, refund_tool_policy
):
    request = shapes.refund_request(with_action=True)
    response = push(client, rust, parked(request))
    assert response.status_code == 201, response.content
    proposal = Proposal.objects.get(pk=response.json()["proposal_id"])
    assert proposal.action == shapes.REFUND_ACTION
    assert proposal.action_digest == shapes.REFUND_DIGEST == request["digest"]
    assert proposal.request_id == request["requestId"]
    assert proposal.summary == shapes.REFUND_SUMMARY
    assert proposal.principal_id == "bearer:alice"
    assert proposal.tool == "refund"  # policy routes it as any proposal
    assert proposal.state == "awaiting_review"
    assert push(client, rust, parked(request, proposal.task_id)).status_code == 200  # the same request


def test_an_action_that_does_not_hash_to_the_requests_digest_is_refused(client, rust, refund_tool_policy):
    request = shapes.refund_request(with_action=True)
    request["action"] = {**shapes.REFUND_ACTION, "amount": "400.00"}
    response = push(client, rust, parked(request))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "digest_mismatch"
    assert response.json()["error"]["field"] == "request.digest"
    assert not Proposal.objects.exists()
    assert AuditEvent.objects.filter(verb=Verb.INTAKE_REFUSED).count() == 1


def test_the_placeholder_digest_of_a2a_rusts_wire_test_is_refused(client, rust):
    response = push(client, rust, parked(shapes.WIRE_REQUEST))
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "request.digest"
    assert not Proposal.objects.exists()


def test_a_request_without_its_action_is_an_opaque_proposal_kept_to_its_digest(client, rust):
    request = shapes.refund_request()
    response = push(client, rust, parked(request))
    proposal = Proposal.objects.get(pk=response.json()["proposal_id"])
    assert proposal.tool == OPAQUE_TOOL
    assert proposal.action == {"tool": OPAQUE_TOOL, "digest": request["digest"]}


def test_a_request_with_no_requester_is_for_no_one(client, rust):
    response = push(client, rust, parked(shapes.refund_request(requested_by=None)))
    assert Proposal.objects.get(pk=response.json()["proposal_id"]).principal_id == "a2a-rust:unauthenticated"


def test_each_agent_is_read_in_the_extension_it_is_configured_for(client, agent, rust):
    # A Reviewer-extension agent's input-required task with a2a-rust metadata is not a request.
    response = push(client, agent, parked(shapes.refund_request(with_action=True)))
    assert response.status_code == 200
    assert "ignored" in response.json()
    assert not Proposal.objects.exists()


# --- the continuation -------------------------------------------------------------------------------


def decided(proposal) -> Decision:
    return Decision.objects.get(proposal=proposal)


def sent_metadata(proposal) -> tuple[dict, list]:
    """The metadata and extensions of the continuation Reviewer sends for the proposal's decision."""
    _, message = continuation_message(OutboxMessage.objects.get(payload__jti=str(decided(proposal).jti)))
    return MessageToDict(message.metadata), list(message.extensions)


def test_an_approval_is_the_extensions_approve_with_reviewers_token_beside_it(
    client, rust, refund_tool_policy, reviewer_a
):
    request = shapes.refund_request(with_action=True)
    proposal = Proposal.objects.get(pk=push(client, rust, parked(request)).json()["proposal_id"])
    factories.vote(proposal, reviewer_a)
    metadata, extensions = sent_metadata(proposal)
    answer = metadata[RUST_METADATA_KEY]
    assert answer == {
        "requestId": request["requestId"],
        "decision": "approve",
        "digest": request["digest"],
        "comment": "approved by quorum",
    }
    # The members of a2a-rust's ApprovalDecision, as its own wire test serializes one.
    assert set(answer) == set(shapes.WIRE_DENIAL)
    assert metadata[REVIEWER_URI]["decision"] == decided(proposal).token
    assert extensions == [RUST_EXTENSION_URI, REVIEWER_URI]


def test_a_rejection_is_deny_with_the_reason(client, rust, refund_tool_policy, reviewer_a):
    request = shapes.refund_request(with_action=True)
    proposal = Proposal.objects.get(pk=push(client, rust, parked(request)).json()["proposal_id"])
    factories.vote(proposal, reviewer_a, verdict="reject", reason="wrong order")
    answer = sent_metadata(proposal)[0][RUST_METADATA_KEY]
    assert answer == {**shapes.WIRE_DENIAL, "requestId": request["requestId"], "digest": request["digest"]}


def test_a_policy_denial_is_deny_at_once(client, rust, tenant):
    factories.make_policy(tenant, "no-refunds", tool_pattern="refund", outcome=PolicyVersion.Outcome.DENY)
    request = shapes.refund_request(with_action=True)
    proposal = Proposal.objects.get(pk=push(client, rust, parked(request)).json()["proposal_id"])
    assert sent_metadata(proposal)[0][RUST_METADATA_KEY]["decision"] == "deny"


def test_a_reviewers_edit_denies_the_request_the_agent_made(client, rust, tenant, reviewer_a, reviewer_b):
    factories.make_policy(tenant, "rust-refunds", tool_pattern="refund")
    request = shapes.refund_request(with_action=True)
    proposal = Proposal.objects.get(pk=push(client, rust, parked(request)).json()["proposal_id"])
    edited = edit_proposal(
        proposal.id,
        reviewer_a,
        arguments={"note": "smaller"},
        digest_seen=proposal.action_digest,
        step_up=factories.fresh_step_up(reviewer_a),
    )
    factories.vote(edited, reviewer_b)
    answer = sent_metadata(edited)[0][RUST_METADATA_KEY]
    assert answer["requestId"] == request["requestId"]
    assert answer["digest"] == request["digest"]
    assert answer["decision"] == "deny"


def test_a_question_carries_no_decision_of_the_extension(client, rust, refund_tool_policy, reviewer_a):
    from approvals.services.votes import request_info

    proposal = Proposal.objects.get(
        pk=push(client, rust, parked(shapes.refund_request(with_action=True))).json()["proposal_id"]
    )
    request_info(
        proposal.id,
        reviewer_a,
        question="which order?",
        digest_seen=proposal.action_digest,
        step_up=factories.fresh_step_up(reviewer_a),
    )
    metadata, _ = sent_metadata(proposal)
    assert RUST_METADATA_KEY not in metadata
    assert metadata[REVIEWER_URI]["decision"] == decided(proposal).token


# --- against an a2a-sdk agent on loopback speaking the extension ------------------------------------


@pytest.fixture
def live_rust(settings, tenant):
    settings.AGENT_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
    forget_cards()
    executor = RustRefunds(
        tokens={"t-alice": "alice", "reviewer-token": "reviewer"},
        approvers={"bearer:reviewer"},
        agent="rust-refunds",
    )
    server = RustAgent(executor).start()
    row = rust_agent_row(tenant, card_url=server.card_url)
    yield server, row
    server.stop()
    forget_cards()


def test_a_listed_request_approved_in_reviewer_reaches_the_agents_gate_and_runs(
    live_rust, refund_tool_policy, reviewer_a
):
    server, row = live_rust
    task_id, _ = server.open_parked_task(token="t-alice")
    assert (
        ParkedTaskLister(every_seconds=60).list_agent(row, timezone.now()) == 1
    )  # ListTasks(INPUT_REQUIRED)
    proposal = Proposal.objects.get(agent=row, task_id=task_id)
    assert proposal.principal_id == "bearer:alice"
    assert proposal.action_digest == shapes.REFUND_DIGEST

    factories.vote(proposal, reviewer_a)
    Worker().tick()

    assert server.rust.refused == []
    (admitted,) = server.rust.admitted
    assert admitted.approver == "bearer:reviewer"
    assert admitted.decision["decision"] == "approve"
    assert admitted.decision["digest"] == server.rust.requests[0]["digest"] == shapes.REFUND_DIGEST
    assert admitted.metadata[REVIEWER_URI]["decision"] == decided(proposal).token
    assert server.state_of(task_id) == "TASK_STATE_COMPLETED"


def test_an_agent_that_does_not_accept_reviewers_identity_refuses_its_decision(
    live_rust, refund_tool_policy, reviewer_a
):
    server, row = live_rust
    server.rust.approvers = {"bearer:bob"}
    task_id, _ = server.open_parked_task(token="t-alice")
    ParkedTaskLister(every_seconds=60).list_agent(row, timezone.now())
    factories.vote(Proposal.objects.get(agent=row, task_id=task_id), reviewer_a)
    Worker().tick()
    assert server.rust.refused == ["this caller may not approve"]
    assert server.rust.admitted == []


# --- registration ---------------------------------------------------------------------------------


def test_register_agent_takes_the_approval_extension_and_the_approver_token(tenant):
    import io

    from django.core.management import call_command

    call_command(
        "register_agent",
        "--tenant",
        tenant.slug,
        "--slug",
        "rust-cli",
        "--name",
        "Rust agent",
        "--card-url",
        "http://127.0.0.1:8009/.well-known/agent-card.json",
        "--outbound-bearer",
        "reviewer-token",
        "--approval-extension",
        "a2a-rust",
        stdout=io.StringIO(),
    )
    agent = Agent.objects.get(slug="rust-cli")
    assert agent.approval_extension == Agent.ApprovalExtension.A2A_RUST
    assert agent.outbound_auth_credentials == "reviewer-token"
    registered = AuditEvent.objects.get(verb=Verb.AGENT_REGISTERED, subject="agent:rust-cli")
    assert registered.data["approval_extension"] == "a2a-rust"
