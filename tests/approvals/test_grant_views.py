"""The standing grants pages (approvals/web/grants.py): the list with used and left, revocation in one
step with a reason, and the grant panel of the proposal page. Every view: works, wrong method, no access."""

import pytest
from django.urls import reverse

from approvals.models import Grant
from tests.approvals.grant_helpers import active_grant, grant_policy, refund, request_grant
from tests.factories import verified_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def grant(tenant, agent, refund_policy, requester, reviewer_a, reviewer_b):
    grant_policy(tenant)
    return active_grant(agent, reviewer_a, reviewer_b)


def test_an_approver_sees_their_grant_with_what_is_used_and_left(grant, agent, reviewer_a):
    refund(agent, amount="25.00")

    response = verified_client(reviewer_a).get(reverse("approvals:grants"))

    assert response.status_code == 200
    text = response.content.decode()
    assert "Your grants: 1" in text
    assert "1 of 30 used" in text and "29 left" in text
    assert "EUR 575.00 left" in text
    assert "Revoke this grant" in text
    assert "All grants of your tenants" not in text  # not an admin


def test_an_admin_sees_every_grant_of_the_tenant(grant, admin_user):
    text = verified_client(admin_user).get(reverse("approvals:grants")).content.decode()

    assert "Your grants: 0" in text and "All grants of your tenants: 1" in text
    assert "Revoke this grant" in text


def test_others_and_outsiders_see_no_grant(grant, requester, outsider, reviewer_c):
    for person in (requester, outsider, reviewer_c):
        text = verified_client(person).get(reverse("approvals:grants")).content.decode()
        assert "Your grants: 0" in text and "payments.refund" not in text


def test_the_list_takes_only_get(grant, reviewer_a):
    assert verified_client(reviewer_a).post(reverse("approvals:grants")).status_code == 405


def test_revoking_in_one_step_with_a_reason(grant, reviewer_a):
    client = verified_client(reviewer_a)

    response = client.post(reverse("approvals:revoke_grant", args=[grant.id]), {"reason": "outage over"})

    assert response.status_code == 302
    grant.refresh_from_db()
    assert (grant.state, grant.end_reason) == (Grant.State.REVOKED, "outage over")
    page = client.get(reverse("approvals:grants")).content.decode()
    assert "The grant is revoked" in page and "Revoke this grant" not in page


def test_revoking_without_a_reason_is_refused_and_nothing_changes(grant, reviewer_a):
    response = verified_client(reviewer_a).post(
        reverse("approvals:revoke_grant", args=[grant.id]), {"reason": ""}
    )

    assert response.status_code == 400
    assert "a revocation needs a reason" in response.content.decode()
    assert Grant.objects.get(pk=grant.pk).state == Grant.State.ACTIVE


def test_revocation_refused_for_others_and_hidden_from_outsiders(grant, requester, outsider):
    url = reverse("approvals:revoke_grant", args=[grant.id])
    assert verified_client(requester).post(url, {"reason": "x"}).status_code == 403
    assert verified_client(outsider).post(url, {"reason": "x"}).status_code == 404
    assert verified_client(requester).get(url).status_code == 405
    assert Grant.objects.get(pk=grant.pk).state == Grant.State.ACTIVE


def test_the_proposal_pages_show_the_grant_asked_for_used_and_missed(grant, agent, reviewer_a, reviewer_b):
    client = verified_client(reviewer_a)
    asked = client.get(reverse("approvals:detail", args=[grant.proposal_id])).content.decode()
    fitted = refund(agent, amount="25.00")
    missed = refund(agent, amount="80.00")

    used = client.get(reverse("approvals:detail", args=[fitted.id])).content.decode()
    not_covered = client.get(reverse("approvals:detail", args=[missed.id])).content.decode()

    assert "This asks for a standing grant" in asked and "30 left" in asked
    assert "Decided under a standing grant" in used and "Left after it: 29 uses, EUR 575.00" in used
    assert "Not covered by a standing grant" in not_covered
    assert "its condition does not hold for these arguments" in not_covered


def test_a_waiting_grant_request_is_decided_on_its_proposal_page(
    tenant, agent, refund_policy, requester, reviewer_a
):
    grant_policy(tenant)
    proposal = request_grant(agent)

    text = verified_client(reviewer_a).get(reverse("approvals:detail", args=[proposal.id])).content.decode()

    assert "This asks for a standing grant" in text and 'id="decision-form"' in text


def test_asking_to_renew_opens_the_renewal_request(grant, reviewer_a):
    client = verified_client(reviewer_a)

    response = client.post(reverse("approvals:renew_grant", args=[grant.id]))

    renewal = Grant.objects.get(renews=grant)
    assert response.status_code == 302
    assert response["Location"] == reverse("approvals:detail", args=[renewal.proposal_id])
    page = client.get(response["Location"]).content.decode()
    assert "This asks for a standing grant" in page and "another approver decides it" in page
    again = client.post(reverse("approvals:renew_grant", args=[grant.id]), follow=True).content.decode()
    assert "a renewal of this grant already waits for its votes" in again


def test_renewal_refused_for_others_and_hidden_from_outsiders(grant, requester, outsider):
    url = reverse("approvals:renew_grant", args=[grant.id])
    assert verified_client(outsider).post(url).status_code == 404
    assert verified_client(requester).get(url).status_code == 405
    verified_client(requester).post(url)
    assert not Grant.objects.filter(renews=grant).exists()
