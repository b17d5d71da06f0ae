"""Break-glass through HTTP: the control on the proposal page for named people only, with
its budget; the release; the post-hoc reviews in the reviewers' queue and on the page; the admins'
oversight page with overdue reviews and used-up budgets; the metrics counts; flat queue queries."""

import json
from datetime import timedelta
from html import unescape
from io import StringIO

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from approvals.models import BreakGlassRelease, PostHocReview
from approvals.services.break_glass import complete_post_hoc_review, note_overdue_reviews
from approvals.states import State
from audit.chain.sequencer import sequence_pending
from lib.errors import BreakGlassRefused
from tests import factories
from tests.approvals.test_break_glass import RULE, release
from tests.factories import submit, totp_code, verified_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def glass_policy(tenant, requester, reviewer_a, reviewer_b, reviewer_c, admin_user):
    return factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 2}],
        break_glass=RULE,
    )


def url(name, proposal) -> str:
    return reverse(f"approvals:{name}", kwargs={"proposal_id": proposal.id})


def page(client, proposal) -> str:
    response = client.get(url("detail", proposal))
    assert response.status_code == 200
    return unescape(response.content.decode())


def glass_form(proposal, user, **fields) -> dict:
    return {
        "digest": proposal.action_digest,
        "reason": "the card is charged twice right now",
        "otp_code": totp_code(user),
        "confirm": "on",
        **fields,
    }


def test_the_control_shows_to_a_named_person_with_the_budget_left(
    agent, glass_policy, reviewer_a, reviewer_b
):
    proposal = submit(agent)
    html = page(verified_client(reviewer_a), proposal)
    assert "Emergency: break glass" in html
    assert "3 of 3 left this week" in html
    assert "at most EUR 500.00 per release" in html
    assert 'Break glass: release refund of <span class="amount">EUR 40.00</span> now' in html
    assert "Emergency: break glass" not in page(verified_client(reviewer_b), proposal)
    release(submit(agent), reviewer_a)
    assert "2 of 3 left this week" in page(verified_client(reviewer_a), proposal)


def test_a_used_up_budget_or_an_amount_over_the_cap_shows_no_button(agent, glass_policy, reviewer_a):
    over = submit(agent, action=factories.refund_action(amount="900.00"))
    html = page(verified_client(reviewer_a), over)
    assert "Not available here: break-glass releases at most EUR 500.00 at a time" in html
    assert "Break glass: release" not in html
    for _ in range(3):
        release(submit(agent), reviewer_a)
    html = page(verified_client(reviewer_a), submit(agent))
    assert "0 of 3 left this week" in html
    assert "your break-glass budget is used up; the next release frees up" in html
    assert "Break glass: release" not in html


def test_a_release_through_the_page_approves_and_shows_the_record(agent, glass_policy, reviewer_a):
    proposal = submit(agent)
    client = verified_client(reviewer_a)
    response = client.post(url("break_glass", proposal), glass_form(proposal, reviewer_a))
    assert response.status_code == 302
    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED
    html = page(client, proposal)
    assert "Released by break glass" in html
    assert "Alice released this alone" in html
    assert "“the card is charged twice right now”" in html
    assert "not reviewed yet" in html


def test_the_confirmation_and_the_reason_are_required(agent, glass_policy, reviewer_a):
    proposal = submit(agent)
    client = verified_client(reviewer_a)
    response = client.post(
        url("break_glass", proposal), glass_form(proposal, reviewer_a, confirm=""), HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 400
    assert "Tick the box to confirm the break-glass release." in unescape(response.content.decode())
    response = client.post(
        url("break_glass", proposal), glass_form(proposal, reviewer_a, reason=""), HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 403
    assert "a break-glass release needs a reason" in unescape(response.content.decode())
    proposal.refresh_from_db()
    assert proposal.state == State.AWAITING_REVIEW


def test_a_person_not_named_is_refused_with_403(agent, glass_policy, reviewer_b):
    proposal = submit(agent)
    response = verified_client(reviewer_b).post(
        url("break_glass", proposal), glass_form(proposal, reviewer_b)
    )
    assert response.status_code == 403
    assert "break-glass is not open to you" in unescape(response.content.decode())


def test_the_reviews_wait_in_the_reviewers_queue_until_done(agent, glass_policy, reviewer_a, admin_user):
    proposal = submit(agent)
    done = release(proposal, reviewer_a)
    client = verified_client(admin_user)
    queue = unescape(client.get(reverse("approvals:queue")).content.decode())
    assert "Post-hoc reviews: 1 break-glass release to review" in queue
    assert "Released by Alice" in queue
    assert "overdue" not in queue.split("Post-hoc reviews", 1)[1].split("</section>", 1)[0]

    html = page(client, proposal)
    assert "Your post-hoc review" in html
    review = PostHocReview.objects.get(release=done, reviewer=admin_user)
    response = client.post(
        url("post_hoc_review", proposal), {"review": review.pk, "verdict": "agree", "note": ""}
    )
    assert response.status_code == 403
    assert "write a note" in unescape(response.content.decode())
    response = client.post(
        url("post_hoc_review", proposal),
        {"review": review.pk, "verdict": "agree", "note": "the double charge was real"},
    )
    assert response.status_code == 302
    queue = unescape(client.get(reverse("approvals:queue")).content.decode())
    assert "Post-hoc reviews:" not in queue
    html = page(client, proposal)
    assert "You agreed with this break-glass release" in html
    assert "Admin agreed" in html or "admin agreed" in html


def test_overdue_reviews_and_used_up_budgets_are_shown_to_admins(
    agent, glass_policy, reviewer_a, reviewer_b, admin_user
):
    for _ in range(3):
        release(submit(agent), reviewer_a)
    BreakGlassRelease.objects.update(reviews_due_at=timezone.now() - timedelta(hours=1))
    PostHocReview.objects.update(due_at=timezone.now() - timedelta(hours=1))
    note_overdue_reviews()

    response = verified_client(admin_user).get(reverse("approvals:break_glass_oversight"))
    assert response.status_code == 200
    html = unescape(response.content.decode())
    assert "Overdue post-hoc reviews: 6" in html
    assert "1 used up" in html
    assert "3 of 3" in html and "used up" in html
    assert verified_client(reviewer_b).get(reverse("approvals:break_glass_oversight")).status_code == 404

    queue = unescape(verified_client(admin_user).get(reverse("approvals:queue")).content.decode())
    assert "overdue" in queue

    sequence_pending()
    metrics = verified_client(admin_user).get(reverse("audit:metrics", kwargs={"tenant": "acme"}))
    text = unescape(metrics.content.decode())
    assert "3 emergency releases" in text
    assert "6 went overdue" in text


def test_the_metrics_count_budget_refusals_and_disagreements(agent, glass_policy, reviewer_a, admin_user):
    for _ in range(3):
        release(submit(agent), reviewer_a)
    with pytest.raises(BreakGlassRefused):
        release(submit(agent), reviewer_a)
    review = PostHocReview.objects.filter(reviewer=admin_user).first()
    assert review is not None
    complete_post_hoc_review(review.id, admin_user, verdict="disagree", note="could have waited")
    sequence_pending()
    text = unescape(
        verified_client(admin_user).get(reverse("audit:metrics", kwargs={"tenant": "acme"})).content.decode()
    )
    assert "1 refused with the budget used up" in text
    assert "1 done (1 disagreed)" in text


def test_the_policy_page_shows_the_rule(admin_user, glass_policy):
    admin_user.is_staff = True
    admin_user.save(update_fields=["is_staff"])
    admin_user.user_permissions.set(Permission.objects.filter(content_type__app_label="approvals"))
    client = verified_client(admin_user)
    response = client.get(reverse("admin:approvals_policy_change", args=[glass_policy.policy_id]))
    assert response.status_code == 200
    assert '"per_week": 3' in unescape(response.content.decode())


def test_the_post_hoc_section_of_the_queue_costs_the_same_queries_for_1_or_12_reviews(
    agent, glass_policy, tenant, reviewer_a, admin_user
):
    dana = factories.make_user("dana", tenant=tenant, groups=["finance"])
    factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 2}],
        break_glass={**RULE, "people": ["reviewer_a", "dana"], "per_week": 10},
    )
    client = verified_client(admin_user)
    release(submit(agent), reviewer_a)
    with CaptureQueriesContext(connection) as few:
        assert client.get(reverse("approvals:queue")).status_code == 200
    for index in range(11):
        release(submit(agent), dana if index % 2 else reviewer_a)
    with CaptureQueriesContext(connection) as many:
        response = client.get(reverse("approvals:queue"))
    assert unescape(response.content.decode()).count("Released by ") == 12
    assert len(many) == len(few)


def test_the_admin_form_validates_and_stores_the_rule(client, glass_policy):
    from tests.approvals.test_admin import DRAFT_FORM

    author = factories.policy_admins()[0]
    factories.sign_in_verified(client, author)
    add = reverse("admin:approvals_policyversion_add")
    form = {**DRAFT_FORM, "policy": glass_policy.policy_id}
    response = client.post(add, {**form, "break_glass": json.dumps({**RULE, "people": ["mallory"]})})
    assert response.status_code == 200
    assert "mallory" in response.context["adminform"].form.errors["break_glass"][0]
    response = client.post(add, {**form, "break_glass": json.dumps({**RULE, "per_week": 1})})
    assert response.status_code == 302
    assert glass_policy.policy.versions.get(version=2).break_glass == {**RULE, "per_week": 1}


def test_the_policy_command_imports_and_shows_the_rule(tmp_path, tenant, glass_policy):
    author = factories.policy_admins()[0]
    draft = tmp_path / "refunds.json"
    draft.write_text(
        json.dumps(
            {
                "policy": "refunds",
                "outcome": "require_approval",
                "thresholds": [{"group": "finance", "count": 2}],
                "break_glass": {**RULE, "amount_cap": "250.00"},
            }
        )
    )
    call_command("policy", "draft", "--tenant", "acme", "--file", str(draft), "--author", author.username)
    assert glass_policy.policy.versions.get(version=2).break_glass["amount_cap"] == "250.00"
    shown = StringIO()
    call_command("policy", "show", "--tenant", "acme", stdout=shown)
    assert '"amount_cap": "250.00"' in shown.getvalue()
