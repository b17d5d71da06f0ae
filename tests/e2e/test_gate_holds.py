"""The twelve adversarial tests of `approval-gates-that-hold.txt` ("Test the complete control path"),
plus the token attacks, against the real stack: Reviewer under Daphne, its delivery worker, the demo
refund agent (a2a-sdk over HTTP) and, where the test is about the downstream effect, the fake payments
service that records idempotency keys and can commit a refund and then drop its response.

Nothing is mocked. Waits poll a condition with a deadline."""

import asyncio
import hashlib
import hmac
import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import signing_keys as keys
from approvals.canonical import action_digest
from approvals.models import Decision, OutboxMessage, Proposal, Vote
from approvals.services.policies import activate_policy_version, create_policy, create_policy_version
from approvals.services.tenants import remove_group_member
from approvals.signing import TOKEN_TYPE
from approvals.states import State
from audit.chain.verification import verify_chain
from audit.models import AuditEvent, Verb
from tenants.models import GroupMembership
from tests import factories
from tests.e2e.test_a2a_loop import ask_refund, ledger, task_state, wait_for
from tests.examples.harness import AgentClient, AgentProcess
from tests.factories import trail_name

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SECOND_ADMIN = "second_admin"


# --- the world: one tenant, its people, its policies, the agent registered --------------------------


@pytest.fixture
def world(request):
    """Policies of a payments team: refunds up to EUR 10 are allowed, refunds above EUR 10,000 are
    prohibited, every other movement of customer money (any payments.* tool) needs one finance
    approval. The stack fixture (plain or with the payments service) is chosen by the test."""
    stack = request.getfixturevalue(request.param if hasattr(request, "param") else "stack")
    tenant = factories.make_tenant()
    people = {
        "requester": factories.make_user(
            "requester", tenant=tenant, principal_id="requester", groups=["finance"]
        ),
        "reviewer_a": factories.make_user(
            "reviewer_a", tenant=tenant, groups=["finance"], first_name="Alice"
        ),
        "reviewer_b": factories.make_user("reviewer_b", tenant=tenant, groups=["finance"], first_name="Bob"),
        "reviewer_c": factories.make_user("reviewer_c", tenant=tenant, groups=["ops"], first_name="Carol"),
        "admin": factories.make_user("admin", tenant=tenant, role="admin", groups=["admins"]),
        SECOND_ADMIN: factories.make_user(SECOND_ADMIN, tenant=tenant, role="admin", groups=["admins"]),
    }
    factories.make_policy(
        tenant,
        "small-refunds",
        outcome="allow",
        tool_pattern="payments.refund",
        condition="double(args.amount) <= 10.0",
        risk="low",
    )
    factories.make_policy(
        tenant,
        "prohibited-refunds",
        outcome="deny",
        tool_pattern="payments.refund",
        condition="double(args.amount) > 10000.0",
    )
    factories.make_policy(
        tenant,
        "customer-money",
        tool_pattern="payments.*",
        condition="!has(args.amount) || double(args.amount) > 10.0",
        thresholds=[{"group": "finance", "count": 1}],
    )
    agent = factories.make_agent(
        tenant, push_token=stack.push_token, api_token="agent-api-token", card_url=stack.agent.audience
    )
    return stack, tenant, agent, people


def proposal_for(stack, task_id: str) -> Proposal:
    return wait_for(
        lambda: Proposal.objects.filter(task_id=task_id).order_by("-created_at").first(),
        f"a proposal for task {task_id}",
        stack=stack,
    )


def state_of(proposal: Proposal) -> str:
    return Proposal.objects.get(pk=proposal.pk).state


def wait_state(stack, proposal: Proposal, *states: str) -> str:
    return wait_for(
        lambda: state_of(proposal) in states and state_of(proposal),
        f"proposal {proposal.id} to reach {states} (it is {state_of(proposal)})",
        stack=stack,
    )


class Reviewer:
    """A person at Reviewer's pages, over real HTTP: signs in with password and a one-time code."""

    def __init__(self, stack, user):
        self.user = user
        self.http = httpx.Client(base_url=stack.url, timeout=15)
        self.http.get("/accounts/login/")
        signed_in = self.http.post(
            "/accounts/login/",
            data={
                "csrfmiddlewaretoken": self.http.cookies["csrftoken"],
                "username": user.username,
                "password": factories.PASSWORD,
                "otp_token": factories.totp_code(user),
            },
        )
        assert signed_in.status_code == 302, signed_in.text[:1000]

    def page(self, proposal: Proposal) -> httpx.Response:
        return self.http.get(f"/proposals/{proposal.id}/")

    def decide(
        self,
        proposal: Proposal,
        action: str,
        *,
        digest: str | None = None,
        reason: str = "",
        code: str | None = None,
    ) -> httpx.Response:
        return self.http.post(
            f"/proposals/{proposal.id}/decide",
            data={
                "csrfmiddlewaretoken": self.http.cookies["csrftoken"],
                "action": action,
                "digest": digest or proposal.action_digest,
                "reason": reason,
                "otp_code": code if code is not None else factories.totp_code(self.user),
            },
        )

    def close(self):
        self.http.close()


def approve(stack, user, proposal: Proposal) -> None:
    reviewer = Reviewer(stack, user)
    try:
        response = reviewer.decide(proposal, "approve")
        assert response.status_code == 302, response.text[:1000]
    finally:
        reviewer.close()


def payments_refunds(payments, order_id: str) -> list[dict]:
    with payments.ledger.lock:
        return [refund for refund in payments.ledger.refunds.values() if refund["order_id"] == order_id]


def send_decision(stack, task_id: str, token: str, agent_url: str | None = None) -> None:
    async def run():
        client = await AgentClient.connect(agent_url or stack.agent.url)
        try:
            task = await client.get(task_id)
            await client.send_decision(task, token)
        finally:
            await client.close()

    asyncio.run(run())


def api(stack) -> httpx.Client:
    return httpx.Client(base_url=stack.url, timeout=10, headers={"Authorization": "Bearer agent-api-token"})


def transitions(proposal: Proposal) -> list[str]:
    return [
        e.data["to"]
        for e in AuditEvent.objects.filter(
            subject=f"proposal:{proposal.id}", verb=Verb.PROPOSAL_TRANSITIONED
        ).order_by("seq")
    ]


# --- 1. low risk is allowed without review ------------------------------------------------------------


def test_01_a_low_risk_action_is_allowed_without_a_review_item(world):
    stack, tenant, agent, people = world

    task_id = ask_refund(stack, "Refund EUR 5.00 for order 3001 (shipping fee)")
    proposal = proposal_for(stack, task_id)

    assert wait_state(stack, proposal, State.SUCCEEDED) == State.SUCCEEDED
    assert State.AWAITING_REVIEW not in transitions(proposal)  # nobody was asked
    assert not Vote.objects.filter(proposal=proposal).exists()
    decision = Decision.objects.get(proposal=proposal)
    assert (
        jwt.decode(decision.token, options={"verify_signature": False})["approvers"][0]["sub"]
        == "policy:small-refunds@1"
    )
    assert len(ledger(stack)) == 1
    # The agent acted on the decision in its announcement's answer, having asked for it there (Prefer:
    # decision-in-answer): Reviewer held the continuation, and once due (ANSWERED_CONTINUATION_DELAY_
    # SECONDS) recorded it delivered without sending it, since the agent had started on the decision.
    continuation = OutboxMessage.objects.filter(proposal=proposal, kind="continue")
    wait_for(
        lambda: continuation.filter(status="delivered").exists(),
        f"the continuation settled ({list(continuation.values_list('status', 'last_error'))})",
        stack=stack,
    )
    (delivered,) = AuditEvent.objects.filter(
        verb=Verb.OUTBOX_DELIVERED, data__outbox_id=continuation.get().id
    )
    assert delivered.data["note"].startswith("not sent: the agent had the decision")
    assert len(ledger(stack)) == 1


# --- 2. prohibited is denied, and no reviewer can override --------------------------------------------


def test_02_a_prohibited_action_is_denied_and_no_reviewer_can_override_it(world):
    stack, tenant, agent, people = world

    task_id = ask_refund(stack, "Refund EUR 25000.00 for order 3002 (VIP complaint)")
    proposal = proposal_for(stack, task_id)
    assert wait_state(stack, proposal, State.DENIED) == State.DENIED

    reviewer = Reviewer(stack, people["reviewer_a"])
    try:
        refused = reviewer.decide(proposal, "approve")
    finally:
        reviewer.close()

    assert refused.status_code in {403, 409}
    assert task_state(stack, task_id) == "TASK_STATE_REJECTED"
    assert state_of(proposal) == State.DENIED
    assert ledger(stack) == []


# --- 3. an argument changed after the approval screen rendered fails the digest ------------------------


def test_03_an_argument_changed_after_the_screen_rendered_fails_the_digest(world):
    stack, tenant, agent, people = world
    task_id = ask_refund(stack, "Refund EUR 40.00 for order 3003 (damaged)")
    shown = proposal_for(stack, task_id)
    reviewer = Reviewer(stack, people["reviewer_a"])
    try:
        assert shown.action_digest in reviewer.page(shown).text  # the screen rendered this digest

        # The agent changes the amount: a new request superseding the shown one.
        changed = {**shown.action, "arguments": {**shown.action["arguments"], "amount": "400.00"}}
        request = factories.approval_request(action=changed, supersedes=shown.request_id)
        with api(stack) as client:
            created = client.post(
                "/api/v1/proposals",
                json={"task_id": task_id, "context_id": shown.context_id, "request": request},
            )
        assert created.status_code == 201, created.text
        successor = Proposal.objects.get(pk=created.json()["proposal_id"])

        on_old = reviewer.decide(shown, "approve")  # the approval of what the screen showed
        on_new = reviewer.decide(successor, "approve", digest=shown.action_digest)
    finally:
        reviewer.close()

    assert on_old.status_code in {403, 409} and state_of(shown) == State.SUPERSEDED
    assert on_new.status_code == 403 and "changed" in on_new.text
    assert state_of(successor) == State.AWAITING_REVIEW
    assert ledger(stack) == []


def test_03b_a_validly_signed_decision_for_another_digest_is_refused_by_the_agent(world):
    stack, tenant, agent, people = world
    task_id = ask_refund(stack, "Refund EUR 41.00 for order 3013 (damaged)")
    proposal = proposal_for(stack, task_id)
    tampered = {**proposal.action, "arguments": {**proposal.action["arguments"], "amount": "4100.00"}}
    token = reviewer_signed_token(stack, proposal, action_digest=action_digest(tampered))

    send_decision(stack, task_id, token)

    assert task_state(stack, task_id) == "TASK_STATE_FAILED"
    assert ledger(stack) == []


# --- 4. two simultaneous decisions: one wins ------------------------------------------------------------


def test_04_two_simultaneous_decisions_on_one_proposal_one_wins(world):
    stack, tenant, agent, people = world
    task_id = ask_refund(stack, "Refund EUR 60.00 for order 3004 (late delivery)")
    proposal = proposal_for(stack, task_id)
    approver, rejecter = Reviewer(stack, people["reviewer_a"]), Reviewer(stack, people["reviewer_b"])
    codes = {approver: factories.totp_code(approver.user), rejecter: factories.totp_code(rejecter.user)}
    start = threading.Barrier(2)
    responses = {}

    def vote(reviewer, action):
        start.wait(timeout=10)
        responses[action] = reviewer.decide(proposal, action, reason="not eligible", code=codes[reviewer])

    threads = [
        threading.Thread(target=vote, args=(approver, "approve")),
        threading.Thread(target=vote, args=(rejecter, "reject")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    approver.close()
    rejecter.close()

    winners = [action for action, response in responses.items() if response.status_code == 302]
    assert len(winners) == 1, {a: r.status_code for a, r in responses.items()}
    final = wait_state(stack, proposal, State.SUCCEEDED, State.REJECTED)
    assert final == (State.SUCCEEDED if winners == ["approve"] else State.REJECTED)
    assert Decision.objects.filter(proposal=proposal).count() == 1
    assert OutboxMessage.objects.filter(proposal=proposal, kind="continue").count() == 1
    assert len(ledger(stack)) == (1 if winners == ["approve"] else 0)


# --- 5. the same approved task resumed on two workers: one effect ---------------------------------------


@pytest.mark.parametrize("world", ["paying_stack"], indirect=True)
def test_05_the_same_approved_task_resumed_on_two_agent_workers_has_one_effect(world, payments):
    stack, tenant, agent, people = world
    # A second replica of the same agent: same audience, state folder (task store, used decisions), payments.
    replica = AgentProcess(
        state_dir=stack.agent.state_dir,
        reviewer_url=stack.url,
        downstream_url=payments.url,
        extra_args=["--audience", stack.agent.audience],
    ).start()
    try:
        task_id = ask_refund(stack, "Refund EUR 70.00 for order 3005 (wrong size)")
        proposal = proposal_for(stack, task_id)
        approve(stack, people["reviewer_a"], proposal)
        token = Decision.objects.get(proposal=proposal).token
        # Both replicas get the continuation at once (on top of the worker's own delivery).
        start = threading.Barrier(2)

        def resume(url):
            start.wait(timeout=10)
            send_decision(stack, task_id, token, agent_url=url)

        threads = [threading.Thread(target=resume, args=(url,)) for url in (stack.agent.url, replica.url)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)

        assert wait_state(stack, proposal, State.SUCCEEDED) == State.SUCCEEDED
    finally:
        replica.stop()
    assert len(payments_refunds(payments, "3005")) == 1
    assert (
        AuditEvent.objects.filter(subject=f"proposal:{proposal.id}", verb=Verb.DECISION_CONSUMED).count() == 1
    )


# --- 6. restarts during the wait keep the proposal ------------------------------------------------------


def test_06_restarting_reviewer_worker_and_agent_during_the_wait_keeps_the_proposal(world):
    stack, tenant, agent, people = world
    task_id = ask_refund(stack, "Refund EUR 80.00 for order 3006 (never arrived)")
    before = proposal_for(stack, task_id)

    stack.restart()

    after = Proposal.objects.get(task_id=task_id)
    assert (after.id, after.expires_at, after.state) == (before.id, before.expires_at, State.AWAITING_REVIEW)
    approve(stack, people["reviewer_a"], after)
    assert wait_state(stack, after, State.SUCCEEDED) == State.SUCCEEDED
    assert len(ledger(stack)) == 1


# --- 7. a policy change while waiting routes or expires safely ------------------------------------------


def test_07_a_policy_change_while_waiting_routes_stricter_and_stops_what_it_now_denies(world):
    stack, tenant, agent, people = world
    routed_task = ask_refund(stack, "Refund EUR 90.00 for order 3007 (defect)")
    stopped_task = ask_refund(stack, "Refund EUR 95.00 for order 3017 (defect)")
    routed, stopped = proposal_for(stack, routed_task), proposal_for(stack, stopped_task)
    policy = routed.policy_versions.get().policy

    stricter = create_policy_version(
        policy,
        {
            "outcome": "require_approval",
            "tool_pattern": "payments.*",
            "condition": "!has(args.amount) || double(args.amount) > 10.0",
            "thresholds": [{"group": "finance", "count": 1}, {"group": "ops", "count": 1}],
        },
        actor=people["admin"],
    )
    activate_policy_version(stricter, actor=people[SECOND_ADMIN])
    deny_3017 = create_policy(
        tenant, slug="order-3017-frozen", name="Order 3017 frozen", actor=people["admin"]
    )
    activate_policy_version(
        create_policy_version(
            deny_3017,
            {"outcome": "deny", "tool_pattern": "payments.*", "condition": "args.order_id == '3017'"},
            actor=people["admin"],
        ),
        actor=people[SECOND_ADMIN],
    )

    approve(stack, people["reviewer_a"], routed)  # finance alone no longer releases it
    assert state_of(routed) == State.AWAITING_REVIEW
    approve(stack, people["reviewer_c"], routed)  # ops completes the stricter quorum
    assert wait_state(stack, routed, State.SUCCEEDED) == State.SUCCEEDED

    assert state_of(stopped) == State.CANCELLED
    assert task_state(stack, stopped_task) == "TASK_STATE_CANCELED"  # CancelTask reached the agent
    assert [line["order_id"] for line in ledger(stack)] == ["3007"]


# --- 8. a reviewer removed before deciding is refused ---------------------------------------------------


def test_08_a_reviewer_removed_from_the_group_before_deciding_is_refused(world):
    stack, tenant, agent, people = world
    task_id = ask_refund(stack, "Refund EUR 100.00 for order 3008 (billing error)")
    proposal = proposal_for(stack, task_id)
    reviewer = Reviewer(stack, people["reviewer_a"])  # notified and signed in...
    try:
        assert reviewer.page(proposal).status_code == 200
        finance = GroupMembership.objects.get(user=people["reviewer_a"]).group
        remove_group_member(finance, people["reviewer_a"], actor=people["admin"])  # ...then removed

        refused = reviewer.decide(proposal, "approve")
    finally:
        reviewer.close()

    assert refused.status_code == 403
    assert state_of(proposal) == State.AWAITING_REVIEW
    assert not Vote.objects.filter(proposal=proposal).exists()
    assert ledger(stack) == []


# --- 9. a late approval after expiry does not execute ---------------------------------------------------


def test_09_a_late_approval_after_expiry_does_not_reopen_or_execute(world):
    stack, tenant, agent, people = world
    policy = factories.make_policy(
        tenant,
        "customer-money",
        tool_pattern="payments.*",
        ttl_seconds=2,
        condition="!has(args.amount) || double(args.amount) > 10.0",
        thresholds=[{"group": "finance", "count": 1}],
    )
    assert policy.ttl_seconds == 2
    task_id = ask_refund(stack, "Refund EUR 110.00 for order 3009 (lost)")
    proposal = proposal_for(stack, task_id)
    reviewer = Reviewer(stack, people["reviewer_a"])
    try:
        # The sweeper closes it at its time; silence never approves.
        wait_state(stack, proposal, State.EXPIRED)
        late = reviewer.decide(proposal, "approve")
    finally:
        reviewer.close()

    assert late.status_code in {403, 409}
    assert state_of(proposal) == State.EXPIRED
    assert not Decision.objects.filter(proposal=proposal).exists()
    assert task_state(stack, task_id) == "TASK_STATE_CANCELED"
    assert ledger(stack) == []


# --- 10. an equivalent action through another tool is caught by policy ----------------------------------


def test_10_after_a_rejection_the_same_effect_through_another_tool_is_caught_by_policy(world):
    stack, tenant, agent, people = world
    task_id = ask_refund(stack, "Refund EUR 120.00 for order 3010 (goodwill)")
    refund = proposal_for(stack, task_id)
    reviewer = Reviewer(stack, people["reviewer_a"])
    try:
        assert reviewer.decide(refund, "reject", reason="no goodwill refunds this quarter").status_code == 302
    finally:
        reviewer.close()
    assert task_state(stack, task_id) == "TASK_STATE_REJECTED"

    # The agent tries the same money movement as store credit, through the REST API.
    credit = {
        "tool": "payments.store_credit",
        "arguments": {"order_id": "3010", "amount": "120.00", "currency": "EUR"},
        "target": "order:3010",
    }
    with api(stack) as client:
        created = client.post(
            "/api/v1/proposals",
            json={
                "task_id": f"task-{uuid.uuid4()}",
                "context_id": "ctx-credit",
                "request": factories.approval_request(action=credit),
            },
        )
    assert created.status_code == 201, created.text
    caught = Proposal.objects.get(pk=created.json()["proposal_id"])

    assert caught.state == State.AWAITING_REVIEW  # not allowed: the payments.* policy routes it to people
    assert [v.policy.slug for v in caught.policy_versions.all()] == ["customer-money"]


# --- 11. a committed but lost response goes unknown and reconciles without a duplicate --------------------


@pytest.mark.parametrize("world", ["paying_stack"], indirect=True)
def test_11_a_committed_but_lost_response_goes_unknown_and_reconciles_without_a_duplicate(world, payments):
    stack, tenant, agent, people = world
    payments.ledger.drop_next_response = True  # the next refund commits, then its answer is lost
    task_id = ask_refund(stack, "Refund EUR 130.00 for order 3011 (double charge)")
    proposal = proposal_for(stack, task_id)

    approve(stack, people["reviewer_a"], proposal)

    assert wait_state(stack, proposal, State.SUCCEEDED) == State.SUCCEEDED
    assert State.UNKNOWN in transitions(proposal)  # it went through unknown, not straight to a retry
    (refund,) = payments_refunds(payments, "3011")  # exactly one effect
    decision = Decision.objects.get(proposal=proposal)
    assert refund["idempotency_key"] == str(decision.jti)
    assert state_of(proposal) == State.SUCCEEDED and Proposal.objects.get(pk=proposal.pk).transaction_id
    assert Decision.objects.filter(proposal__task_id=task_id).count() == 1  # never re-approved


# --- 12. the audit trail links everything ---------------------------------------------------------------


@pytest.mark.parametrize("world", ["paying_stack"], indirect=True)
def test_12_the_audit_trail_links_principal_task_digest_policy_reviewer_decision_key_transaction_outcome(
    world, payments
):
    stack, tenant, agent, people = world
    task_id = ask_refund(stack, "Refund EUR 140.00 for order 3012 (return)")
    proposal = proposal_for(stack, task_id)
    approve(stack, people["reviewer_a"], proposal)
    wait_state(stack, proposal, State.SUCCEEDED)
    proposal = Proposal.objects.get(pk=proposal.pk)
    decision = Decision.objects.get(proposal=proposal)
    events = {e.verb: e for e in AuditEvent.objects.filter(subject=f"proposal:{proposal.id}").order_by("seq")}

    submitted = events[Verb.PROPOSAL_SUBMITTED].data
    assert (submitted["principal"], submitted["task_id"], submitted["action_digest"]) == (
        "requester",
        task_id,
        proposal.action_digest,
    )
    assert events[Verb.POLICY_EVALUATED].data["policies"] == [{"id": "customer-money", "version": 1}]
    vote = events[Verb.VOTE_CAST]
    assert vote.actor == trail_name("reviewer_a") and vote.data["digest_seen"] == proposal.action_digest
    assert vote.data["auth"]["method"] == "totp"
    signed = events[Verb.DECISION_SIGNED].data
    assert signed["jti"] == str(decision.jti) and signed["action_digest"] == proposal.action_digest
    assert events[Verb.DECISION_CONSUMED].data["jti"] == str(decision.jti)
    outcome = events[Verb.OUTCOME_RECORDED].data
    (refund,) = payments_refunds(payments, "3012")
    assert (outcome["status"], outcome["idempotency_key"], outcome["transaction_id"]) == (
        "succeeded",
        str(decision.jti),
        refund["transaction_id"],
    )
    # No secrets: neither the token nor its signature is in the trail.
    trail = " ".join(str(e.data) for e in AuditEvent.objects.all())
    assert decision.token not in trail and decision.token.split(".")[2] not in trail
    result = verify_chain(f"tenant:{tenant.id}")
    assert result.ok, result


# --- token attacks against the real agent ---------------------------------------------------------------


def reviewer_signed_token(stack, proposal: Proposal, **overrides) -> str:
    """A token signed with Reviewer's real key, with claims changed as the attacker wishes."""
    now = int(time.time())
    claims = {
        "iss": stack.url,
        "aud": proposal.agent.audience,
        "sub": proposal.task_id,
        "jti": str(uuid.uuid4()),
        "iat": now,
        "nbf": now,
        "exp": now + 600,
        "context_id": proposal.context_id,
        "request_id": proposal.request_id,
        "proposal_id": str(proposal.id),
        "action_digest": proposal.action_digest,
        "decision": "approved",
        "reason": "",
        "approvers": [],
        "quorum": {},
        "policy": None,
        "tenant": "acme",
        "rev": 3,
        "consume": True,
        **overrides,
    }
    key = keys.active_key()
    assert key.private_key is not None  # active_key() is a key that signs
    return jwt.encode(claims, key.private_key, algorithm="EdDSA", headers={"kid": key.kid, "typ": TOKEN_TYPE})


def resigned(token: str, alg: str, secret) -> str:
    """The same claims and kid, signed another way."""
    payload = jwt.decode(token, options={"verify_signature": False})
    headers = {"kid": keys.active_key().kid, "typ": TOKEN_TYPE}
    if alg == "HS256":
        # PyJWT refuses an asymmetric key as an HMAC secret, so sign by hand as an attacker would.
        header = jwt.utils.base64url_encode(json.dumps({"alg": alg, **headers}).encode()).decode()
        body = token.split(".")[1]
        signature = hmac.new(secret, f"{header}.{body}".encode(), hashlib.sha256).digest()
        return f"{header}.{body}.{jwt.utils.base64url_encode(signature).decode()}"
    return jwt.encode(payload, secret, algorithm=alg, headers=headers)


def forge(stack, kind: str, proposal: Proposal, donor: Proposal) -> str:
    genuine = reviewer_signed_token(stack, proposal)
    if kind == "alg_none":
        header = jwt.utils.base64url_encode(json.dumps({"alg": "none", "typ": TOKEN_TYPE}).encode()).decode()
        return f"{header}.{genuine.split('.')[1]}."
    if kind == "hs256_with_public_key":
        public = keys.active_key().public_key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return resigned(genuine, "HS256", public)
    if kind == "foreign_key":
        return resigned(genuine, "EdDSA", Ed25519PrivateKey.generate())
    if kind == "wrong_audience":
        return reviewer_signed_token(stack, proposal, aud="http://127.0.0.1:1/.well-known/agent-card.json")
    if kind == "expired":
        past = int((datetime.now(UTC) - timedelta(hours=2)).timestamp())
        return reviewer_signed_token(stack, proposal, iat=past, nbf=past, exp=past + 60)
    if kind == "replayed_on_another_task":
        return Decision.objects.get(proposal=donor).token
    if kind == "another_digest":
        return reviewer_signed_token(stack, proposal, action_digest=donor.action_digest)
    raise AssertionError(kind)


ATTACKS = [
    "alg_none",
    "hs256_with_public_key",
    "foreign_key",
    "wrong_audience",
    "expired",
    "replayed_on_another_task",
    "another_digest",
]


def test_token_attacks_are_all_refused_and_nothing_executes(world):
    stack, tenant, agent, people = world
    # A genuine approval on one task, whose token the attacker replays elsewhere.
    donor_task = ask_refund(stack, "Refund EUR 150.00 for order 3020 (genuine)")
    donor = proposal_for(stack, donor_task)
    approve(stack, people["reviewer_a"], donor)
    wait_state(stack, donor, State.SUCCEEDED)
    ledger_before = len(ledger(stack))

    outcomes = {}
    for index, attack in enumerate(ATTACKS):
        task_id = ask_refund(stack, f"Refund EUR 15{index}.00 for order 31{index:02d} (attack {attack})")
        target = proposal_for(stack, task_id)
        send_decision(stack, task_id, forge(stack, attack, target, donor))
        outcomes[attack] = task_state(stack, task_id)

    assert outcomes == {attack: "TASK_STATE_FAILED" for attack in ATTACKS}
    assert len(ledger(stack)) == ledger_before  # nothing executed
