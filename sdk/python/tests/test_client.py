"""reviewer_gate.client: submit, long-poll, verify, consume, report, against the fake Reviewer (real
Ed25519 keys, real HTTP on loopback). Each test decides from another thread while the client waits."""

import threading

import jwt
import pytest

from reviewer_gate import NotApproved, ReviewerClient, ReviewerUnavailable, Throttled, gate
from reviewer_gate.client import build_request
from reviewer_gate.testing import decide_at_intake, decide_next_proposal

AUDIENCE = "https://agent.example"
ACTION = {"tool": "payments.refund", "arguments": {"order_id": "1182", "amount": "40.00", "currency": "EUR"}}
PRINCIPAL = {"id": "u-7", "display": "Casey"}


@pytest.fixture
def client(reviewer):
    return ReviewerClient(
        reviewer_url=reviewer.url, api_token="agent-token", audience=AUDIENCE, backoff_seconds=0.01
    )


# Every wait below has a deadline: a broken test fails with "timeout" instead of hanging.
DEADLINE = {"timeout": 20}


def answer_when_submitted(reviewer, key, **options):
    return decide_next_proposal(reviewer, key, audience=AUDIENCE, **{"seen": 0, **options})  # the first


def test_an_approval_is_submitted_verified_consumed_and_reported(client, reviewer, key):
    answer_when_submitted(reviewer, key)
    approval = client.request_approval(
        ACTION, summary="Refund EUR 40.00", principal=PRINCIPAL, ttl_seconds=60, **DEADLINE
    )

    (submitted,) = reviewer.proposals
    assert submitted["authorization"] == "Bearer agent-token"
    # It acts on a decision in the answer, and asks for an approval made at intake to be consumed there.
    assert submitted["prefer"] == "decision-in-answer, consume"
    assert submitted["body"]["request"]["action_digest"] == gate.action_digest(ACTION)
    assert submitted["body"]["request"]["expires_at"].endswith("Z")
    assert approval.action == ACTION and not approval.edited
    assert [call["body"] for call in reviewer.consumes_for(approval.idempotency_key)] == [{"rev": 2}]
    assert approval.report("succeeded", transaction_id="tx-1")
    assert reviewer.outcomes_for(approval.idempotency_key) == ["succeeded"]


def test_an_approval_consumed_at_intake_is_verified_and_needs_no_consume(client, reviewer, key):
    decide_at_intake(reviewer, key, audience=AUDIENCE)
    approval = client.request_approval(ACTION, summary="Refund EUR 40.00", principal=PRINCIPAL, **DEADLINE)

    # submit (consumed there), verify: no round trip for the decision, none for the consume
    assert reviewer.pulls == [] and reviewer.consumes == []
    assert approval.decision.approved and approval.action == ACTION
    assert approval.submission.consumed and approval.submission.state == "executing"
    assert approval.report("succeeded")
    assert reviewer.outcomes_for(approval.idempotency_key) == ["succeeded"]


def test_a_reviewer_that_does_not_consume_at_intake_gets_the_consume_call(client, reviewer, key):
    reviewer.consume_at_intake = False  # a Reviewer that predates the preference ignores it
    decide_at_intake(reviewer, key, audience=AUDIENCE)
    approval = client.request_approval(ACTION, summary="Refund EUR 40.00", principal=PRINCIPAL, **DEADLINE)

    assert reviewer.pulls == []  # submit, verify, consume: no round trip for the decision
    assert approval.decision.approved and not approval.submission.consumed
    assert [call["body"] for call in reviewer.consumes_for(approval.idempotency_key)] == [{"rev": 2}]


def test_a_replay_of_a_request_consumed_at_intake_releases_nothing(client, reviewer, key):
    """The first answer was lost after Reviewer consumed: the retry finds the decision spent (the
    answer applies no preference) and the consume call says so; the agent never acts twice."""
    decide_at_intake(reviewer, key, audience=AUDIENCE)
    request = client_request()
    first = client.submit(request, task_id="task-lost", consume=True)
    reviewer.consume_answers[_jti(first.token)] = (409, {"error": {"code": "consumed", "message": "spent"}})

    again = client.submit(request, task_id="task-lost", consume=True)

    assert first.consumed and not again.consumed and again.token == first.token
    with pytest.raises(NotApproved) as refusal:
        client.release(again, again.token)
    assert refusal.value.code == "consume_refused:consumed"


def client_request():
    return build_request(ACTION, summary="Refund", principal=PRINCIPAL)


def _jti(token):
    return jwt.decode(token, options={"verify_signature": False})["jti"]


def test_a_denial_in_the_intake_answer_raises_without_a_pull(client, reviewer, key):
    decide_at_intake(reviewer, key, audience=AUDIENCE, decision="rejected", reason="policy says no")
    with pytest.raises(NotApproved) as refusal:
        client.request_approval(ACTION, summary="Refund", principal=PRINCIPAL, **DEADLINE)
    assert (refusal.value.code, refusal.value.reason) == ("rejected", "policy says no")
    assert reviewer.pulls == [] and reviewer.consumes == []


def test_a_forged_token_in_the_intake_answer_is_refused_like_a_pulled_one(client, reviewer, key):
    """Also when Reviewer consumed it at intake: the token is verified before acting all the same."""
    other = gate.action_digest({**ACTION, "arguments": {**ACTION["arguments"], "amount": "4000.00"}})
    decide_at_intake(reviewer, key, audience=AUDIENCE, action_digest=other)
    with pytest.raises(NotApproved) as refusal:
        client.request_approval(ACTION, summary="Refund", principal=PRINCIPAL, **DEADLINE)
    assert refusal.value.code == "wrong_digest"
    assert len(reviewer.consumed_at_intake) == 1 and reviewer.consumes == []


async def test_the_async_form_uses_the_intake_answers_decision(client, reviewer, key):
    decide_at_intake(reviewer, key, audience=AUDIENCE)
    approval = await client.arequest_approval(ACTION, summary="Refund", principal=PRINCIPAL, **DEADLINE)
    assert approval.decision.approved and reviewer.pulls == []


def test_a_client_that_knows_its_registration_names_it_and_refuses_another_tenants_decision(reviewer, key):
    client = ReviewerClient(
        reviewer_url=reviewer.url, api_token="t", audience=AUDIENCE, tenant="globex", agent="globex-refunds"
    )
    answer_when_submitted(reviewer, key)  # signed for tenant acme (testing.decision_claims)

    with pytest.raises(NotApproved) as refusal:
        client.request_approval(ACTION, summary="Refund", principal=PRINCIPAL, **DEADLINE)

    assert refusal.value.code == "wrong_tenant"
    (submitted,) = reviewer.proposals
    assert submitted["body"]["request"]["agent"] == "globex-refunds"
    assert reviewer.consumes == []


def test_a_rejection_raises_with_the_reviewers_reason_and_consumes_nothing(client, reviewer, key):
    answer_when_submitted(reviewer, key, decision="rejected", reason="not a duplicate")
    with pytest.raises(NotApproved) as refusal:
        client.request_approval(ACTION, summary="Refund", principal=PRINCIPAL, **DEADLINE)
    assert (refusal.value.code, refusal.value.reason) == ("rejected", "not a duplicate")
    assert reviewer.consumes == []


def test_an_expired_proposal_raises_without_a_token(client, reviewer, key):
    answer_when_submitted(reviewer, key, close="expired")
    with pytest.raises(NotApproved) as refusal:
        client.request_approval(ACTION, summary="Refund", principal=PRINCIPAL, **DEADLINE)
    assert refusal.value.code == "expired"
    assert reviewer.consumes == []


def test_a_decision_for_another_action_is_refused_before_consuming(client, reviewer, key):
    other = gate.action_digest({**ACTION, "arguments": {**ACTION["arguments"], "amount": "4000.00"}})
    answer_when_submitted(reviewer, key, action_digest=other)
    with pytest.raises(NotApproved) as refusal:
        client.request_approval(ACTION, summary="Refund", principal=PRINCIPAL, **DEADLINE)
    assert refusal.value.code == "wrong_digest"
    assert reviewer.consumes == []


def test_a_refused_consume_raises(client, reviewer, key):
    original_decide = reviewer.decide

    def decide_then_revoke(proposal_id, token, state="approved"):
        jti = gate.jwt.decode(token, options={"verify_signature": False})["jti"]
        reviewer.consume_answers[jti] = (409, {"error": {"code": "revoked", "message": "halted"}})
        original_decide(proposal_id, token, state)

    reviewer.decide = decide_then_revoke
    answer_when_submitted(reviewer, key)
    with pytest.raises(NotApproved) as refusal:
        client.request_approval(ACTION, summary="Refund", principal=PRINCIPAL, **DEADLINE)
    assert refusal.value.code == "consume_refused:revoked"


def test_submit_and_pull_are_retried_on_503(client, reviewer, key):
    reviewer.unavailable_answers = 2
    answer_when_submitted(reviewer, key)
    approval = client.request_approval(ACTION, summary="Refund", principal=PRINCIPAL, **DEADLINE)
    assert approval.decision.approved
    assert len(reviewer.proposals) == 1  # the two 503s were answered before recording


def test_a_429_raises_throttled_at_once_with_its_code_and_retry_after(client, reviewer):
    reviewer.throttle("too_many_open", retry_after=60, count=5)

    with pytest.raises(Throttled) as refusal:
        client.request_approval(ACTION, summary="Refund", principal=PRINCIPAL, **DEADLINE)

    assert (refusal.value.code, refusal.value.retry_after) == ("too_many_open", 60.0)
    assert "retry after 60 s" in str(refusal.value)
    assert isinstance(refusal.value, ReviewerUnavailable)  # callers that catch that still catch it
    assert len(reviewer.throttled_answers) == 4  # one call, no retry the caller did not ask for
    assert reviewer.proposals == []


def test_after_retry_after_the_same_request_goes_through(client, reviewer, key):
    reviewer.throttle("rate_limited", retry_after=1)
    request = build_request(ACTION, summary="Refund", principal=PRINCIPAL)
    with pytest.raises(Throttled) as refusal:
        client.submit(request, task_id="task-throttled")
    assert refusal.value.retry_after == 1.0

    submission = client.submit(request, task_id="task-throttled")  # the caller's own retry, when it chose

    assert submission.request_id == request["request_id"] and len(reviewer.proposals) == 1


def test_consume_and_outcome_wait_out_an_overloaded_reviewer(client, reviewer, key):
    answer_when_submitted(reviewer, key)
    submission = client.submit(gate_request(), task_id="task-overloaded")
    token = client.wait_for_token(submission, timeout=10)

    reviewer.overloaded_answers = 2  # the consume is refused twice before it runs, then goes through
    approval = client.release(submission, token)
    reviewer.overloaded_answers = 1
    reported = approval.report("succeeded", transaction_id="tx-1")

    assert [call["body"] for call in reviewer.consumes_for(approval.idempotency_key)] == [{"rev": 2}]
    assert reported and reviewer.outcomes_for(approval.idempotency_key) == ["succeeded"]


def test_a_503_that_is_not_overload_is_not_retried_by_consume(client, reviewer, key):
    answer_when_submitted(reviewer, key)
    submission = client.submit(gate_request(), task_id="task-unavailable")
    token = client.wait_for_token(submission, timeout=10)

    reviewer.unavailable_answers = 1  # a 503 from Reviewer itself (halted, ...): the consume may have run
    with pytest.raises(NotApproved) as refused:
        client.release(submission, token)

    assert refused.value.code == "reviewer_unreachable"


def gate_request() -> dict:
    from reviewer_gate import build_request

    return build_request(ACTION, summary="Refund", principal=PRINCIPAL)


def test_reviewer_down_raises_unavailable(key):
    client = ReviewerClient(
        reviewer_url="http://127.0.0.1:9", api_token="t", audience=AUDIENCE, retries=1, backoff_seconds=0.01
    )
    with pytest.raises(ReviewerUnavailable):
        client.request_approval(ACTION, summary="Refund", principal=PRINCIPAL, **DEADLINE)


async def test_the_async_form_calls_on_wait_between_polls(reviewer, key):
    client = ReviewerClient(reviewer_url=reviewer.url, api_token="t", audience=AUDIENCE, poll_seconds=0)
    waits = []
    submitted = threading.Event()

    async def on_wait(state, elapsed):
        waits.append(state)
        if len(waits) == 2 and not submitted.is_set():
            submitted.set()
            answer_when_submitted(reviewer, key)

    approval = await client.arequest_approval(
        ACTION, summary="Refund", principal=PRINCIPAL, on_wait=on_wait, **DEADLINE
    )
    assert approval.decision.approved
    assert waits[:2] == ["awaiting_review", "awaiting_review"]


async def test_calls_through_retry_overloaded_wait_out_the_limit(reviewer):
    """The transport the demo agent gives a2a-sdk's push sender (its pushes to Reviewer)."""
    import httpx

    from reviewer_gate.a2a import RetryOverloaded

    reviewer.overloaded_answers = 2
    async with httpx.AsyncClient(timeout=5, transport=RetryOverloaded()) as http:
        response = await http.post(
            f"{reviewer.url}/api/v1/decisions/jti-1/outcome", json={"status": "failed"}
        )

    assert response.status_code != 503
    assert reviewer.overloaded_answers == 0  # both refusals were answered, then the push went through
