"""Out of office: a delegate decides within the period and not after, separation of duties still holds,
the signed decision names both people (`on_behalf_of`), every delegation, use and end is audited, and
admins see the active delegations."""

from datetime import timedelta

import jwt
import pytest
import time_machine
from django.utils import timezone

from approvals.notify.audience import waiting_reviewers
from approvals.services.delegations import DelegationRefused, end_delegation, set_delegation
from approvals.worker.loop import Worker
from audit.models import AuditEvent, Verb
from lib.errors import VoteRefused
from tests import factories
from tests.factories import submit, trail_name

pytestmark = pytest.mark.django_db


def vote(proposal, person):
    return factories.vote(proposal, person)


def lend(tenant, delegator, delegate, hours=8):
    now = timezone.now()
    return set_delegation(
        actor=delegator, tenant=tenant, delegate=delegate, starts_at=now, ends_at=now + timedelta(hours=hours)
    )


def test_a_delegate_decides_within_the_period_and_the_token_names_both(
    tenant, agent, refund_policy, requester, reviewer_a, reviewer_c
):
    lend(tenant, reviewer_a, reviewer_c)  # Carol (ops) stands in for Alice (finance)
    proposal = submit(agent)
    cast = vote(proposal, reviewer_c)
    assert cast.on_behalf_of == reviewer_a
    proposal.refresh_from_db()
    assert proposal.state == "approved"
    (approver,) = jwt.decode(proposal.decision.token, options={"verify_signature": False})["approvers"]
    assert approver["sub"] == trail_name("reviewer_c")
    assert approver["on_behalf_of"] == {"sub": trail_name("reviewer_a"), "name": "Alice"}
    used = AuditEvent.objects.get(verb=Verb.DELEGATION_USED, subject=f"proposal:{proposal.id}")
    assert used.data == {"delegate": trail_name("reviewer_c"), "on_behalf_of": trail_name("reviewer_a")}


def test_a_delegate_cannot_decide_after_the_period(
    tenant, agent, refund_policy, requester, reviewer_a, reviewer_c
):
    delegation = lend(tenant, reviewer_a, reviewer_c, hours=1)
    with time_machine.travel(delegation.ends_at + timedelta(seconds=1), tick=False):
        proposal = submit(agent)
        with pytest.raises(VoteRefused) as refused:
            vote(proposal, reviewer_c)
        assert refused.value.code == "not_eligible"
        Worker().tick()
    ended = AuditEvent.objects.get(verb=Verb.DELEGATION_ENDED, subject=f"delegation:{delegation.pk}")
    assert ended.data["early"] is False


def test_an_ended_delegation_lends_nothing(tenant, agent, refund_policy, requester, reviewer_a, reviewer_c):
    delegation = lend(tenant, reviewer_a, reviewer_c)
    end_delegation(delegation.pk, actor=reviewer_a)
    proposal = submit(agent)
    with pytest.raises(VoteRefused):
        vote(proposal, reviewer_c)
    assert AuditEvent.objects.get(verb=Verb.DELEGATION_ENDED).data["early"] is True


def test_a_delegate_who_is_the_requester_cannot_decide(tenant, agent, refund_policy, requester, reviewer_a):
    lend(tenant, reviewer_a, requester)
    proposal = submit(agent)
    with pytest.raises(VoteRefused) as refused:
        vote(proposal, requester)
    assert refused.value.code == "self_approval"


def test_the_requesters_own_delegation_lends_nothing_on_their_request(
    tenant, agent, refund_policy, requester, reviewer_c
):
    lend(tenant, requester, reviewer_c)  # the requester is in finance, but never for their own request
    proposal = submit(agent)
    with pytest.raises(VoteRefused) as refused:
        vote(proposal, reviewer_c)
    assert refused.value.code == "not_eligible"


def test_a_person_and_their_delegate_are_one_voice(
    tenant, agent, requester, reviewer_a, reviewer_b, reviewer_c
):
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 2}]
    )
    lend(tenant, reviewer_a, reviewer_c)
    proposal = submit(agent)
    vote(proposal, reviewer_a)  # Alice is back early and votes herself
    with pytest.raises(VoteRefused) as refused:
        vote(proposal, reviewer_c)
    assert refused.value.code == "already_voted"
    vote(proposal, reviewer_b)
    proposal.refresh_from_db()
    assert proposal.state == "approved"


def test_reminders_skip_a_person_whose_delegate_voted_for_them(
    tenant, agent, requester, reviewer_a, reviewer_b, reviewer_c
):
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 2}]
    )
    lend(tenant, reviewer_a, reviewer_c)
    proposal = submit(agent)
    assert {p.username for p in waiting_reviewers(proposal)} == {"reviewer_a", "reviewer_b", "reviewer_c"}
    vote(proposal, reviewer_c)  # Carol votes on Alice's behalf: both of their voices are taken
    assert [p.username for p in waiting_reviewers(proposal)] == ["reviewer_b"]


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"delegate": "self"}, "bad_delegate"),
        ({"delegate": "compliance"}, "bad_delegate"),
        ({"hours": -1}, "bad_period"),
        ({"hours": 24 * 100}, "bad_period"),
    ],
)
def test_bad_delegations_are_refused(tenant, reviewer_a, compliance, change, code):
    delegate = {"self": reviewer_a, "compliance": compliance}.get(change.get("delegate"), compliance)
    if "hours" in change:
        delegate = factories.make_user("erin", tenant=tenant)
    now = timezone.now()
    with pytest.raises(DelegationRefused) as refused:
        set_delegation(
            actor=reviewer_a,
            tenant=tenant,
            delegate=delegate,
            starts_at=now,
            ends_at=now + timedelta(hours=change.get("hours", 8)),
        )
    assert refused.value.code == code


@pytest.mark.parametrize("hours", [8, -1])
def test_a_name_nobody_has_and_a_person_of_another_tenant_are_refused_alike(
    tenant, other_tenant, reviewer_a, hours
):
    foreigner = factories.make_user("otto", tenant=other_tenant)
    now = timezone.now()
    refusals = []
    for delegate in [None, foreigner]:  # None: the form's answer for a name nobody has
        with pytest.raises(DelegationRefused) as refused:
            set_delegation(
                actor=reviewer_a,
                tenant=tenant,
                delegate=delegate,
                starts_at=now,
                ends_at=now + timedelta(hours=hours),
            )
        refusals.append(refused.value.as_dict())
    assert refusals[0] == refusals[1]


def test_the_out_of_office_form_does_not_tell_another_tenants_usernames_from_unknown_ones(
    tenant, other_tenant, reviewer_a
):
    factories.make_user("otto", tenant=other_tenant)
    client = factories.verified_client(reviewer_a)
    now = timezone.now()

    def errors_for(username):
        response = client.post(
            "/out-of-office/",
            {
                "tenant": tenant.pk,
                "delegate": username,
                "starts_at": now.strftime("%Y-%m-%dT%H:%M"),
                "ends_at": (now + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M"),
            },
        )
        assert response.status_code == 200  # the form again
        return response.context["form"].errors

    foreign, unknown = errors_for("otto"), errors_for("nobody-at-all")
    assert (
        foreign
        == unknown
        == {"delegate": ["the delegate must be an active reviewer or admin of this tenant"]}
    )
    assert not AuditEvent.objects.filter(verb=Verb.DELEGATION_CREATED).exists()


def test_people_set_delegations_on_their_page_and_admins_see_the_active_ones(
    tenant, reviewer_a, reviewer_c, admin_user
):
    client = factories.verified_client(reviewer_a)
    now = timezone.now()
    response = client.post(
        "/out-of-office/",
        {
            "tenant": tenant.pk,
            "delegate": "reviewer_c",
            "starts_at": now.strftime("%Y-%m-%dT%H:%M"),
            "ends_at": (now + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M"),
            "note": "holiday",
        },
    )
    assert response.status_code == 302
    created = AuditEvent.objects.get(verb=Verb.DELEGATION_CREATED)
    assert created.data["delegate"] == trail_name("reviewer_c")
    page = factories.verified_client(admin_user).get("/out-of-office/")
    assert b"Active delegations in your tenants" in page.content
    assert b"reviewer_a" in page.content and b"reviewer_c" in page.content


def test_the_delegates_queue_holds_what_the_delegator_decides(
    tenant, agent, refund_policy, requester, reviewer_a, reviewer_c
):
    proposal = submit(agent)
    queue = factories.verified_client(reviewer_c)
    assert str(proposal.id).encode() not in queue.get("/").content
    lend(tenant, reviewer_a, reviewer_c)
    assert str(proposal.id).encode() in queue.get("/").content


def test_a_delegation_lends_its_delegators_groups_of_its_own_tenant_only(
    tenant, other_tenant, agent, refund_policy, requester, reviewer_c
):
    # Bea decides finance in acme and lends her globex groups to Carol; Otto, of acme's ops, lends his acme
    # groups to Carol. Carol's acme queue holds what ops decides, not what Bea decides in acme.
    from tenants.models import GroupMembership, TenantMembership

    bea = factories.make_user("bea", tenant=tenant, groups=["finance"])
    TenantMembership.objects.create(tenant=other_tenant, user=bea, role=TenantMembership.Role.REVIEWER)
    GroupMembership.objects.create(group=factories.make_group(other_tenant, "finance"), user=bea)
    TenantMembership.objects.create(tenant=other_tenant, user=reviewer_c, role=TenantMembership.Role.REVIEWER)
    otto = factories.make_user("otto", tenant=tenant, groups=["ops"])
    lend(other_tenant, bea, reviewer_c)
    lend(tenant, otto, reviewer_c)
    proposal = submit(agent)  # a refund: finance decides it in acme
    assert str(proposal.id).encode() not in factories.verified_client(reviewer_c).get("/").content
