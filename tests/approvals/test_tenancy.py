"""Tenancy at the service level: people see and act only within their tenants (an outsider gets NotFound,
never a hint), configuration changes stay inside the tenant of whoever makes them, and every
configuration change is audited. The HTTP and WebSocket isolation tests live with the views."""

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from accounts.stepup import step_up_for
from approvals.policy.evaluation import active_versions_for
from approvals.selectors import proposal_for_user
from approvals.services.agents import rotate_agent_tokens
from approvals.services.decisions import note_compensation, revoke_decision
from approvals.services.policies import create_policy
from approvals.services.tenants import (
    add_group_member,
    create_group,
    create_tenant,
    remove_group_member,
    remove_tenant_membership,
    set_tenant_membership,
    update_tenant,
)
from approvals.services.votes import cast_vote, edit_proposal, request_info
from approvals.states import State
from audit.chain.sequencer import sequence_pending
from audit.models import AuditEvent, Verb
from lib.errors import ConfigRefused, Conflict, NotFound, ServiceError, VoteRefused
from lib.tokens import new_token
from tenants.models import ApproverGroup, GroupMembership, Tenant, TenantMembership
from tenants.queries import admin_tenant_ids
from tests import factories
from tests.factories import submit, totp_code, trail_name

pytestmark = pytest.mark.django_db


@pytest.fixture
def globex_admin(other_tenant):
    return factories.make_user("globex_admin", tenant=other_tenant, role="admin", groups=["admins"])


def tenant_events(tenant) -> list[AuditEvent]:
    sequence_pending()  # what the on-commit hook does outside the test's transaction
    return list(AuditEvent.objects.filter(chain=f"tenant:{tenant.id}").order_by("seq"))


# ---------------------------------------------------------------------------------------------------
# Proposals: outsiders learn nothing


def test_a_member_of_another_tenant_cannot_find_the_proposal(agent, refund_policy, requester, outsider):
    proposal = submit(agent)

    with pytest.raises(NotFound):
        proposal_for_user(proposal.id, outsider)
    assert proposal_for_user(proposal.id, requester) == proposal


@pytest.mark.parametrize("act", ["vote", "reject", "request_info", "edit", "revoke", "compensate"])
def test_every_decision_service_answers_not_found_to_an_outsider_and_records_nothing(
    agent, refund_policy, requester, outsider, act
):
    proposal = submit(agent)
    before = len(tenant_events(agent.tenant))
    calls = {
        "vote": lambda: cast_vote(
            proposal.id,
            outsider,
            verdict="approve",
            digest_seen=proposal.action_digest,
            step_up=step_up_for(outsider, totp_code(outsider)),
        ),
        "reject": lambda: cast_vote(
            proposal.id,
            outsider,
            verdict="reject",
            reason="no",
            digest_seen=proposal.action_digest,
            step_up=step_up_for(outsider, totp_code(outsider)),
        ),
        "request_info": lambda: request_info(
            proposal.id, outsider, question="why?", digest_seen=proposal.action_digest
        ),
        "edit": lambda: edit_proposal(
            proposal.id, outsider, arguments={"amount": "1.00"}, digest_seen=proposal.action_digest
        ),
        "revoke": lambda: revoke_decision(proposal.id, outsider, reason="mine now"),
        "compensate": lambda: note_compensation(proposal.id, outsider, note="hello"),
    }

    with pytest.raises(NotFound) as refused:
        calls[act]()

    assert refused.value.code == "not_found"
    assert len(tenant_events(agent.tenant)) == before
    proposal.refresh_from_db()
    assert proposal.state == State.AWAITING_REVIEW


def test_group_membership_in_another_tenant_does_not_make_anyone_eligible(
    agent, tenant, other_tenant, refund_policy, requester
):
    """A consultant in both tenants: finance in globex, no group in acme."""
    consultant = factories.make_user("consultant", tenant=other_tenant, groups=["finance"])
    set_tenant_membership(tenant, consultant, role="reviewer")
    proposal = submit(agent)

    with pytest.raises(VoteRefused) as refused:
        cast_vote(
            proposal.id,
            consultant,
            verdict="approve",
            digest_seen=proposal.action_digest,
            step_up=step_up_for(consultant, totp_code(consultant)),
        )
    assert refused.value.code == "not_eligible"


def test_one_tenants_policies_never_decide_another_tenants_proposals(
    agent, tenant, other_tenant, refund_policy
):
    factories.make_policy(other_tenant, "deny-everything", outcome="deny", thresholds=[])

    proposal = submit(agent)

    assert proposal.state == State.AWAITING_REVIEW
    assert [v.policy.tenant_id for v in active_versions_for(tenant)] == [tenant.id]


def test_the_principal_mapping_is_per_tenant(agent, tenant, other_tenant, refund_policy, reviewer_a):
    """The same external id in another tenant names somebody else, not reviewer_a."""
    factories.make_user("globex-bob", tenant=other_tenant, principal_id="bob-ext")
    proposal = submit(agent, principal_id="bob-ext")

    cast_vote(
        proposal.id,
        reviewer_a,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )
    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED


# ---------------------------------------------------------------------------------------------------
# Configuration stays inside the tenant


def test_an_admin_of_one_tenant_cannot_configure_another(tenant, other_tenant, admin_user, outsider):
    globex_finance = other_tenant.groups.get(slug="finance")  # the outsider fixture made it
    refused = [
        lambda: add_group_member(globex_finance, outsider, actor=admin_user),
        lambda: remove_group_member(globex_finance, outsider, actor=admin_user),
        lambda: set_tenant_membership(other_tenant, admin_user, role="admin", actor=admin_user),
        lambda: remove_tenant_membership(other_tenant, outsider, actor=admin_user),
        lambda: create_group(other_tenant, slug="mine", actor=admin_user),
        lambda: create_policy(other_tenant, slug="mine", actor=admin_user),
        lambda: update_tenant(other_tenant, name="Pwned", actor=admin_user),
    ]
    for call in refused:
        with pytest.raises(ConfigRefused) as error:
            call()
        assert error.value.code == "not_admin"
    assert GroupMembership.objects.filter(group=globex_finance, user=outsider).exists()
    assert not TenantMembership.objects.filter(tenant=other_tenant, user=admin_user).exists()


def test_a_reviewer_cannot_change_configuration(tenant, reviewer_a, reviewer_c):
    with pytest.raises(ConfigRefused):
        add_group_member(tenant.groups.get(slug="finance"), reviewer_c, actor=reviewer_a)


def test_only_members_of_the_tenant_join_its_groups(tenant, admin_user, outsider):
    finance = factories.make_group(tenant, "finance")

    with pytest.raises(ServiceError) as refused:
        add_group_member(finance, outsider, actor=admin_user)

    assert refused.value.code == "not_a_member"


def test_compliance_staff_join_no_approver_group(tenant, admin_user, compliance):
    with pytest.raises(Conflict) as refused:
        add_group_member(factories.make_group(tenant, "finance"), compliance, actor=admin_user)
    assert refused.value.code == "compliance_in_group"


def test_the_admin_group_must_belong_to_the_tenant(tenant, other_tenant, admin_user):
    with pytest.raises(ServiceError) as refused:
        update_tenant(tenant, admin_group=other_tenant.admin_group, actor=admin_user)
    assert refused.value.code == "foreign_group"


def test_an_agent_slug_of_another_tenant_cannot_be_taken_over(agent, other_tenant):
    with pytest.raises(Conflict) as refused:
        factories.make_agent(other_tenant, slug=agent.slug, api_token="globex-token")

    assert refused.value.code == "slug_taken"
    agent.refresh_from_db()
    assert agent.tenant_id != other_tenant.id


def test_an_admin_of_another_tenant_cannot_rotate_an_agents_tokens(agent, globex_admin):
    with pytest.raises(ConfigRefused):
        rotate_agent_tokens(agent, actor=globex_admin)


def test_admins_configure_exactly_their_tenants(tenant, admin_user, reviewer_a):
    author, _ = factories.policy_admins()
    assert admin_tenant_ids(admin_user) == [tenant.id]
    assert admin_tenant_ids(reviewer_a) == []
    assert admin_tenant_ids(author) is None  # a superuser: every tenant


# ---------------------------------------------------------------------------------------------------
# The configuration services, audited


def test_creating_a_tenant_gives_it_an_admin_group_and_starts_its_chain(db):
    superuser, _ = factories.policy_admins()

    created = create_tenant(slug="initech", name="Initech", actor=superuser)

    assert created.admin_group is not None
    assert created.admin_group.slug == "admins"
    assert created.admin_group.tenant == created
    first = tenant_events(created)[0]
    assert (first.seq, first.verb, first.actor) == (1, Verb.TENANT_CREATED, trail_name("policy-author"))


def test_only_a_superuser_creates_tenants(tenant, admin_user):
    with pytest.raises(ConfigRefused):
        create_tenant(slug="initech", name="Initech", actor=admin_user)
    assert not Tenant.objects.filter(slug="initech").exists()


def test_membership_changes_are_audited(tenant, admin_user):
    dana = factories.make_user("dana")
    finance = factories.make_group(tenant, "finance")

    set_tenant_membership(tenant, dana, role="reviewer", principal_id="dana-ext", actor=admin_user)
    add_group_member(finance, dana, actor=admin_user)
    add_group_member(finance, dana, actor=admin_user)  # already a member: nothing to record
    set_tenant_membership(tenant, dana, role="admin", principal_id="dana-ext", actor=admin_user)
    remove_tenant_membership(tenant, dana, actor=admin_user)

    trail = [
        (e.verb, e.data.get("role", e.data.get("group")))
        for e in tenant_events(tenant)
        if e.subject in {trail_name("dana"), "group:finance"}
    ]
    assert trail == [
        (Verb.MEMBERSHIP_CHANGED, "reviewer"),
        (Verb.GROUP_MEMBER_ADDED, "finance"),
        (Verb.MEMBERSHIP_CHANGED, "admin"),
        (Verb.GROUP_MEMBER_REMOVED, "finance"),  # leaving the tenant leaves its groups
        (Verb.MEMBERSHIP_CHANGED, None),
    ]
    assert not GroupMembership.objects.filter(user=dana).exists()
    assert all(
        e.actor == trail_name("admin") for e in tenant_events(tenant) if e.subject == trail_name("dana")
    )


def test_a_principal_id_names_one_member_per_tenant(tenant, admin_user, requester):
    dana = factories.make_user("dana")
    with pytest.raises(Conflict) as refused:
        set_tenant_membership(tenant, dana, principal_id="requester", actor=admin_user)
    assert refused.value.code == "principal_id_taken"


def test_groups_are_created_through_the_service_and_audited(tenant, admin_user):
    group = create_group(tenant, slug="legal", name="Legal", actor=admin_user)

    assert ApproverGroup.objects.get(tenant=tenant, slug="legal") == group
    assert AuditEvent.objects.filter(
        chain=f"tenant:{tenant.id}", subject="group:legal", verb=Verb.GROUP_CREATED
    ).exists()


# ---------------------------------------------------------------------------------------------------
# Scripted set-up: manage.py setup_tenant


def setup_tenant(*args) -> str:
    out = io.StringIO()
    call_command("setup_tenant", *args, stdout=out)
    return out.getvalue()


def test_setup_tenant_creates_the_tenant_its_groups_and_its_people(db):
    factories.make_user("alice")
    setup_tenant(
        "initech",
        "--name",
        "Initech",
        "--group",
        "finance",
        "--group",
        "ops:Operations",
        "--member",
        "alice:finance,ops",
        "--role",
        "dana:admin",
        "--member",
        "dana:admins",
        "--principal",
        "bob:bob-ext",
        "--create-users",
    )

    initech = Tenant.objects.get(slug="initech")
    assert initech.name == "Initech"
    assert set(initech.groups.values_list("slug", "name")) == {
        ("admins", "Tenant admins"),
        ("finance", "Finance"),
        ("ops", "Operations"),
    }
    roles = {m.user.username: (m.role, m.principal_id) for m in initech.memberships.select_related("user")}
    assert roles == {"alice": ("reviewer", ""), "dana": ("admin", ""), "bob": ("reviewer", "bob-ext")}
    placed = GroupMembership.objects.filter(group__tenant=initech).values_list(
        "user__username", "group__slug"
    )
    assert set(placed) == {("alice", "finance"), ("alice", "ops"), ("dana", "admins")}
    assert {e.actor for e in tenant_events(initech)} == {"system"}


def test_setup_tenant_run_twice_changes_nothing_the_second_time(db):
    args = (
        "initech",
        "--group",
        "finance",
        "--member",
        "alice:finance",
        "--principal",
        "alice:a-1",
        "--create-users",
    )
    setup_tenant(*args)
    initech = Tenant.objects.get(slug="initech")
    events = len(tenant_events(initech))

    setup_tenant(*args)

    assert len(tenant_events(initech)) == events


def test_setup_tenant_reads_a_json_file(db, tmp_path):
    factories.make_user("alice")
    config = tmp_path / "initech.json"
    config.write_text(
        json.dumps(
            {
                "slug": "initech",
                "name": "Initech",
                "default_ttl_seconds": 900,
                "groups": [{"slug": "finance", "name": "Finance"}, "ops"],
                "members": [
                    {"username": "alice", "role": "admin", "principal_id": "alice@initech", "groups": ["ops"]}
                ],
            }
        )
    )

    setup_tenant("--from-file", str(config))

    initech = Tenant.objects.get(slug="initech")
    assert initech.default_ttl_seconds == 900
    membership = initech.memberships.get(user__username="alice")
    assert (membership.role, membership.principal_id) == ("admin", "alice@initech")
    assert initech.groups.get(slug="ops").members.filter(username="alice").exists()


def test_setup_tenant_is_all_or_nothing(db):
    with pytest.raises(CommandError, match="no user 'ghost'"):
        setup_tenant("initech", "--group", "finance", "--member", "ghost:finance")
    assert not Tenant.objects.filter(slug="initech").exists()


def test_setup_tenant_names_a_missing_group(db):
    factories.make_user("alice")
    with pytest.raises(CommandError, match="no group 'legal'"):
        setup_tenant("initech", "--member", "alice:legal")


def test_setup_tenant_refuses_compliance_staff_in_an_approver_group(db):
    with pytest.raises(CommandError, match="do not vote"):
        setup_tenant(
            "initech",
            "--group",
            "finance",
            "--role",
            "carl:compliance",
            "--member",
            "carl:finance",
            "--create-users",
        )


def test_setup_tenant_created_users_get_a_usable_password_printed_once(db):
    """`--create-users` made people who could never sign in."""
    output = setup_tenant("initech", "--group", "finance", "--member", "alice:finance", "--create-users")

    password = output.split("password (shown once): ")[1].split()[0]
    assert not password.startswith("-")
    assert get_user_model().objects.get(username="alice").check_password(password)


def test_setup_tenant_admin_role_joins_the_admin_group_and_can_use_the_admin_site(db):
    """`--role X:admin` put nobody in the group the fail-closed default routes to, and the
    admin answered 403 on the group pages."""
    setup_tenant("initech", "--group", "finance", "--role", "dana:admin", "--create-users")
    dana = get_user_model().objects.get(username="dana")
    initech = Tenant.objects.get(slug="initech")

    assert initech.admin_group is not None
    assert initech.admin_group.members.filter(pk=dana.pk).exists()
    assert dana.is_staff and not dana.is_superuser
    browser = factories.verified_client(dana)
    for page in ("/admin/tenants/approvergroup/", "/admin/approvals/agent/", "/admin/approvals/policy/"):
        assert browser.get(page).status_code == 200, page
    groups_page = browser.get("/admin/tenants/approvergroup/").content.decode()
    assert "finance" in groups_page

    events = len(tenant_events(initech))
    setup_tenant("initech", "--role", "dana:admin")  # idempotent: nothing new to record
    assert len(tenant_events(initech)) == events


def test_agent_tokens_never_start_with_a_dash(monkeypatch):
    """`register_agent` prints tokens that operators paste as the next argument."""
    drawn = iter(["-starts-like-an-option", "_fine-token"])
    monkeypatch.setattr("lib.tokens.secrets.token_urlsafe", lambda n: next(drawn))
    assert new_token() == "_fine-token"
