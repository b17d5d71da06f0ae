"""The demo refund agent end to end: a real agent process, a fake Reviewer, a fake payments service.

The complete control path of "approval gates that hold": ask, park, verify, consume, act once, report;
and every way it must refuse to act. Task state always comes from GetTask, never a blocking reply.
"""

import json
import subprocess
import sys

import httpx
import pytest
from a2a.types import CancelTaskRequest, TaskState
from a2a.utils.errors import A2AError

from examples.downstream import FakePaymentsServer
from reviewer_gate import gate
from reviewer_gate.testing import FakeReviewer, ReviewerKey, decision_claims
from tests.examples.harness import REPO, AgentClient, AgentProcess, status_text
from tests.waiting import wait_until

pytestmark = pytest.mark.database_independent  # never reaches the suite's database

REFUND_TEXT = "Please refund EUR 40.00 for order {order} (customer says the parcel never arrived)"


@pytest.fixture(scope="module")
def reviewer_key():
    return ReviewerKey()


@pytest.fixture(scope="module")
def reviewer(reviewer_key):
    server = FakeReviewer([reviewer_key]).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def downstream():
    server = FakePaymentsServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def agent(tmp_path_factory, reviewer, downstream):
    process = AgentProcess(
        state_dir=tmp_path_factory.mktemp("agent") / "state",
        reviewer_url=reviewer.url,
        downstream_url=downstream.url,
    ).start()
    yield process
    process.stop()


@pytest.fixture
async def client(agent):
    connected = await AgentClient.connect(agent.url)
    yield connected
    await connected.close()


def sign(reviewer_key, reviewer, agent, task, request, *, key=None, **overrides) -> tuple[str, dict]:
    claims = decision_claims(
        issuer=reviewer.url,
        audience=agent.audience,
        task_id=task.id,
        context_id=task.context_id,
        request_id=request["request_id"],
        action_digest=request["action_digest"],
        **overrides,
    )
    return (key or reviewer_key).sign(claims), claims


def refunds_for(downstream, order_id: str) -> list[dict]:
    with downstream.ledger.lock:
        return [refund for refund in downstream.ledger.refunds.values() if refund["order_id"] == order_id]


# --- asking -----------------------------------------------------------------------------------------


def test_the_agent_card_declares_the_approval_extension(agent):
    card = httpx.get(agent.audience, timeout=5).json()
    assert [extension["uri"] for extension in card["capabilities"]["extensions"]] == [gate.EXTENSION_URI]
    assert card["capabilities"].get("pushNotifications") is True
    assert not card["capabilities"].get("streaming", False)
    assert [skill["id"] for skill in card["skills"]] == ["refund"]


async def test_an_unreadable_request_is_rejected_without_asking_for_approval(client, reviewer):
    task = await client.ask_refund("Hello, can you help me?")
    ended = await client.wait_terminal(task.id)
    assert ended.status.state == TaskState.TASK_STATE_REJECTED
    assert "order number" in status_text(ended)
    assert reviewer.proposals_for(task.id) == []


async def test_a_refund_request_parks_the_task_with_a_request_bound_to_its_action(client, reviewer):
    principal = {"id": "cust-ops-7", "display": "Casey from customer ops"}
    task = await client.ask_refund(REFUND_TEXT.format(order="1182"), principal=principal)
    parked, request = await client.wait_parked(task.id)

    assert status_text(parked).startswith("Approval required: Refund EUR 40.00 for order 1182")
    assert request["action"] == {
        "tool": "payments.refund",
        "target": "order:1182",
        "arguments": {"order_id": "1182", "amount": "40.00", "currency": "EUR"},
    }
    # Recomputed from what came back through a protobuf Struct: amounts are strings, so nothing drifted.
    assert request["action_digest"] == gate.action_digest(request["action"])
    assert request["principal"] == principal
    assert request["agent_version"] == "refund-agent@1"
    assert request["consequences"]["amount"] == "40.00" and request["consequences"]["reversible"] is False
    assert request["diff"] == [{"field": "order.refunded_amount", "before": "0.00", "after": "40.00"}]
    assert "parcel never arrived" in request["evidence"][0]["excerpt"]
    assert request["expires_at"].endswith("Z")

    wait_until(lambda: reviewer.proposals_for(task.id))
    (posted,) = reviewer.proposals_for(task.id)
    assert posted == {"task_id": task.id, "context_id": task.context_id, "request": request}
    assert reviewer.proposals[-1]["authorization"] == "Bearer agent-api-token"


def run_demo_client(agent, webhook, state_file):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.demo_client",
            "--agent-url",
            agent.url,
            "--webhook",
            webhook,
            "--push-token",
            "push-secret",
            "--count",
            "3",
            "--state-file",
            str(state_file),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_demo_client_parks_its_requests_and_registers_reviewers_webhook(agent, reviewer, tmp_path):
    webhook = f"{reviewer.url}/a2a/push/refund-demo/"
    result = run_demo_client(agent, webhook, tmp_path / "sent")

    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 3 and all("AUTH_REQUIRED" in line for line in lines)
    assert "Refund EUR 1850.00 for order 1204" in result.stdout
    task_ids = [line.split()[0] for line in lines]

    def parked_pushes():
        with reviewer.lock:
            return [
                push
                for push in reviewer.pushes
                if push["body"].get("statusUpdate", {}).get("status", {}).get("state")
                == "TASK_STATE_AUTH_REQUIRED"
                and push["body"]["statusUpdate"]["taskId"] in task_ids
            ]

    wait_until(lambda: len(parked_pushes()) == 3)
    for push in parked_pushes():
        assert push["token"] == "push-secret"
        assert gate.EXTENSION_URI in push["body"]["statusUpdate"]["status"]["message"]["metadata"]

    # A second run asks for new orders instead of repeating the first ones.
    again = run_demo_client(agent, webhook, tmp_path / "sent")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "order 1182" not in again.stdout and "order 1204" not in again.stdout
    assert "order 1211" in again.stdout and "order 1219" in again.stdout and "order 1300" in again.stdout


# --- deciding ---------------------------------------------------------------------------------------


async def test_an_approved_refund_runs_once_and_completes_with_a_receipt(
    client, reviewer, reviewer_key, agent, downstream
):
    task = await client.ask_refund(REFUND_TEXT.format(order="2001"))
    parked, request = await client.wait_parked(task.id)
    token, claims = sign(reviewer_key, reviewer, agent, parked, request, rev=4)

    await client.send_decision(parked, token)
    ended = await client.wait_terminal(task.id)

    assert ended.status.state == TaskState.TASK_STATE_COMPLETED, status_text(ended)
    (refund,) = refunds_for(downstream, "2001")
    assert refund["idempotency_key"] == claims["jti"] and refund["amount"] == "40.00"
    (receipt,) = [artifact for artifact in ended.artifacts if artifact.name == "refund-receipt"]
    assert refund["transaction_id"] in json.dumps([part.text for part in receipt.parts])
    assert [call["body"] for call in reviewer.consumes_for(claims["jti"])] == [{"rev": 4}]
    assert reviewer.outcomes_for(claims["jti"]) == ["succeeded"]
    assert reviewer.outcomes[-1]["body"]["transaction_id"] == refund["transaction_id"]

    # Delivered again (a retry): the task is terminal, the SDK refuses, and nothing runs twice.
    with pytest.raises(A2AError):
        await client.send_decision(parked, token)
    assert len(refunds_for(downstream, "2001")) == 1


async def test_a_rejected_decision_rejects_the_task_and_refunds_nothing(
    client, reviewer, reviewer_key, agent, downstream
):
    task = await client.ask_refund(REFUND_TEXT.format(order="2002"))
    parked, request = await client.wait_parked(task.id)
    token, claims = sign(
        reviewer_key,
        reviewer,
        agent,
        parked,
        request,
        decision="rejected",
        reason="the tracking shows the parcel was delivered",
    )

    await client.send_decision(parked, token)
    ended = await client.wait_terminal(task.id)

    assert ended.status.state == TaskState.TASK_STATE_REJECTED
    assert "parcel was delivered" in status_text(ended)
    assert refunds_for(downstream, "2002") == []
    assert reviewer.consumes_for(claims["jti"]) == []


async def test_a_forged_decision_fails_the_task_and_refunds_nothing(
    client, reviewer, reviewer_key, agent, downstream
):
    task = await client.ask_refund(REFUND_TEXT.format(order="2003"))
    parked, request = await client.wait_parked(task.id)
    forger = ReviewerKey(kid=reviewer_key.kid)  # right kid, wrong private key
    token, claims = sign(reviewer_key, reviewer, agent, parked, request, key=forger)

    await client.send_decision(parked, token)
    ended = await client.wait_terminal(task.id)

    assert ended.status.state == TaskState.TASK_STATE_FAILED
    assert "bad_signature" in status_text(ended) and "Nothing was executed" in status_text(ended)
    assert refunds_for(downstream, "2003") == []
    assert reviewer.consumes_for(claims["jti"]) == []


async def test_a_decision_for_another_task_fails_the_task_and_refunds_nothing(
    client, reviewer, reviewer_key, agent, downstream
):
    first = await client.ask_refund(REFUND_TEXT.format(order="2004"))
    second = await client.ask_refund(REFUND_TEXT.format(order="2005"))
    first_parked, first_request = await client.wait_parked(first.id)
    second_parked, _ = await client.wait_parked(second.id)
    token, _ = sign(reviewer_key, reviewer, agent, first_parked, first_request)

    await client.send_decision(second_parked, token)
    ended = await client.wait_terminal(second.id)

    assert ended.status.state == TaskState.TASK_STATE_FAILED
    assert "wrong_task" in status_text(ended)
    assert refunds_for(downstream, "2004") == [] and refunds_for(downstream, "2005") == []


async def test_a_decision_reviewer_refuses_to_release_fails_the_task_and_refunds_nothing(
    client, reviewer, reviewer_key, agent, downstream
):
    task = await client.ask_refund(REFUND_TEXT.format(order="2006"))
    parked, request = await client.wait_parked(task.id)
    token, claims = sign(reviewer_key, reviewer, agent, parked, request)
    reviewer.consume_answers[claims["jti"]] = (
        409,
        {"error": {"code": "revoked", "message": "revoked by an admin"}},
    )

    await client.send_decision(parked, token)
    ended = await client.wait_terminal(task.id)

    assert ended.status.state == TaskState.TASK_STATE_FAILED
    assert "consume_refused:revoked" in status_text(ended)
    assert refunds_for(downstream, "2006") == []
    assert len(reviewer.consumes_for(claims["jti"])) == 1


async def test_a_lost_downstream_response_is_reconciled_into_one_refund(
    client, reviewer, reviewer_key, agent, downstream
):
    task = await client.ask_refund(REFUND_TEXT.format(order="2007"))
    parked, request = await client.wait_parked(task.id)
    token, claims = sign(reviewer_key, reviewer, agent, parked, request)
    httpx.post(f"{downstream.url}/control", json={"drop_next_response": True}, timeout=5).raise_for_status()

    await client.send_decision(parked, token)
    ended = await client.wait_terminal(task.id)

    assert ended.status.state == TaskState.TASK_STATE_COMPLETED, status_text(ended)
    (refund,) = refunds_for(downstream, "2007")
    assert refund["idempotency_key"] == claims["jti"]
    assert reviewer.outcomes_for(claims["jti"]) == ["unknown", "succeeded"]
    assert reviewer.outcomes[-1]["body"]["transaction_id"] == refund["transaction_id"]


async def test_a_refund_the_payments_service_declines_fails_the_task_and_is_reported(
    client, reviewer, reviewer_key, agent, downstream
):
    task = await client.ask_refund(REFUND_TEXT.format(order="2008"))
    parked, request = await client.wait_parked(task.id)
    token, claims = sign(reviewer_key, reviewer, agent, parked, request)
    httpx.post(f"{downstream.url}/control", json={"reject_next": True}, timeout=5).raise_for_status()

    await client.send_decision(parked, token)
    ended = await client.wait_terminal(task.id)

    assert ended.status.state == TaskState.TASK_STATE_FAILED
    assert refunds_for(downstream, "2008") == []
    assert reviewer.outcomes_for(claims["jti"]) == ["failed"]


async def test_a_question_parks_the_task_again_with_a_request_that_supersedes_the_first(
    client, reviewer, reviewer_key, agent, downstream
):
    task = await client.ask_refund(REFUND_TEXT.format(order="2009"))
    parked, first_request = await client.wait_parked(task.id)
    question, _ = sign(
        reviewer_key,
        reviewer,
        agent,
        parked,
        first_request,
        decision="needs_info",
        reason="Did the customer report it within 30 days?",
    )

    await client.send_decision(parked, question)
    reparked, second_request = await client.wait_parked(task.id, not_request=first_request["request_id"])

    assert second_request["supersedes"] == first_request["request_id"]
    assert second_request["action"] == first_request["action"]
    assert second_request["action_digest"] == first_request["action_digest"]
    assert "within 30 days" in second_request["evidence"][-1]["excerpt"]
    wait_until(lambda: len(reviewer.proposals_for(task.id)) == 2)
    assert reviewer.proposals_for(task.id)[-1]["request"]["supersedes"] == first_request["request_id"]

    approval, _ = sign(reviewer_key, reviewer, agent, reparked, second_request)
    await client.send_decision(reparked, approval)
    ended = await client.wait_terminal(task.id)
    assert ended.status.state == TaskState.TASK_STATE_COMPLETED, status_text(ended)
    assert len(refunds_for(downstream, "2009")) == 1


async def test_an_approval_of_a_superseded_request_is_refused(
    client, reviewer, reviewer_key, agent, downstream
):
    task = await client.ask_refund(REFUND_TEXT.format(order="2011"))
    parked, first_request = await client.wait_parked(task.id)
    question, _ = sign(
        reviewer_key, reviewer, agent, parked, first_request, decision="needs_info", reason="Why?"
    )
    await client.send_decision(parked, question)
    reparked, _ = await client.wait_parked(task.id, not_request=first_request["request_id"])

    stale, _ = sign(reviewer_key, reviewer, agent, reparked, first_request)
    await client.send_decision(reparked, stale)
    ended = await client.wait_terminal(task.id)

    assert ended.status.state == TaskState.TASK_STATE_FAILED
    assert "wrong_request" in status_text(ended)
    assert refunds_for(downstream, "2011") == []


async def test_a_cancelled_parked_task_never_refunds(client, reviewer, reviewer_key, agent, downstream):
    task = await client.ask_refund(REFUND_TEXT.format(order="2010"))
    parked, request = await client.wait_parked(task.id)

    await client.client.cancel_task(CancelTaskRequest(id=task.id))
    cancelled = await client.wait_terminal(task.id)
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED

    token, _ = sign(reviewer_key, reviewer, agent, parked, request)
    with pytest.raises(A2AError):
        await client.send_decision(parked, token)
    assert (await client.get(task.id)).status.state == TaskState.TASK_STATE_CANCELED
    assert refunds_for(downstream, "2010") == []


async def test_a_cancel_during_the_refund_lets_the_refund_finish_and_reports_it(
    client, reviewer, reviewer_key, agent, downstream
):
    task = await client.ask_refund(REFUND_TEXT.format(order="2012"))
    parked, request = await client.wait_parked(task.id)
    token, claims = sign(reviewer_key, reviewer, agent, parked, request)
    httpx.post(f"{downstream.url}/control", json={"delay_next_seconds": 1.0}, timeout=5).raise_for_status()

    await client.send_decision(parked, token)
    await client.wait_for(task.id, lambda task: task.status.state == TaskState.TASK_STATE_WORKING)
    wait_until(lambda: downstream.ledger.delay_next_seconds == 0)  # the slow POST has started
    answer = await client.client.cancel_task(CancelTaskRequest(id=task.id))

    # The money was already moving: the task ends with the refund's real outcome, not CANCELED.
    assert answer.status.state == TaskState.TASK_STATE_COMPLETED
    assert (await client.wait_terminal(task.id)).status.state == TaskState.TASK_STATE_COMPLETED
    assert len(refunds_for(downstream, "2012")) == 1
    assert reviewer.outcomes_for(claims["jti"]) == ["succeeded"]


# --- surviving a restart ----------------------------------------------------------------------------


async def test_an_agent_restarted_while_parked_still_executes_the_approval(tmp_path, reviewer, reviewer_key):
    state_dir = tmp_path / "state"
    first = AgentProcess(state_dir=state_dir, reviewer_url=reviewer.url).start()  # ledger mode
    try:
        client = await AgentClient.connect(first.url)
        try:
            task = await client.ask_refund(REFUND_TEXT.format(order="3001"))
            parked, request = await client.wait_parked(task.id)
        finally:
            await client.close()
    finally:
        first.stop()
    assert first.process is not None and first.process.returncode is not None

    second = AgentProcess(state_dir=state_dir, reviewer_url=reviewer.url, port=first.port).start()
    try:
        client = await AgentClient.connect(second.url)
        try:
            still_parked, same_request = await client.wait_parked(task.id)
            assert same_request == request
            token, claims = sign(reviewer_key, reviewer, second, still_parked, request)
            await client.send_decision(still_parked, token)
            ended = await client.wait_terminal(task.id)
        finally:
            await client.close()
    finally:
        second.stop()

    assert ended.status.state == TaskState.TASK_STATE_COMPLETED, status_text(ended)
    ledger = [json.loads(line) for line in (state_dir / "ledger.jsonl").read_text().splitlines()]
    assert [(entry["order_id"], entry["idempotency_key"]) for entry in ledger] == [("3001", claims["jti"])]
    assert reviewer.outcomes_for(claims["jti"]) == ["succeeded"]
