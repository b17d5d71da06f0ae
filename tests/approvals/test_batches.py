"""Batches with a fixed manifest: intake over REST (all or nothing), one vote on the manifest a person
saw, each member's own decision naming the manifest and consumed once, the agent's changes voiding
votes, a subset where the policy allows it, and revocation."""

import json
import uuid

import jwt
import pytest

from approvals.canonical import manifest_digest
from approvals.models import Batch, BatchMember, Decision, Proposal, Vote
from approvals.services.batches import cast_batch_vote, revoke_batch, withdraw_member
from approvals.services.decisions import consume_decision
from approvals.states import State
from audit.models import AuditEvent, Verb
from lib.errors import ConsumeRefused, VoteRefused
from tests import factories
from tests.factories import approval_request, fresh_step_up, refund_action

pytestmark = pytest.mark.django_db

AUTH = {"HTTP_AUTHORIZATION": "Bearer api-secret"}
BATCH_RULE = {"max_members": 25, "max_total": {"EUR": "1000.00"}}


@pytest.fixture
def batch_policy(tenant):
    """Refunds need one finance approval; up to 25 may be batched, EUR 1000 in all."""
    return factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 1}],
        batch=BATCH_RULE,
    )


# A refund the payment provider can reverse (R1): the agent says so.
REVERSIBLE = {"effect": "Money leaves the merchant account", "reversible": True}


def member(order_id: str, amount: str = "25.00", currency: str = "EUR", **fields) -> dict:
    return approval_request(
        action=refund_action(order_id=order_id, amount=amount, currency=currency),
        request_id=f"refund-{order_id}",
        consequences=REVERSIBLE,
        **fields,
    )


def members(count: int, amount: str = "25.00", start: int = 1000) -> list[dict]:
    return [member(str(start + i), amount) for i in range(count)]


def batch_body(member_list: list[dict], **overrides) -> dict:
    return {
        "task_id": "task-batch",
        "batch_id": "outage-refunds",
        "summary": "Refunds after the outage",
        "manifest_digest": manifest_digest([m["action_digest"] for m in member_list]),
        "members": member_list,
        **overrides,
    }


def post(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json", **AUTH)


def submitted(client, member_list) -> dict:
    response = post(client, "/api/v1/batches", batch_body(member_list))
    assert response.status_code == 201, response.json()
    return response.json()


def claims_of(proposal) -> dict:
    token = Decision.objects.get(proposal=proposal).token
    return jwt.decode(token, options={"verify_signature": False})


def batch_vote(batch_pk, person, manifest, verdict="approve", **fields):
    return cast_batch_vote(
        batch_pk, person, verdict=verdict, manifest_seen=manifest, step_up=fresh_step_up(person), **fields
    )


# --- intake ----------------------------------------------------------------------------------------


def test_agent_submits_a_batch_and_every_member_waits_as_its_own_proposal(client, agent, batch_policy):
    body = submitted(client, members(3))
    batch = Batch.objects.get(pk=body["batch"])
    assert body["manifest_digest"] == batch.manifest_digest == batch.submitted_digest
    assert [m["request_id"] for m in body["members"]] == ["refund-1000", "refund-1001", "refund-1002"]
    assert {m["state"] for m in body["members"]} == {State.AWAITING_REVIEW}
    assert set(Proposal.objects.values_list("manifest_digest", flat=True)) == {batch.manifest_digest}
    assert AuditEvent.objects.filter(verb=Verb.BATCH_SUBMITTED).count() == 1


def test_the_same_batch_again_answers_the_stored_one(client, agent, batch_policy):
    first = submitted(client, members(2))
    again = post(client, "/api/v1/batches", batch_body(members(2)))
    assert again.status_code == 200
    assert again.json()["batch"] == first["batch"]
    assert Proposal.objects.count() == 2


def test_a_batch_id_reused_with_another_manifest_is_refused(client, agent, batch_policy):
    submitted(client, members(2))
    response = post(client, "/api/v1/batches", batch_body(members(3)))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "batch_id_reused"


def _refused(client, body, code, field=None):
    response = post(client, "/api/v1/batches", body)
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == code, error
    if field is not None:
        assert error["field"] == field
    assert Proposal.objects.count() == 0
    assert Batch.objects.count() == 0
    assert AuditEvent.objects.filter(verb=Verb.INTAKE_REFUSED, data__code=code).exists()
    return error


def test_a_manifest_digest_that_does_not_match_its_members_is_refused(client, agent, batch_policy):
    member_list = members(3)
    wrong = manifest_digest([m["action_digest"] for m in reversed(member_list)])  # another order
    _refused(client, batch_body(member_list, manifest_digest=wrong), "manifest_mismatch", "manifest_digest")


def test_a_member_that_repeats_another_is_refused(client, agent, batch_policy):
    member_list = members(2)
    twin = approval_request(
        action=member_list[0]["action"], request_id="refund-again", consequences=REVERSIBLE
    )
    member_list.append(twin)
    _refused(client, batch_body(member_list), "duplicate_member", "members.2")


def test_a_member_whose_digest_does_not_match_its_action_is_refused(client, agent, batch_policy):
    member_list = members(2)
    member_list[1]["action_digest"] = member_list[0]["action_digest"]
    _refused(client, batch_body(member_list), "digest_mismatch", "members.1.action_digest")


def test_a_batch_over_the_policys_size_is_refused(client, agent, tenant):
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund", batch={"max_members": 2})
    _refused(client, batch_body(members(3)), "batch_too_large", "members")


def test_a_batch_over_the_policys_total_is_refused(client, agent, batch_policy):
    _refused(client, batch_body(members(5, amount="250.00")), "batch_over_total", "members")


def test_a_batch_in_a_currency_no_total_names_is_refused(client, agent, batch_policy):
    member_list = [member(str(i), currency="USD") for i in range(2)]
    _refused(client, batch_body(member_list), "batch_over_total")


def test_a_tool_whose_policy_has_no_batch_rule_is_refused(client, agent, refund_policy):
    _refused(client, batch_body(members(2)), "not_batchable", "members.0.action.tool")


def test_a_tool_no_policy_matches_is_refused(client, agent, tenant):
    _refused(client, batch_body(members(2)), "not_batchable")


def test_irreversible_actions_are_not_batched_unless_the_rule_says_so(client, agent, tenant):
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", reversibility="R3", batch=BATCH_RULE
    )
    _refused(client, batch_body(members(2)), "not_batchable", "members.0.action.tool")


def test_irreversible_actions_are_batched_where_the_rule_allows_them(client, agent, tenant):
    factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        reversibility="R3",
        batch={**BATCH_RULE, "irreversible": True},
    )
    submitted(client, members(2))


def test_another_agents_batch_is_not_found(client, agent, batch_policy, tenant):
    body = submitted(client, members(2))
    factories.make_agent(tenant, "other", api_token="other-secret")
    response = client.get(f"/api/v1/batches/{body['batch']}", HTTP_AUTHORIZATION="Bearer other-secret")
    assert response.status_code == 404


# --- one vote, one decision per member ------------------------------------------------------------------


def test_one_vote_approves_every_member_each_naming_the_manifest_and_consumed_once(
    client, agent, batch_policy, reviewer_a
):
    body = submitted(client, members(4))
    result = batch_vote(body["batch"], reviewer_a, body["manifest_digest"])
    assert len(result.votes) == 4
    for proposal in Proposal.objects.all():
        assert proposal.state == State.APPROVED
        claims = claims_of(proposal)
        assert claims["manifest"] == body["manifest_digest"]
        assert claims["action_digest"] == proposal.action_digest
        decision = Decision.objects.get(proposal=proposal)
        consume_decision(agent, decision.jti, rev=decision.rev)
        with pytest.raises(ConsumeRefused) as again:
            consume_decision(agent, decision.jti, rev=decision.rev)
        assert again.value.code == "consumed"
    assert AuditEvent.objects.filter(verb=Verb.BATCH_VOTED).count() == 1


def test_one_rejection_rejects_every_member_with_the_reason(client, agent, batch_policy, reviewer_a):
    body = submitted(client, members(3))
    batch_vote(body["batch"], reviewer_a, body["manifest_digest"], verdict="reject", reason="not this outage")
    assert set(Proposal.objects.values_list("state", flat=True)) == {State.REJECTED}
    assert {claims_of(p)["reason"] for p in Proposal.objects.all()} == {"not this outage"}


def test_a_member_cannot_be_decided_alone(client, agent, batch_policy, reviewer_a):
    submitted(client, members(2))
    with pytest.raises(VoteRefused) as refused:
        factories.vote(Proposal.objects.first(), reviewer_a)
    assert refused.value.code == "batch_member"


def test_separation_of_duties_holds_for_a_batch(client, agent, batch_policy, requester):
    body = submitted(client, members(2))
    with pytest.raises(VoteRefused) as refused:
        batch_vote(body["batch"], requester, body["manifest_digest"])
    assert refused.value.code == "self_approval"
    assert not Vote.objects.exists()


def test_a_batch_vote_without_a_fresh_code_is_refused(client, agent, batch_policy, reviewer_a):
    body = submitted(client, members(2))
    with pytest.raises(VoteRefused) as refused:
        cast_batch_vote(body["batch"], reviewer_a, verdict="approve", manifest_seen=body["manifest_digest"])
    assert refused.value.code == "step_up_required"
    assert not Vote.objects.exists()
    assert AuditEvent.objects.filter(verb=Verb.STEP_UP_FAILED).exists()


def test_an_outsider_cannot_vote_on_a_batch(client, agent, batch_policy, outsider):
    body = submitted(client, members(2))
    with pytest.raises(Exception) as refused:
        batch_vote(body["batch"], outsider, body["manifest_digest"])
    assert getattr(refused.value, "code", None) == "not_found"


# --- the agent changes the batch before the decision ------------------------------------------------


@pytest.fixture
def two_person_policy(tenant):
    return factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 2}],
        batch=BATCH_RULE,
    )


def test_withdrawing_a_member_makes_a_new_manifest_and_voids_the_votes_on_the_old_one(
    client, agent, two_person_policy, reviewer_a, reviewer_b
):
    body = submitted(client, members(3))
    batch_vote(body["batch"], reviewer_a, body["manifest_digest"])
    assert Vote.objects.count() == 3

    response = client.delete(f"/api/v1/batches/{body['batch']}/members/refund-1001", **AUTH)
    assert response.status_code == 200, response.json()
    changed = response.json()
    remaining = [m for m in changed["members"] if m["standing"] == "in"]
    assert changed["manifest_digest"] == manifest_digest([m["action_digest"] for m in remaining])
    assert changed["manifest_digest"] != body["manifest_digest"]
    # reviewer_a's votes on the members still waiting were on the old manifest
    assert not Vote.objects.exclude(proposal__request_id="refund-1001").exists()
    assert Proposal.objects.get(request_id="refund-1001").state == State.CANCELLED

    with pytest.raises(VoteRefused) as stale:
        batch_vote(body["batch"], reviewer_b, body["manifest_digest"])
    assert stale.value.code == "stale_manifest"

    batch_vote(body["batch"], reviewer_b, changed["manifest_digest"])
    assert set(Proposal.objects.exclude(request_id="refund-1001").values_list("state", flat=True)) == {
        State.AWAITING_REVIEW
    }  # one approval of two: reviewer_a must vote again on the new manifest
    batch_vote(body["batch"], reviewer_a, changed["manifest_digest"])
    for proposal in Proposal.objects.exclude(request_id="refund-1001"):
        assert proposal.state == State.APPROVED
        assert claims_of(proposal)["manifest"] == changed["manifest_digest"]


def test_adding_a_member_makes_a_new_manifest(client, agent, two_person_policy, reviewer_a):
    body = submitted(client, members(2))
    batch_vote(body["batch"], reviewer_a, body["manifest_digest"])
    new = member("77")
    response = post(client, f"/api/v1/batches/{body['batch']}/members", {"member": new})
    assert response.status_code == 201, response.json()
    changed = response.json()
    assert len(changed["members"]) == 3
    assert changed["manifest_digest"] == manifest_digest([m["action_digest"] for m in changed["members"]])
    assert not Vote.objects.exists()
    assert set(Proposal.objects.values_list("manifest_digest", flat=True)) == {changed["manifest_digest"]}


def test_adding_a_member_over_the_total_is_refused_and_changes_nothing(client, agent, batch_policy):
    body = submitted(client, members(2, amount="400.00"))
    new = member("77", amount="400.00")
    response = post(client, f"/api/v1/batches/{body['batch']}/members", {"member": new})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "batch_over_total"
    assert Proposal.objects.count() == 2
    assert Batch.objects.get().manifest_digest == body["manifest_digest"]


def test_a_decided_member_cannot_be_withdrawn(client, agent, batch_policy, reviewer_a):
    body = submitted(client, members(2))
    batch_vote(body["batch"], reviewer_a, body["manifest_digest"])
    response = client.delete(f"/api/v1/batches/{body['batch']}/members/refund-1000", **AUTH)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "not_withdrawable"


# --- a subset -----------------------------------------------------------------------------------------


def test_a_subset_is_approved_where_allowed_with_its_own_manifest(client, agent, tenant, reviewer_a):
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", batch={**BATCH_RULE, "partial": True}
    )
    body = submitted(client, members(3))
    result = batch_vote(
        body["batch"],
        reviewer_a,
        body["manifest_digest"],
        approve=["refund-1000", "refund-1002"],
        reason="1001 is a duplicate",
    )
    chosen = list(
        Proposal.objects.filter(request_id__in=["refund-1000", "refund-1002"]).order_by("request_id")
    )
    assert result.manifest == manifest_digest([p.action_digest for p in chosen])
    for proposal in chosen:
        assert proposal.state == State.APPROVED
        assert claims_of(proposal)["manifest"] == result.manifest
    left_out = Proposal.objects.get(request_id="refund-1001")
    assert left_out.state == State.REJECTED
    assert "1001 is a duplicate" in claims_of(left_out)["reason"]
    assert BatchMember.objects.get(proposal=left_out).standing == BatchMember.Standing.EXCLUDED


def test_a_subset_is_refused_where_the_policy_allows_none(client, agent, batch_policy, reviewer_a):
    body = submitted(client, members(3))
    with pytest.raises(VoteRefused) as refused:
        batch_vote(
            body["batch"], reviewer_a, body["manifest_digest"], approve=["refund-1000"], reason="only one"
        )
    assert refused.value.code == "partial_not_allowed"
    assert not Vote.objects.exists()


# --- revocation ---------------------------------------------------------------------------------------


def test_a_members_consume_after_the_batch_was_revoked_is_refused(client, agent, batch_policy, reviewer_a):
    body = submitted(client, members(2))
    batch_vote(body["batch"], reviewer_a, body["manifest_digest"])
    revoke_batch(body["batch"], reviewer_a, reason="wrong outage")
    for decision in Decision.objects.all():
        with pytest.raises(ConsumeRefused) as refused:
            consume_decision(agent, decision.jti, rev=decision.rev)
        assert refused.value.code == "revoked"
    assert Batch.objects.get().revoked_at is not None


def test_withdrawal_after_revocation_is_refused(client, agent, batch_policy, reviewer_a, admin_user):
    body = submitted(client, members(2))
    revoke_batch(body["batch"], admin_user, reason="stop")
    assert set(Proposal.objects.values_list("state", flat=True)) == {State.CANCELLED}
    with pytest.raises(Exception) as refused:
        withdraw_member(agent, body["batch"], "refund-1000")
    assert getattr(refused.value, "code", None) == "batch_closed"


# --- the page ------------------------------------------------------------------------------------------


def test_the_batch_page_shows_every_member_with_amounts_and_totals(client, agent, batch_policy, reviewer_a):
    body = submitted(client, members(3))
    page = factories.verified_client(reviewer_a).get(f"/batches/{body['batch']}/")
    assert page.status_code == 200
    html = page.content.decode()
    for order in ("1000", "1001", "1002"):
        assert f"order:{order}" in html
    assert "EUR 25.00" in html
    assert "EUR 75.00" in html  # the total
    assert body["manifest_digest"] in html
    # What differs between members is named (the order), what is the same is said once (the amount).
    differs = html[html.index("What differs between members") :]
    assert "Order ID" in differs[: differs.index("</dd>")]
    same = html[html.index("The same in every member") :]
    assert "25.00" in same[: same.index("</dd>")]


def test_the_batch_page_is_not_found_for_outsiders(client, agent, batch_policy, outsider):
    body = submitted(client, members(2))
    assert factories.verified_client(outsider).get(f"/batches/{body['batch']}/").status_code == 404


def test_the_batch_page_refuses_the_wrong_method(client, agent, batch_policy, reviewer_a):
    body = submitted(client, members(2))
    assert factories.verified_client(reviewer_a).post(f"/batches/{body['batch']}/").status_code == 405
    assert factories.verified_client(reviewer_a).get(f"/batches/{body['batch']}/decide").status_code == 405


def test_the_page_approves_the_batch_with_one_code(client, agent, batch_policy, reviewer_a):
    body = submitted(client, members(3))
    browser = factories.verified_client(reviewer_a)
    response = browser.post(
        f"/batches/{body['batch']}/decide",
        {
            "action": "approve",
            "manifest": body["manifest_digest"],
            "otp_code": factories.totp_code(reviewer_a),
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert set(Proposal.objects.values_list("state", flat=True)) == {State.APPROVED}
    assert Vote.objects.exclude(page_hash="").count() == 3


def test_the_page_refuses_a_vote_on_the_manifest_it_rendered_before_a_change(
    client, agent, batch_policy, reviewer_a
):
    body = submitted(client, members(3))
    withdraw_member(agent, body["batch"], "refund-1001")
    response = factories.verified_client(reviewer_a).post(
        f"/batches/{body['batch']}/decide",
        {
            "action": "approve",
            "manifest": body["manifest_digest"],
            "otp_code": factories.totp_code(reviewer_a),
        },
    )
    assert response.status_code == 403
    assert "the batch changed since you loaded it" in response.content.decode()
    assert not Vote.objects.exists()


# --- the policy's rule -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rule",
    [
        {"max_members": 1},
        {"max_members": True},
        {"partial": True},
        {"max_members": 5, "max_total": {"eur": "10"}},
        {"max_members": 5, "max_total": {"EUR": 10}},
        {"max_members": 5, "partial": "yes"},
        {"max_members": 5, "surprise": 1},
    ],
)
def test_a_wrong_batch_rule_is_refused_on_its_field(tenant, rule):
    from approvals.policy.validation import version_field_errors

    errors = version_field_errors({"outcome": "allow", "batch": rule}, set())
    assert "batch" in errors


def test_batch_ids_are_uuids(client, agent, batch_policy):
    body = submitted(client, members(2))
    assert uuid.UUID(body["batch"])
    assert client.get("/api/v1/batches/not-a-uuid", **AUTH).status_code == 404


def test_reviewer_computes_the_manifest_digest_of_the_shared_vectors():
    from pathlib import Path

    vectors = json.loads((Path(__file__).resolve().parents[2] / "sdk/vectors/manifests.json").read_text())
    for case in vectors["cases"]:
        assert manifest_digest(case["member_digests"]) == case["manifest_digest"], case["name"]


# --- break-glass on a member ------------------------------------------------------------------------

GLASS = {
    "people": ["reviewer_a"],
    "per_week": 3,
    "amount_cap": "500.00",
    "currency": "EUR",
    "review_hours": 24,
}


@pytest.mark.parametrize("allowed", [False, True], ids=["not-allowed", "allowed"])
def test_a_member_is_released_alone_by_break_glass_only_where_the_batch_rule_says_so(
    client, agent, tenant, requester, reviewer_a, reviewer_b, reviewer_c, admin_user, allowed
):
    from approvals.services.break_glass import break_glass_release

    factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 2}],
        break_glass=GLASS,
        batch={**BATCH_RULE, "break_glass": allowed},
    )
    submitted(client, members(2))
    proposal = Proposal.objects.get(request_id="refund-1000")
    release = lambda: break_glass_release(  # noqa: E731
        proposal.id,
        reviewer_a,
        reason="charged twice now",
        digest_seen=proposal.action_digest,
        step_up=fresh_step_up(reviewer_a),
    )
    if allowed:
        release()
        proposal.refresh_from_db()
        assert proposal.state == State.APPROVED
        assert claims_of(proposal)["manifest"] == proposal.manifest_digest
    else:
        with pytest.raises(Exception) as refused:
            release()
        assert getattr(refused.value, "code", None) == "batch_member"
        assert Proposal.objects.get(pk=proposal.pk).state == State.AWAITING_REVIEW


def test_the_signed_decision_event_names_the_manifest(client, agent, batch_policy, reviewer_a):
    body = submitted(client, members(2))
    batch_vote(body["batch"], reviewer_a, body["manifest_digest"])
    signed = AuditEvent.objects.filter(verb=Verb.DECISION_SIGNED)
    assert [event.data["manifest"] for event in signed] == [body["manifest_digest"]] * 2


# --- the admin: read only ----------------------------------------------------------------------------


def test_a_tenant_admin_reads_a_batch_in_the_admin_and_cannot_change_it(
    client, agent, batch_policy, admin_user
):
    from django.contrib.auth.models import Permission

    body = submitted(client, members(2))
    admin_user.is_staff = True
    admin_user.save(update_fields=["is_staff"])
    admin_user.user_permissions.set(Permission.objects.filter(content_type__app_label="approvals"))
    staff = factories.verified_client(admin_user)
    listed = staff.get("/admin/approvals/batch/")
    assert listed.status_code == 200
    assert [str(b.pk) for b in listed.context["cl"].result_list] == [body["batch"]]
    page = staff.get(f"/admin/approvals/batch/{body['batch']}/change/")
    assert page.status_code == 200
    assert "Refunds after the outage" in page.content.decode()
    assert staff.get("/admin/approvals/batch/add/").status_code == 403
