"""Across processes: a gateway's AuthZEN evaluations answered by Reviewer under Daphne (requestable
denial, access request, people's approval, re-evaluation true once), and an a2a-rust-speaking agent
(an a2a-sdk server on loopback) whose request is pushed to Daphne, approved in Reviewer, and whose task
the worker process continues with the extension's decision under Reviewer's approver identity."""

import httpx
import pytest

from approvals.models import Agent, Proposal
from tests import factories
from tests.approvals.a2a_rust_agent import RustAgent, RustRefunds
from tests.approvals.a2a_rust_shapes import REFUND_DIGEST
from tests.authzen.test_evaluation import refund
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DEADLINE = 30


def test_a_gateway_asks_reviewer_and_acts_once_after_people_approve(
    reviewer_stack, tenant, requester, reviewer_a, refund_policy
):
    factories.make_agent(tenant, "gateway", card_url="")
    auth = {"Authorization": "Bearer api-secret"}
    with httpx.Client(base_url=reviewer_stack.url, headers=auth, timeout=10) as http:
        denial = http.post("/access/v1/evaluation", json=refund()).json()
        assert denial["decision"] is False and denial["context"]["access_request"]["requestable"] is True
        body = {**refund(), "denial": {"access_request": denial["context"]["access_request"]}}
        submitted = http.post("/access/v1/requests", json=body)
        assert submitted.status_code == 202, submitted.text
        task = submitted.json()["task"]

        factories.vote(Proposal.objects.get(pk=task["id"]), reviewer_a)

        result = http.get(submitted.headers["Location"]).json()["result"]
        again = refund(authzen_access_request_approval=result["approval_context"])
        first, second = (http.post("/access/v1/evaluation", json=again).json() for _ in range(2))
    assert first["decision"] is True
    assert second == {"decision": False, "context": {**second["context"], "reason": "approval_consumed"}}


def test_an_a2a_rust_agents_pushed_request_is_approved_and_its_gate_admits_reviewer(
    reviewer_stack, tenant, reviewer_a, settings
):
    settings.AGENT_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
    factories.make_policy(tenant, "rust-refunds", tool_pattern="refund")
    executor = RustRefunds(
        tokens={"t-alice": "alice", "reviewer-token": "reviewer"}, approvers={"bearer:reviewer"}
    )
    server = RustAgent(executor).start()
    try:
        agent = factories.make_agent(tenant, "rust-refunds", card_url=server.card_url)
        Agent.objects.filter(pk=agent.pk).update(
            approval_extension=Agent.ApprovalExtension.A2A_RUST,
            outbound_auth_scheme=Agent.AuthScheme.BEARER,
            outbound_auth_credentials="reviewer-token",
        )
        webhook = f"{reviewer_stack.url}/a2a/push/rust-refunds/"
        task_id, _ = server.open_parked_task(token="t-alice", push=(webhook, "push-secret"))

        wait_until(
            lambda: Proposal.objects.filter(agent=agent, task_id=task_id).exists(),
            "the pushed request taken in by Daphne",
            timeout=DEADLINE,
            detail=reviewer_stack.logs,
        )
        proposal = Proposal.objects.get(agent=agent, task_id=task_id)
        assert proposal.action_digest == REFUND_DIGEST
        factories.vote(proposal, reviewer_a)

        wait_until(
            lambda: executor.admitted,
            "the worker's continuation",
            timeout=DEADLINE,
            detail=reviewer_stack.logs,
        )
        (admitted,) = executor.admitted
        assert executor.refused == []
        assert admitted.approver == "bearer:reviewer"
        assert admitted.decision == {
            "requestId": proposal.request_id,
            "decision": "approve",
            "digest": REFUND_DIGEST,
            "comment": "approved by quorum",
        }
        wait_until(lambda: server.state_of(task_id) == "TASK_STATE_COMPLETED", "the refund", timeout=DEADLINE)
    finally:
        server.stop()
