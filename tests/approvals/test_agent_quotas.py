"""Intake quotas (approvals/services/quotas.py): a token bucket per agent and per tenant and a ceiling of
open proposals per agent and per tenant. Over a limit every intake path answers 429 with Retry-After and
a documented code, stores no proposal, and one audit event per agent per window says so; the queue tells
the tenant's admins. The PostgreSQL race is tests/approvals/test_quota_race_postgres.py."""

import json
import uuid
from datetime import timedelta

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone

from approvals.a2a.parked_tasks import ParkedTaskLister
from approvals.models import PolicyVersion, Proposal, QuotaState
from approvals.services.quotas import agent_limits, set_agent_limits, set_tenant_limits
from approvals.states import State
from approvals.worker.loop import TickReport
from audit.models import AuditEvent, Verb
from lib.errors import QuotaExceeded, ServiceError
from tests import factories
from tests.approvals.test_cross_tenant_agents import (  # noqa: F401 (fixtures: the real refund agent of globex)
    globex,
    globex_agent_process,
    loopback_agents,
    park_refund,
    register,
)
from tests.approvals.test_push import parked
from tests.factories import approval_request, submit, verified_client

pytestmark = pytest.mark.django_db

AUTH = {"HTTP_AUTHORIZATION": "Bearer api-secret"}
ALLOWED = {"tool": "tickets.close", "arguments": {"id": "7"}}


def post_proposal(client, *, task_id=None, request=None):
    body = {
        "task_id": task_id or f"task-{uuid.uuid4()}",
        "context_id": "",
        "request": request or approval_request(),
    }
    return client.post("/api/v1/proposals", json.dumps(body), content_type="application/json", **AUTH)


def events(verb) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(verb=verb).order_by("pk"))


@pytest.fixture
def limited(agent, refund_policy):
    """The agent may send 3 at once, then one every 10 seconds; at most 100 may wait for people."""
    return set_agent_limits(agent, intake_burst=3, intake_per_minute=6, open_proposals_max=100)


def test_an_agent_over_its_burst_gets_429_with_retry_after_and_nothing_is_stored(client, limited):
    assert [post_proposal(client).status_code for _ in range(3)] == [201, 201, 201]
    submitted = len(events(Verb.PROPOSAL_SUBMITTED))

    response = post_proposal(client)

    assert response.status_code == 429
    assert response["Retry-After"] == "10"  # one token comes back every 10 s
    error = response.json()["error"]
    assert error["code"] == "rate_limited" and error["field"] is None
    assert "3 proposals at once and 6 a minute" in error["message"] and "retry after 10 s" in error["message"]
    assert Proposal.objects.count() == 3
    assert len(events(Verb.PROPOSAL_SUBMITTED)) == submitted
    assert events(Verb.INTAKE_REFUSED) == []  # a throttled request is not an intake refusal
    (throttled,) = events(Verb.INTAKE_THROTTLED)
    assert throttled.subject == f"agent:{limited.slug}" and throttled.actor == f"agent:{limited.slug}"
    assert throttled.data["code"] == "rate_limited" and throttled.data["via"] == "api"


def test_the_bucket_refills_at_the_sustained_rate(client, limited):
    with time_machine.travel(timezone.now(), tick=False) as clock:
        for _ in range(3):
            submit(limited)
        with pytest.raises(QuotaExceeded) as refused:
            submit(limited)
        assert refused.value.retry_after == 10
        clock.shift(timedelta(seconds=10))
        submit(limited)  # one token back
        with pytest.raises(QuotaExceeded):
            submit(limited)
        clock.shift(timedelta(minutes=5))  # refilled, but never past the burst
        for _ in range(3):
            submit(limited)
        with pytest.raises(QuotaExceeded):
            submit(limited)
    assert Proposal.objects.count() == 7


def test_a_flood_writes_one_audit_event_per_agent_per_window(settings, limited):
    settings.QUOTA_AUDIT_WINDOW_SECONDS = 300
    with time_machine.travel(timezone.now(), tick=False) as clock:
        for _ in range(3):
            submit(limited)
        for _ in range(50):
            with pytest.raises(QuotaExceeded):
                submit(limited)
        assert len(events(Verb.INTAKE_THROTTLED)) == 1
        state = QuotaState.objects.get(agent=limited)
        assert (state.refused, state.throttled_limit) == (50, "rate_limited")

        clock.shift(timedelta(seconds=301))  # a new window: the first refusal in it is audited
        for _ in range(3):
            submit(limited)
        with pytest.raises(QuotaExceeded):
            submit(limited)

    first, second = events(Verb.INTAKE_THROTTLED)
    assert first.data["previous_window"] is None
    assert second.data["previous_window"]["refused"] == 50
    assert second.data["previous_window"]["code"] == "rate_limited"
    assert QuotaState.objects.get(agent=limited).refused == 1


def open_at_most(tenant, agent) -> tuple[int | None, int | None]:
    """The quota rows' bounds on what waits for people: the agent's and its tenant's."""
    return (
        QuotaState.objects.get(agent=agent).open_at_most,
        QuotaState.objects.get(tenant=tenant, agent=None).open_at_most,
    )


def test_the_open_ceiling_counts_only_what_waits_for_people(client, agent, refund_policy, reviewer_a):
    factories.make_policy(
        agent.tenant, "tickets", tool_pattern="tickets.*", outcome=PolicyVersion.Outcome.ALLOW
    )
    set_agent_limits(agent, open_proposals_max=2)
    first = submit(agent)
    submit(agent)

    response = post_proposal(client)
    assert response.status_code == 429 and response["Retry-After"] == "60"
    assert response.json()["error"]["code"] == "too_many_open"
    # Policy allows this one at intake: it never enters the queue, so the ceiling does not stop it.
    assert post_proposal(client, request=approval_request(action=ALLOWED)).status_code == 201

    factories.vote(first, reviewer_a, "reject", reason="no")
    assert post_proposal(client).status_code == 201  # a slot freed
    assert Proposal.objects.filter(state=State.AWAITING_REVIEW).count() == 2


def test_a_ceiling_raised_since_the_agent_authenticated_is_counted_in_full(agent, refund_policy):
    # Intake counts what waits only as far as the ceiling the agent's row had when it authenticated; the
    # lock reads the ceiling again, and where an admin raised it meanwhile, intake counts again.
    set_agent_limits(agent, open_proposals_max=10)
    for order in ("1", "2", "3"):
        submit(agent, action=factories.refund_action(order_id=order))
    as_authenticated = set_agent_limits(agent, open_proposals_max=1)
    set_agent_limits(agent, open_proposals_max=3)  # raised since: three wait, so a fourth is refused
    with pytest.raises(QuotaExceeded) as refused:
        submit(as_authenticated, action=factories.refund_action(order_id="4"))
    assert refused.value.code == "too_many_open"


def test_intake_counts_what_waits_only_when_the_bound_meets_the_ceiling(
    tenant, agent, refund_policy, reviewer_a
):
    # Counting costs a row per waiting proposal under the tenant's lock; the quota rows' bound (intake
    # adds what it lets in, a decision takes nothing away) says when a count is needed at all.
    agent = set_agent_limits(agent, open_proposals_max=3)
    first = submit(agent, action=factories.refund_action(order_id="1"))
    assert open_at_most(tenant, agent) == (1, 1)  # the rows' first intake: counted
    submit(agent, action=factories.refund_action(order_id="2"))
    factories.vote(first, reviewer_a, "reject", reason="no")  # one waits now; the bound stays
    submit(agent, action=factories.refund_action(order_id="3"))
    assert open_at_most(tenant, agent) == (3, 3)  # not counted (counted, it would be 2)
    assert Proposal.objects.filter(state=State.AWAITING_REVIEW).count() == 2
    # The agent's bound met its ceiling: intake counts (2 wait), lets the fourth in, and keeps the count;
    # the tenant's, far under the tenant's ceiling, is not counted.
    submit(agent, action=factories.refund_action(order_id="4"))
    assert open_at_most(tenant, agent) == (3, 4)
    with pytest.raises(QuotaExceeded) as refused:
        submit(agent, action=factories.refund_action(order_id="5"))
    assert refused.value.code == "too_many_open"
    assert Proposal.objects.filter(state=State.AWAITING_REVIEW).count() == 3


def test_a_ceiling_lowered_since_the_agent_authenticated_is_counted(agent, refund_policy):
    # The read skips the count where the bound is under the ceiling the agent had when it authenticated;
    # the lock reads the ceiling again, and where an admin lowered it under the bound, intake counts.
    as_authenticated = set_agent_limits(agent, open_proposals_max=10)
    for order in ("1", "2"):
        submit(as_authenticated, action=factories.refund_action(order_id=order))
    set_agent_limits(agent, open_proposals_max=2)
    with pytest.raises(QuotaExceeded) as refused:
        submit(as_authenticated, action=factories.refund_action(order_id="3"))
    assert refused.value.code == "too_many_open"


def test_the_tenant_ceiling_counts_all_its_agents_together(tenant, agent, refund_policy):
    other = factories.make_agent(tenant, slug="other-agent", push_token="p2", api_token="a2")
    set_tenant_limits(tenant, open_proposals_max=2)
    submit(agent)
    submit(other)
    with pytest.raises(QuotaExceeded) as refused:
        submit(other)
    assert refused.value.code == "tenant_too_many_open"
    assert QuotaState.objects.get(agent=other).throttled_limit == "tenant_too_many_open"
    assert QuotaState.objects.get(agent=agent).throttled_at is None  # only the agent refused is marked


def test_the_tenant_rate_counts_all_its_agents_together(tenant, agent, refund_policy, other_tenant):
    other = factories.make_agent(tenant, slug="other-agent", push_token="p2", api_token="a2")
    outside = factories.make_agent(other_tenant, slug="globex-agent", push_token="p3", api_token="a3")
    set_tenant_limits(tenant, intake_burst=2, intake_per_minute=60)
    submit(agent)
    submit(other)
    with pytest.raises(QuotaExceeded) as refused:
        submit(agent)
    assert (refused.value.code, refused.value.retry_after) == ("tenant_rate_limited", 1)
    submit(outside)  # another tenant's bucket is its own


def test_the_limits_default_to_the_settings_and_the_agents_own_win(settings, agent, refund_policy):
    settings.AGENT_INTAKE_BURST = 2
    assert agent_limits(agent).burst == 2
    with time_machine.travel(timezone.now(), tick=False) as clock:
        submit(agent)
        submit(agent)
        with pytest.raises(QuotaExceeded):
            submit(agent)
        assert agent_limits(set_agent_limits(agent, intake_burst=5)).burst == 5
        clock.shift(timedelta(minutes=1))  # refilled to the new burst
        for _ in range(5):
            submit(agent)  # the stale `agent` object: intake reads the limits with its lock
        with pytest.raises(QuotaExceeded):
            submit(agent)


def test_a_replay_of_a_known_request_is_answered_even_when_throttled(client, limited):
    request = approval_request()
    first = post_proposal(client, task_id="task-replayed", request=request)
    for _ in range(2):
        post_proposal(client)
    assert post_proposal(client).status_code == 429

    again = post_proposal(client, task_id="task-replayed", request=request)

    assert again.status_code == 200 and again.json()["proposal_id"] == first.json()["proposal_id"]


def test_a_push_over_the_quota_gets_429_with_retry_after_and_stores_nothing(client, limited):
    token = {"HTTP_X_A2A_NOTIFICATION_TOKEN": "push-secret"}

    def push():
        body = json.dumps(parked(task_id=f"task-{uuid.uuid4()}"))
        return client.post("/a2a/push/refund-demo/", body, content_type="application/json", **token)

    assert [push().status_code for _ in range(3)] == [201, 201, 201]
    response = push()

    assert response.status_code == 429 and response["Retry-After"] == "10"
    assert response.json()["error"]["code"] == "rate_limited"
    assert Proposal.objects.count() == 3
    assert events(Verb.INTAKE_THROTTLED)[0].data["via"] == "push"


def mismatched_request() -> dict:
    """An approval request whose digest is not its action's: intake refuses it (400)."""
    return {**approval_request(), "action_digest": "sha256:" + "0" * 64}


def test_invalid_requests_spend_the_agents_rate_and_past_it_get_429_with_one_event_a_window(
    client, settings, limited
):
    settings.QUOTA_AUDIT_WINDOW_SECONDS = 300
    with time_machine.travel(timezone.now(), tick=False):
        answers = [post_proposal(client, request=mismatched_request()) for _ in range(3)]
        assert [a.status_code for a in answers] == [400, 400, 400]
        assert {a.json()["error"]["code"] for a in answers} == {"digest_mismatch"}

        flood = [post_proposal(client, request=mismatched_request()) for _ in range(50)]

        assert {(a.status_code, a["Retry-After"]) for a in flood} == {(429, "10")}
        assert {a.json()["error"]["code"] for a in flood} == {"rate_limited"}
        # One event for the window's invalid requests within the rate; past it one for the whole window.
        (refused,) = events(Verb.INTAKE_REFUSED)
        assert refused.data["code"] == "digest_mismatch" and refused.data["previous_window"] is None
        assert QuotaState.objects.get(agent=limited).invalid_refused == 3
        (throttled,) = events(Verb.INTAKE_THROTTLED)
        assert throttled.data["code"] == "rate_limited" and throttled.data["via"] == "api"
        assert QuotaState.objects.get(agent=limited).refused == 50
        # A valid request waits for the rate as well: the invalid ones spent it.
        assert post_proposal(client).status_code == 429
    assert Proposal.objects.count() == 0


def test_requests_the_schema_refuses_are_throttled_like_any_intake(client, limited):
    with time_machine.travel(timezone.now(), tick=False):
        answers = [post_proposal(client, request={"summary": "no action"}) for _ in range(5)]

    assert [a.status_code for a in answers] == [400, 400, 400, 429, 429]
    assert answers[-1]["Retry-After"] == "10"
    assert len(events(Verb.INTAKE_REFUSED)) == 1 and len(events(Verb.INTAKE_THROTTLED)) == 1


def test_refused_pushes_are_throttled_like_any_intake(client, limited):
    token = {"HTTP_X_A2A_NOTIFICATION_TOKEN": "push-secret"}

    def push(request):
        body = json.dumps(parked(task_id=f"task-{uuid.uuid4()}", request=request))
        return client.post("/a2a/push/refund-demo/", body, content_type="application/json", **token)

    with time_machine.travel(timezone.now(), tick=False):
        invalid = [push({"summary": "no action"}).status_code for _ in range(2)]  # the push parser's 400
        mismatched = [push(mismatched_request()).status_code for _ in range(2)]  # intake's 400, then 429
        last = push(mismatched_request())

    assert invalid + mismatched == [400, 400, 400, 429]
    assert last.status_code == 429 and last["Retry-After"] == "10"
    assert len(events(Verb.INTAKE_REFUSED)) == 1
    assert QuotaState.objects.get(agent=limited).invalid_refused == 3
    assert events(Verb.INTAKE_THROTTLED)[0].data["via"] == "push"


def test_invalid_requests_within_the_rate_write_one_event_a_window_with_the_count(client, settings, agent):
    """A hostile agent with a generous rate sends nothing but invalid requests: each is refused (400), and
    the trail takes one `intake.refused` event a window, the next window's event carrying the count."""
    settings.QUOTA_AUDIT_WINDOW_SECONDS = 300
    set_agent_limits(agent, intake_burst=1000, intake_per_minute=6000)
    with time_machine.travel(timezone.now(), tick=False) as clock:
        flood = [post_proposal(client, request=mismatched_request()) for _ in range(40)]
        flood += [post_proposal(client, request={"summary": "no action"}) for _ in range(20)]

        assert {a.status_code for a in flood} == {400}
        (first,) = events(Verb.INTAKE_REFUSED)
        assert first.data["code"] == "digest_mismatch" and first.data["window_seconds"] == 300
        assert first.data["previous_window"] is None
        assert QuotaState.objects.get(agent=agent).invalid_refused == 60

        clock.shift(timedelta(seconds=301))
        assert post_proposal(client, request={"summary": "no action"}).status_code == 400

    first, second = events(Verb.INTAKE_REFUSED)
    assert second.data["code"] == "invalid"  # the schema's refusal, the first of its window
    assert second.data["previous_window"]["refused"] == 60
    assert QuotaState.objects.get(agent=agent).invalid_refused == 1
    assert not events(Verb.INTAKE_THROTTLED) and Proposal.objects.count() == 0


def test_the_openapi_document_names_the_429_of_intake(client):
    document = client.get("/api/v1/openapi.json").json()
    operation = document["paths"]["/api/v1/proposals"]["post"]
    assert "429" in operation["responses"] and "Retry-After" in operation["description"]


# --- setting the limits --------------------------------------------------------------------------


def test_setting_limits_is_audited_and_refuses_what_is_not_a_count(agent, admin_user):
    set_agent_limits(agent, actor=admin_user, intake_burst=10, intake_per_minute=None)
    (changed,) = events(Verb.QUOTA_CHANGED)
    assert changed.data == {"changes": {"intake_burst": [None, 10]}}
    with pytest.raises(ServiceError) as bad:
        set_agent_limits(agent, actor=admin_user, intake_burst=-1)
    assert (bad.value.code, bad.value.field) == ("bad_quota", "intake_burst")
    with pytest.raises(ServiceError) as unknown:
        set_agent_limits(agent, actor=admin_user, tokens=3)
    assert unknown.value.code == "bad_field"
    agent.refresh_from_db()
    assert agent.intake_burst == 10


def test_a_reviewer_cannot_set_limits(agent, reviewer_a):
    with pytest.raises(ServiceError) as refused:
        set_agent_limits(agent, actor=reviewer_a, intake_burst=1000)
    assert refused.value.code == "not_admin"


def test_the_admin_sets_an_agents_and_a_tenants_limits(client, tenant, agent):
    author = factories.policy_admins()[0]
    factories.sign_in_verified(client, author)
    response = client.post(
        reverse("admin:approvals_agent_change", args=[agent.pk]),
        {
            "name": agent.name,
            "card_url": agent.card_url,
            "audience": agent.audience,
            "outbound_auth_scheme": "none",
            "outbound_auth_credentials": "",
            "intake_burst": "5",
            "intake_per_minute": "30",
            "open_proposals_max": "",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    agent.refresh_from_db()
    assert (agent.intake_burst, agent.intake_per_minute, agent.open_proposals_max) == (5, 30, None)
    page = client.get(reverse("admin:approvals_agent_change", args=[agent.pk])).content.decode()
    assert "5 at once, 30 a minute, 500 waiting for people at most" in page  # 500: AGENT_OPEN_PROPOSALS

    response = client.post(
        reverse("admin:tenants_tenant_change", args=[tenant.pk]),
        {
            "name": tenant.name,
            "default_ttl_seconds": "3600",
            "admin_group": tenant.admin_group_id or "",
            "open_proposals_max": "250",
            "intake_burst": "",
            "intake_per_minute": "",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    tenant.refresh_from_db()
    assert tenant.open_proposals_max == 250
    assert [e.subject for e in events(Verb.QUOTA_CHANGED)] == [f"agent:{agent.slug}", f"tenant:{tenant.slug}"]


# --- the queue -----------------------------------------------------------------------------------


def test_the_queue_tells_the_tenants_admins_which_agent_hit_its_limit(
    limited, admin_user, reviewer_a, outsider
):
    at = timezone.now().replace(hour=14, minute=7)
    with time_machine.travel(at, tick=False):
        for _ in range(3):
            submit(limited)
        for _ in range(4):
            with pytest.raises(QuotaExceeded):
                submit(limited)

        page = verified_client(admin_user).get(reverse("approvals:queue")).content.decode()
        assert "data-throttled" in page
        assert f"Agent <strong>{limited.name}</strong>" in page
        assert "hit its rate limit at" in page and ">14:07</time>, 4 refused" in page

        assert (
            "data-throttled"
            not in verified_client(reviewer_a).get(reverse("approvals:queue")).content.decode()
        )
        assert (
            "data-throttled" not in verified_client(outsider).get(reverse("approvals:queue")).content.decode()
        )

    with time_machine.travel(at + timedelta(hours=1, minutes=1), tick=False):
        page = verified_client(admin_user).get(reverse("approvals:queue")).content.decode()
        assert "data-throttled" not in page  # an hour after the last refusal it is no longer news


# --- ListTasks -----------------------------------------------------------------------------------


def test_a_parked_task_found_over_the_quota_stays_parked_and_is_taken_in_on_a_later_turn(
    globex,  # noqa: F811 (the fixtures imported above)
    globex_agent_process,  # noqa: F811
    loopback_agents,  # noqa: F811
):
    """The real refund agent parks a task and never POSTs it: Reviewer learns of it only by ListTasks."""
    task_id = park_refund(globex_agent_process)
    factories.make_policy(globex, "refunds", tool_pattern="payments.refund")
    agent = register(globex, "globex-refunds", globex_agent_process.audience + "?globex")
    set_agent_limits(agent, intake_burst=0, intake_per_minute=0)  # stopped: nothing may come in
    lister, clock = ParkedTaskLister(every_seconds=60), timezone.now()

    assert lister.list_agent(agent, clock) == 0

    assert not Proposal.objects.filter(task_id=task_id).exists()
    assert lister.refused == set()  # not refused for good: a quota passes
    assert lister.turns[agent.id].next_at == clock + timedelta(seconds=3600)  # no sooner than Retry-After
    assert events(Verb.INTAKE_THROTTLED)[0].data["via"] == "list_tasks"

    set_agent_limits(agent, intake_burst=5, intake_per_minute=60)
    report = TickReport()
    lister.reconcile(report, clock + timedelta(seconds=3600))
    assert report.reconciled == 1 and Proposal.objects.filter(task_id=task_id).exists()
