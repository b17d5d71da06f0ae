"""The Django admin: pages load, policy drafts are validated (the CEL compiler's message on the field),
versions are immutable, activation needs a second admin, writes go through the audited services, and
staff who are not superusers see only their own tenants."""

from html import unescape

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from accounts.stepup import step_up_for, verify_code
from approvals.models import Agent, Decision, Halt, OutboxMessage, PolicyVersion, Vote
from approvals.services import halts
from approvals.services.halts import active_halt
from approvals.services.outbox import mark_outbox_failed
from approvals.services.policies import create_policy_version
from approvals.services.votes import cast_vote, edit_proposal
from approvals.states import State
from audit.chain.sequencer import sequence_pending
from audit.models import AuditEvent, Verb
from lib.tokens import hash_token
from tenants.models import GroupMembership, TenantMembership
from tests import factories
from tests.factories import submit, totp_code, trail_name

pytestmark = pytest.mark.django_db

DRAFT_FORM = {
    "agent_pattern": "*",
    "tool_pattern": "payments.refund",
    "condition": "",
    "outcome": "require_approval",
    "thresholds": '[{"group": "finance", "count": 1}]',
    "step_up": "per_vote",
    "ttl_seconds": "3600",
    "consume_online": "on",
    "risk": "high",
}


@pytest.fixture
def author(db):
    return factories.policy_admins()[0]


@pytest.fixture
def approver(db):
    return factories.policy_admins()[1]


@pytest.fixture
def as_author(client, author):
    factories.sign_in_verified(client, author)
    return client


@pytest.fixture
def decided(agent, refund_policy, requester, reviewer_a):
    """A proposal with a vote, a signed decision and an outbox row."""
    proposal = submit(agent)
    cast_vote(
        proposal.id,
        reviewer_a,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )
    return proposal


# Tenants and approver groups are models of the tenants app; approvals' admin still registers them.
TENANTS_APP_MODELS = {"tenant", "tenantmembership", "approvergroup", "groupmembership"}


def url(model: str, view: str, *args) -> str:
    app = "tenants" if model in TENANTS_APP_MODELS else "approvals"
    return reverse(f"admin:{app}_{model}_{view}", args=args)


def error_messages(response) -> list[str]:
    return [str(m) for m in response.wsgi_request._messages if m.level_tag == "error"]


def all_messages(response) -> list[str]:
    return [str(m) for m in response.wsgi_request._messages]


# ---------------------------------------------------------------------------------------------------
# Pages load


def test_every_admin_page_loads_for_a_superuser(as_author, tenant, decided):
    halts.halt(scope=Halt.Scope.TENANT, actor=None, reason="drill", tenant=tenant)
    outbox_message = OutboxMessage.objects.filter(proposal=decided).first()
    assert outbox_message is not None
    objects = {
        "tenant": tenant.pk,
        "approvergroup": tenant.groups.get(slug="finance").pk,
        "agent": decided.agent_id,
        "policy": decided.policy_versions.get().policy_id,
        "policyversion": decided.policy_versions.get().pk,
        "halt": Halt.objects.get().pk,
        "outboxmessage": outbox_message.pk,
        "proposal": decided.pk,
        "vote": Vote.objects.get(proposal=decided).pk,
        "decision": Decision.objects.get(proposal=decided).pk,
    }
    for model, pk in objects.items():
        assert as_author.get(url(model, "changelist")).status_code == 200, model
        assert as_author.get(url(model, "change", pk)).status_code == 200, model
    for model in ("tenant", "approvergroup", "agent", "policy", "policyversion", "halt"):
        assert as_author.get(url(model, "add")).status_code == 200, model
    assert as_author.get(reverse("admin:index")).status_code == 200


def test_admin_pages_name_an_empty_icon_so_the_browser_asks_for_no_favicon(as_author, tenant):
    """As the product's own pages do (templates/base.html): otherwise the browser's /favicon.ico is a
    404 and a warning in the log on a first visit to the admin (the demo's walk found it)."""
    for page in (reverse("admin:index"), url("approvergroup", "changelist"), url("policy", "changelist")):
        html = as_author.get(page).content.decode()
        assert html.count('<link rel="icon" href="data:,">') == 1, page
        assert '<div id="site-name">' in html  # Django's own base_site.html still underneath


@pytest.mark.parametrize("model", ["proposal", "vote", "decision", "outboxmessage"])
def test_what_the_services_wrote_cannot_be_added_changed_or_deleted_here(as_author, decided, model):
    pk = {
        "proposal": decided.pk,
        "vote": Vote.objects.get(proposal=decided).pk,
        "decision": Decision.objects.get(proposal=decided).pk,
        "outboxmessage": OutboxMessage.objects.get(proposal=decided).pk,
    }[model]

    assert as_author.get(url(model, "add")).status_code == 403
    assert as_author.post(url(model, "change", pk), {}).status_code == 403
    assert as_author.post(url(model, "delete", pk), {"post": "yes"}).status_code == 403


def test_the_decision_page_never_shows_the_token(as_author, decided):
    decision = Decision.objects.get(proposal=decided)
    page = as_author.get(url("decision", "change", decision.pk)).content.decode()
    assert decision.token not in page
    assert str(decision.jti) in page


def test_a_dead_letter_shows_its_last_error(as_author, decided, settings):
    settings.OUTBOX_MAX_ATTEMPTS = 0
    message = OutboxMessage.objects.get(proposal=decided)
    mark_outbox_failed(message.pk, error="agent answered 502 Bad Gateway")

    page = as_author.get(url("outboxmessage", "changelist") + "?status__exact=dead").content.decode()

    assert "agent answered 502 Bad Gateway" in page


# ---------------------------------------------------------------------------------------------------
# Policy drafts


def test_a_cel_compile_error_is_shown_on_the_condition_field_and_nothing_is_saved(as_author, refund_policy):
    response = as_author.post(
        url("policyversion", "add"),
        {**DRAFT_FORM, "policy": refund_policy.policy_id, "condition": "double(args.amount) >"},
    )

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "Syntax error" in errors["condition"][0]
    assert "Syntax error" in response.content.decode()
    assert PolicyVersion.objects.filter(policy=refund_policy.policy).count() == 1


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("thresholds", '[{"group": "legal", "count": 1}]', "unknown group"),
        ("thresholds", '[{"group": "finance", "count": 0}]', "at least 1"),
        ("thresholds", "[]", "at least one group"),
        ("step_up", "soon", "per_vote"),
    ],
)
def test_thresholds_and_step_up_are_validated_on_their_fields(
    as_author, refund_policy, field, value, message
):
    response = as_author.post(
        url("policyversion", "add"), {**DRAFT_FORM, "policy": refund_policy.policy_id, field: value}
    )

    assert response.status_code == 200
    assert message in response.context["adminform"].form.errors[field][0]


def test_a_valid_draft_is_stored_as_a_new_version_by_the_service(as_author, author, refund_policy):
    response = as_author.post(
        url("policyversion", "add"),
        {**DRAFT_FORM, "policy": refund_policy.policy_id, "condition": "double(args.amount) > 100.0"},
    )

    draft = PolicyVersion.objects.get(policy=refund_policy.policy, version=2)
    assert response.status_code == 302
    assert response["Location"] == url("policyversion", "change", draft.pk)
    assert (draft.status, draft.author, draft.condition) == (
        PolicyVersion.Status.DRAFT,
        author,
        "double(args.amount) > 100.0",
    )
    assert AuditEvent.objects.filter(verb=Verb.POLICY_VERSION_CREATED, subject="policy:refunds@2").exists()
    refund_policy.refresh_from_db()
    assert refund_policy.status == PolicyVersion.Status.ACTIVE  # nothing changes until a second admin says so


def test_the_new_draft_form_starts_from_the_version_it_edits(as_author, refund_policy):
    response = as_author.get(url("policyversion", "add") + f"?from={refund_policy.pk}")
    initial = response.context["adminform"].form.initial
    assert initial["tool_pattern"] == "payments.refund"
    assert initial["policy"] == refund_policy.policy_id


def test_a_version_cannot_be_changed_in_the_admin(as_author, refund_policy):
    page = as_author.get(url("policyversion", "change", refund_policy.pk))
    assert 'name="_save"' not in page.content.decode()

    response = as_author.post(
        url("policyversion", "change", refund_policy.pk), {**DRAFT_FORM, "outcome": "allow"}
    )

    assert response.status_code == 403
    refund_policy.refresh_from_db()
    assert refund_policy.outcome == "require_approval"


# ---------------------------------------------------------------------------------------------------
# Four eyes


@pytest.fixture
def draft(refund_policy, author):
    return create_policy_version(
        refund_policy.policy,
        {
            "outcome": "require_approval",
            "tool_pattern": "payments.refund",
            "thresholds": [{"group": "finance", "count": 2}],
        },
        actor=author,
    )


def test_activation_by_the_author_is_refused(as_author, author, draft, refund_policy):
    page = as_author.get(url("policyversion", "change", draft.pk)).content.decode()
    assert "another admin must approve and activate it" in page
    assert url("policyversion", "activate", draft.pk) not in page

    response = as_author.post(
        url("policyversion", "activate", draft.pk), {"otp_token": factories.totp_code(author)}, follow=True
    )

    assert any("cannot activate" in message for message in error_messages(response))
    draft.refresh_from_db()
    assert draft.status == PolicyVersion.Status.DRAFT
    refund_policy.refresh_from_db()
    assert refund_policy.status == PolicyVersion.Status.ACTIVE


def test_a_second_admin_approves_and_activates_from_the_version_page(client, approver, draft, refund_policy):
    factories.sign_in_verified(client, approver)
    assert (
        url("policyversion", "activate", draft.pk)
        in client.get(url("policyversion", "change", draft.pk)).content.decode()
    )

    response = client.post(
        url("policyversion", "activate", draft.pk), {"otp_token": factories.totp_code(approver)}
    )

    assert response.status_code == 302
    draft.refresh_from_db()
    refund_policy.refresh_from_db()
    assert (draft.status, draft.activated_by) == (PolicyVersion.Status.ACTIVE, approver)
    assert refund_policy.status == PolicyVersion.Status.RETIRED


@pytest.mark.parametrize("code", ["", "000000", "used"], ids=["no-code", "wrong-code", "used-code"])
def test_activation_in_the_admin_needs_a_fresh_code(client, approver, draft, refund_policy, code):
    """As `manage.py policy activate --code` and every vote: the signed-in session alone activates nothing."""
    factories.sign_in_verified(client, approver)
    if code == "used":
        code = factories.totp_code(approver)
        assert verify_code(approver, code) is not None  # spent, e.g. on a vote a moment ago

    response = client.post(url("policyversion", "activate", draft.pk), {"otp_token": code}, follow=True)

    assert any("fresh one-time code" in message for message in error_messages(response))
    draft.refresh_from_db()
    assert draft.status == PolicyVersion.Status.DRAFT


def test_the_version_page_asks_for_the_code_beside_the_button(client, approver, draft):
    factories.sign_in_verified(client, approver)
    page = client.get(url("policyversion", "change", draft.pk)).content.decode()
    assert 'name="otp_token"' in page and 'autocomplete="one-time-code"' in page


def test_the_activate_url_takes_only_post(client, approver, draft):
    factories.sign_in_verified(client, approver)
    assert client.get(url("policyversion", "activate", draft.pk)).status_code == 405


def test_there_is_no_bulk_activation_without_a_code(client, approver, draft):
    factories.sign_in_verified(client, approver)
    action = {"action": "approve_and_activate", "_selected_action": [draft.pk]}
    client.post(url("policyversion", "changelist"), action)
    draft.refresh_from_db()
    assert draft.status == PolicyVersion.Status.DRAFT


# ---------------------------------------------------------------------------------------------------
# Dry run


def test_the_dry_run_page_shows_which_recent_proposals_the_draft_matches(
    as_author, agent, refund_policy, requester, author
):
    submit(agent, action=factories.refund_action(amount="40.00"))
    submit(agent, action=factories.refund_action(amount="5000.00"))
    deny_big = create_policy_version(
        refund_policy.policy,
        {"outcome": "deny", "tool_pattern": "payments.refund", "condition": "double(args.amount) > 1000.0"},
        actor=author,
    )

    response = as_author.get(url("policyversion", "dry_run", deny_big.pk))

    assert response.status_code == 200
    rows = response.context["rows"]
    shown = [(r.proposal.action["arguments"]["amount"], r.draft_matches, r.outcome_with_draft) for r in rows]
    assert shown == [("5000.00", True, "deny"), ("40.00", False, "require_approval")]
    assert "the draft matches <strong>1</strong>" in response.content.decode()


def test_the_dry_run_names_an_edited_proposal_by_its_action_not_the_agents_earlier_summary(
    as_author, agent, refund_policy, requester, author, reviewer_b
):
    original = submit(agent, action=factories.refund_action(amount="75.00"), summary="Refund EUR 75.00")
    edit_proposal(
        original.id,
        reviewer_b,
        arguments={**original.action["arguments"], "amount": "30.00"},
        digest_seen=original.action_digest,
        note="partial refund",
        step_up=factories.fresh_step_up(reviewer_b),
    )
    draft = create_policy_version(
        refund_policy.policy, {"outcome": "deny", "tool_pattern": "payments.refund"}, actor=author
    )

    html = unescape(as_author.get(url("policyversion", "dry_run", draft.pk)).content.decode())

    edited = '<span class="help">(edited by a reviewer)</span>'
    assert f"Refund EUR 30.00 · order:1182</bdi></a> {edited}" in html
    assert "Refund EUR 75.00 (edited)" not in html


def test_the_dry_run_button_replays_an_unsaved_draft_and_saves_nothing(
    as_author, agent, refund_policy, requester
):
    submit(agent)
    versions = PolicyVersion.objects.count()

    response = as_author.post(
        url("policyversion", "add"),
        {**DRAFT_FORM, "policy": refund_policy.policy_id, "outcome": "deny", "_dryrun": "1"},
    )

    assert response.status_code == 200
    assert response.context["unsaved"] is True
    assert [row.outcome_with_draft for row in response.context["rows"]] == ["deny"]
    assert PolicyVersion.objects.count() == versions


def test_the_dry_run_button_with_an_invalid_draft_shows_the_errors(as_author, refund_policy):
    response = as_author.post(
        url("policyversion", "add"),
        {**DRAFT_FORM, "policy": refund_policy.policy_id, "condition": "tool ==", "_dryrun": "1"},
    )

    assert "Syntax error" in response.context["adminform"].form.errors["condition"][0]


# ---------------------------------------------------------------------------------------------------
# Agents, groups, tenants, halts: through the services


def test_registering_an_agent_shows_its_tokens_once_and_stores_only_hashes(as_author, tenant):
    response = as_author.post(
        url("agent", "add"),
        {
            "tenant": tenant.pk,
            "slug": "deploy-bot",
            "name": "Deploy bot",
            "card_url": "https://deploy.example/.well-known/agent-card.json",
            "audience": "",
            "outbound_auth_scheme": "none",
            "outbound_auth_credentials": "",
        },
        follow=True,
    )

    agent = Agent.objects.get(slug="deploy-bot")
    shown = [m for m in all_messages(response) if "shown this once" in m]
    assert len(shown) == 1
    api_token = shown[0].split("API token <code>")[1].split("</code>")[0]
    assert agent.api_token_hash == hash_token(api_token)
    assert agent.audience == agent.card_url
    assert agent.api_token_hash not in as_author.get(url("agent", "change", agent.pk)).content.decode()
    assert AuditEvent.objects.filter(verb=Verb.AGENT_REGISTERED, subject="agent:deploy-bot").exists()


def test_registering_an_agent_at_another_tenants_card_url_is_refused_on_the_field(as_author, tenant):
    globex = factories.make_tenant("globex", "Globex Retail")
    factories.make_agent(
        globex, "globex-refunds", card_url="https://refunds.globex.example/.well-known/agent-card.json"
    )

    response = as_author.post(
        url("agent", "add"),
        {
            "tenant": tenant.pk,
            "slug": "acme-refunds",
            "name": "Acme refunds",
            "card_url": "https://Refunds.Globex.example/.well-known/agent-card.json/",  # a spelling variant
            "audience": "",
            "outbound_auth_scheme": "none",
            "outbound_auth_credentials": "",
        },
    )

    assert response.status_code == 200  # the form again
    assert response.context["adminform"].form.errors["card_url"] == [
        "the card URL 'https://Refunds.Globex.example/.well-known/agent-card.json/' is already another "
        "agent's: an agent's card URL is its own"
    ]
    assert not Agent.objects.filter(slug="acme-refunds").exists()


def test_the_rotate_tokens_action_replaces_both_tokens(as_author, agent):
    old = (agent.push_token_hash, agent.api_token_hash)

    response = as_author.post(
        url("agent", "changelist"), {"action": "rotate_tokens", "_selected_action": [agent.pk]}, follow=True
    )

    agent.refresh_from_db()
    assert agent.push_token_hash not in old and agent.api_token_hash not in old
    assert any("shown this once" in m for m in all_messages(response))
    assert AuditEvent.objects.filter(verb=Verb.AGENT_TOKENS_ROTATED, subject=f"agent:{agent.slug}").exists()


def _group_form(group, *, keep=(), delete=(), add=()) -> dict:
    rows = [(m, False) for m in keep] + [(m, True) for m in delete]
    prefix = "groupmembership_set"
    data = {
        f"{prefix}-TOTAL_FORMS": len(rows) + len(add),
        f"{prefix}-INITIAL_FORMS": len(rows),
        f"{prefix}-MIN_NUM_FORMS": 0,
        f"{prefix}-MAX_NUM_FORMS": 1000,
        "_save": "Save",
    }
    for index, (membership, deleted) in enumerate(rows):
        data.update(
            {
                f"{prefix}-{index}-id": membership.pk,
                f"{prefix}-{index}-group": group.pk,
                f"{prefix}-{index}-user": membership.user_id,
            }
        )
        if deleted:
            data[f"{prefix}-{index}-DELETE"] = "on"
    for offset, user in enumerate(add, start=len(rows)):
        data.update({f"{prefix}-{offset}-group": group.pk, f"{prefix}-{offset}-user": user.pk})
    return data


def test_group_members_are_added_and_removed_through_the_audited_services(
    as_author, tenant, reviewer_a, reviewer_c
):
    finance = tenant.groups.get(slug="finance")
    membership = GroupMembership.objects.get(group=finance, user=reviewer_a)

    response = as_author.post(
        url("approvergroup", "change", finance.pk),
        _group_form(finance, delete=[membership], add=[reviewer_c]),
    )

    assert response.status_code == 302
    assert set(finance.members.values_list("username", flat=True)) == {"reviewer_c"}
    sequence_pending()  # what the on-commit hook does outside the test's transaction
    trail = [
        (e.verb, e.data["user"], e.actor)
        for e in AuditEvent.objects.filter(subject="group:finance", chain=f"tenant:{tenant.id}").order_by(
            "seq"
        )
        if e.actor == trail_name("policy-author")
    ]
    assert trail == [
        (Verb.GROUP_MEMBER_REMOVED, trail_name("reviewer_a"), trail_name("policy-author")),
        (Verb.GROUP_MEMBER_ADDED, trail_name("reviewer_c"), trail_name("policy-author")),
    ]


def test_a_group_member_must_belong_to_the_tenant(as_author, tenant, reviewer_a, outsider):
    finance = tenant.groups.get(slug="finance")

    response = as_author.post(
        url("approvergroup", "change", finance.pk), _group_form(finance, add=[outsider])
    )

    assert response.status_code == 200
    assert "not a member of this tenant" in response.content.decode()
    assert not finance.members.filter(pk=outsider.pk).exists()


def tenant_form_adding(tenant, user, *, principal_id="") -> dict:
    """The tenant's change form as posted: its members as they are, and `user` added as a reviewer."""
    prefix = "memberships"
    existing = list(tenant.memberships.all())
    data = {
        "name": tenant.name,
        "default_ttl_seconds": tenant.default_ttl_seconds,
        "admin_group": tenant.admin_group_id or "",
        "_save": "Save",
        f"{prefix}-TOTAL_FORMS": len(existing) + 1,
        f"{prefix}-INITIAL_FORMS": len(existing),
        f"{prefix}-MIN_NUM_FORMS": 0,
        f"{prefix}-MAX_NUM_FORMS": 1000,
    }
    for index, membership in enumerate(existing):
        data.update(
            {
                f"{prefix}-{index}-id": membership.pk,
                f"{prefix}-{index}-tenant": tenant.pk,
                f"{prefix}-{index}-user": membership.user_id,
                f"{prefix}-{index}-role": membership.role,
                f"{prefix}-{index}-principal_id": membership.principal_id,
            }
        )
    new = len(existing)
    data.update(
        {
            f"{prefix}-{new}-tenant": tenant.pk,
            f"{prefix}-{new}-user": user.pk,
            f"{prefix}-{new}-role": "reviewer",
            f"{prefix}-{new}-principal_id": principal_id,
        }
    )
    return data


def test_tenant_members_are_set_through_the_audited_service(as_author, tenant, admin_user):
    dana = factories.make_user("dana")
    data = tenant_form_adding(tenant, dana, principal_id="dana-ext")

    response = as_author.post(url("tenant", "change", tenant.pk), data)

    assert response.status_code == 302
    assert TenantMembership.objects.get(tenant=tenant, user=dana).principal_id == "dana-ext"
    assert AuditEvent.objects.filter(
        verb=Verb.MEMBERSHIP_CHANGED, subject=trail_name("dana"), actor=trail_name("policy-author")
    ).exists()


def test_a_halt_is_started_and_resumed_through_the_services(as_author, tenant):
    response = as_author.post(
        url("halt", "add"), {"scope": "tenant", "tenant": tenant.pk, "agent": "", "reason": "incident 42"}
    )
    assert response.status_code == 302
    halt = Halt.objects.get()
    assert active_halt(tenant.id) == halt

    as_author.post(url("halt", "changelist"), {"action": "resume", "_selected_action": [halt.pk]})

    assert active_halt(tenant.id) is None
    verbs = list(AuditEvent.objects.filter(subject=f"halt:{halt.pk}").values_list("verb", flat=True))
    assert verbs == [Verb.HALT_STARTED, Verb.HALT_LIFTED]


def test_a_halt_form_refuses_a_scope_without_its_target(as_author):
    response = as_author.post(
        url("halt", "add"), {"scope": "tenant", "tenant": "", "agent": "", "reason": "x"}
    )
    assert response.status_code == 200
    assert not Halt.objects.exists()


# ---------------------------------------------------------------------------------------------------
# Staff who are not superusers see only their tenants


@pytest.fixture
def acme_staff(client, admin_user):
    admin_user.is_staff = True
    admin_user.save(update_fields=["is_staff"])
    admin_user.user_permissions.set(
        Permission.objects.filter(content_type__app_label__in=["approvals", "tenants"])
    )
    factories.sign_in_verified(client, admin_user)
    return client


def test_a_tenant_admin_sees_only_their_tenants_rows(
    acme_staff, agent, refund_policy, requester, other_tenant
):
    ours = submit(agent)
    theirs = submit(factories.make_agent(other_tenant, slug="globex-agent"))

    listed = acme_staff.get(url("proposal", "changelist")).context["cl"].result_list
    assert [p.pk for p in listed] == [ours.pk]
    assert acme_staff.get(url("proposal", "change", theirs.pk)).status_code == 302  # "does not exist"
    tenants = acme_staff.get(url("tenant", "changelist")).context["cl"].result_list
    assert [t.slug for t in tenants] == ["acme"]


def test_a_tenant_admin_cannot_write_a_draft_for_another_tenant(acme_staff, other_tenant):
    globex_policy = factories.make_policy(
        other_tenant, "globex-refunds", thresholds=[{"group": "finance", "count": 1}]
    )
    response = acme_staff.post(url("policyversion", "add"), {**DRAFT_FORM, "policy": globex_policy.policy_id})

    assert response.status_code == 200
    assert "policy" in response.context["adminform"].form.errors
    assert PolicyVersion.objects.filter(policy=globex_policy.policy).count() == 1


def test_a_tenant_admin_cannot_create_tenants_or_global_halts(acme_staff):
    assert acme_staff.get(url("tenant", "add")).status_code == 403
    response = acme_staff.post(
        url("halt", "add"), {"scope": "global", "tenant": "", "agent": "", "reason": "x"}
    )
    assert response.status_code == 200
    assert not Halt.objects.exists()


def test_an_open_proposal_can_be_looked_at_but_not_decided_in_the_admin(
    as_author, agent, refund_policy, requester
):
    proposal = submit(agent)
    assert as_author.get(url("proposal", "change", proposal.pk)).status_code == 200
    proposal.refresh_from_db()
    assert proposal.state == State.AWAITING_REVIEW


def test_an_admin_resets_a_persons_devices_from_the_user_list_and_it_is_audited(tenant, reviewer_a):
    from django.contrib.auth import get_user_model
    from django_otp.plugins.otp_totp.models import TOTPDevice

    from audit.models import AuditEvent, Verb

    superuser = get_user_model().objects.create_superuser("root", "root@example.test", "pw-for-tests")
    client = factories.verified_client(superuser)

    response = client.post(
        "/admin/auth/user/", {"action": "reset_otp_devices", "_selected_action": [reviewer_a.pk]}, follow=True
    )

    assert response.status_code == 200
    assert not TOTPDevice.objects.filter(user=reviewer_a).exists()
    assert AuditEvent.objects.filter(verb=Verb.DEVICE_RESET, subject=trail_name("reviewer_a")).exists()


def test_the_admin_refuses_a_session_not_verified_with_a_one_time_code(client, admin_user):
    admin_user.is_staff = True
    admin_user.save(update_fields=["is_staff"])
    client.force_login(admin_user)  # password only

    response = client.get("/admin/")

    assert response.status_code == 302 and "/admin/login/" in response["Location"]


# ---------------------------------------------------------------------------------------------------
# People: a tenant admin cannot raise herself, and people of other tenants are invisible


@pytest.fixture
def people_admin(client, admin_user):
    """A tenant admin of acme with what the README's device reset needs: staff, the domain's permissions
    and view/change on users."""
    admin_user.is_staff = True
    admin_user.save(update_fields=["is_staff"])
    admin_user.user_permissions.set(
        Permission.objects.filter(content_type__app_label__in=["approvals", "tenants"])
        | Permission.objects.filter(content_type__app_label="auth", codename__in=["view_user", "change_user"])
    )
    factories.sign_in_verified(client, admin_user)
    return client


def person_url(view: str, *args) -> str:
    return reverse(f"admin:auth_user_{view}", args=args)


def test_a_tenant_admin_cannot_make_herself_superuser_or_change_flags(people_admin, admin_user):
    form = {
        "username": "admin",
        "first_name": "Dana",
        "last_name": "",
        "email": "admin@example.test",
        "is_active": "on",
        "is_staff": "on",
        "is_superuser": "on",
        "user_permissions": [p.pk for p in Permission.objects.all()],
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
    }
    response = people_admin.post(person_url("change", admin_user.pk), form)

    assert response.status_code == 302
    admin_user.refresh_from_db()
    assert not admin_user.is_superuser
    assert admin_user.user_permissions.count() < Permission.objects.count()
    assert admin_user.first_name == "Dana"  # the part she may change
    changed = AuditEvent.objects.get(verb=Verb.PERSON_CHANGED, subject=trail_name("admin"))
    assert changed.actor == trail_name("admin") and changed.data["fields"] == ["first_name"]
    assert people_admin.get(person_url("password_change", admin_user.pk)).status_code == 403
    assert people_admin.get(person_url("add")).status_code == 403


def test_people_of_another_tenant_are_invisible_to_a_tenant_admin(
    people_admin, admin_user, reviewer_a, outsider, tenant
):
    root = factories.policy_admins()[0]  # a superuser is never listed to a tenant admin either
    listed = people_admin.get(person_url("changelist")).context["cl"].result_list
    assert {person.username for person in listed} == {"admin", "reviewer_a"}
    popup = people_admin.get(person_url("changelist"), {"_popup": "1", "_to_field": "id", "q": "o"})
    assert {person.username for person in popup.context["cl"].result_list} <= {"admin", "reviewer_a"}
    for person in (outsider, root):
        assert people_admin.get(person_url("change", person.pk)).status_code == 302  # "does not exist"
        assert people_admin.get(person_url("history", person.pk)).status_code in {302, 404}
        assert people_admin.get(person_url("password_change", person.pk)).status_code in {403, 404}
    autocomplete = people_admin.get(
        "/admin/autocomplete/",
        {"app_label": "tenants", "model_name": "tenantmembership", "field_name": "user", "term": "out"},
    )
    assert "outsider" not in autocomplete.content.decode()

    # Typing the outsider's id into the members' raw-id box does not add them to acme.
    response = people_admin.post(url("tenant", "change", tenant.pk), tenant_form_adding(tenant, outsider))
    assert response.status_code == 200
    assert not TenantMembership.objects.filter(tenant=tenant, user=outsider).exists()

    # The device reset action only reaches people she may see.
    people_admin.post(
        person_url("changelist"), {"action": "reset_otp_devices", "_selected_action": [outsider.pk]}
    )
    assert not AuditEvent.objects.filter(verb=Verb.DEVICE_RESET).exists()


def test_a_superusers_change_of_staff_flags_is_recorded_in_the_persons_tenants(as_author, reviewer_a):
    form = {
        "username": "reviewer_a",
        "first_name": reviewer_a.first_name,
        "last_name": "",
        "email": reviewer_a.email,
        "is_active": "on",
        "is_staff": "on",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
    }
    response = as_author.post(person_url("change", reviewer_a.pk), form)

    assert response.status_code == 302
    event = AuditEvent.objects.get(verb=Verb.PERSON_CHANGED, subject=trail_name("reviewer_a"))
    assert (
        event.actor == trail_name("policy-author")
        and event.chain == f"tenant:{reviewer_a.tenant_memberships.get().tenant_id}"
    )
    assert event.data["values"]["is_staff"] == {"from": False, "to": True}
