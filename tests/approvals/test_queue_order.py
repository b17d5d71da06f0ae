"""The queue: the most urgent first and, among proposals that expire at the same moment, the riskier first
(Proposal.risk_rank, kept by save() from the risk policy gave it), also across a page boundary (the keyset
cursor carries the rank)."""

import re
from datetime import timedelta
from html import unescape

import pytest
from django.urls import reverse

from approvals.models import Proposal
from approvals.models.risk import rank as risk_rank
from approvals.web.list_pages import PAGE_SIZE
from tests import factories
from tests.factories import submit, verified_client

pytestmark = pytest.mark.django_db

SHOWN = re.compile(r'class="proposal-link" href="/proposals/([0-9a-f-]+)/"')


@pytest.mark.parametrize(
    "risk, rank", [("high", 3), ("medium", 2), ("", 2), ("low", 1), ("critical", 3), ("High ", 3)]
)
def test_unknown_risk_ranks_up_not_down(risk, rank):
    """Not rated counts as medium (nobody said it is low); a label the list does not know as high."""
    assert risk_rank(risk) == rank


def test_intake_ranks_a_proposal_by_the_risk_its_policy_gives(tenant, agent, requester):
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund", risk="high")
    proposal = Proposal.objects.get(pk=submit(agent).pk)
    assert (proposal.risk, proposal.risk_rank) == ("high", 3)


def queue_ids(client) -> list[str]:
    """Every proposal of the queue, page after page, in the order the pages show them."""
    shown, url = [], reverse("approvals:queue")
    while url:
        html = client.get(url).content.decode()
        shown += SHOWN.findall(html)
        following = re.search(r'href="\?(after=[^"]+)" rel="next"', html)
        url = reverse("approvals:queue") + "?" + unescape(following.group(1)) if following else ""
    return shown


def test_ties_in_expiry_show_the_riskier_first_across_a_page_boundary(
    agent, refund_policy, requester, reviewer_a
):
    earlier = [submit(agent) for _ in range(PAGE_SIZE - 1)]
    tied_at = max(p.expires_at for p in earlier) + timedelta(minutes=1)
    tied = []
    for risk in ("low", "high", "", "medium"):
        proposal = submit(agent)
        proposal.risk, proposal.expires_at = risk, tied_at
        proposal.save(update_fields=["risk", "expires_at"])  # as intake saves it: the rank follows
        tied.append(proposal)

    riskier_first = sorted(tied, key=lambda p: (-risk_rank(p.risk), p.pk))
    shown = queue_ids(verified_client(reviewer_a))

    # the first page ends inside the tie: with the high one; the second starts with the medium ones
    assert shown[PAGE_SIZE - 1] == str(riskier_first[0].pk)
    assert shown == [str(p.pk) for p in sorted(earlier, key=lambda p: p.expires_at)] + [
        str(p.pk) for p in riskier_first
    ]
    assert [p.risk for p in riskier_first][0] == "high" and riskier_first[-1].risk == "low"
