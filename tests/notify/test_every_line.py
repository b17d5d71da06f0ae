"""Every line Reviewer writes about a proposal names the currency where it shows an amount and spells the
target as the page and the target's history do: the Slack message, the Teams card, the Web Push
notification, the e-mail digest, the signed decision's audit entry (the audit report's decisions) and
the evidence packet. Walked for each adapter's proposal (LangGraph, the OpenAI Agents SDK), whose
currency comes from the tool description (ToolDescription(currency=...)) and so is not bound by the
digest, and whose target the adapters write as "order_id:7002"."""

import io
import json

import pytest
from django.core import mail
from django.core.mail import EmailMultiAlternatives

from approvals.models.notifications import PushSubscription
from approvals.worker import notifications
from approvals.worker.loop import Worker
from audit.exports.evidence import build_packet
from audit.exports.pdf import write_evidence
from audit.models import AuditEvent, Verb
from tests import factories
from tests.approvals.test_headline import agents_sdk_fields, langgraph_fields

pytestmark = pytest.mark.django_db

HEADLINE = "Refund EUR 22.00 · order:7002"
NOTE = "EUR (stated by the tool description, not part of the approved action)"


@pytest.fixture(params=[langgraph_fields, agents_sdk_fields], ids=["langgraph", "agents-sdk"])
def adapter_proposal(request, agent, refund_policy):
    built = request.param()
    assert built["action"]["target"] == "order_id:7002" and "currency" not in built["action"]["arguments"]
    return factories.submit(
        agent, action=built["action"], summary=built["summary"], consequences=built["consequences"]
    )


def test_slack_teams_push_and_mail_name_the_currency_and_the_target_as_the_page(
    adapter_proposal, workspace, slack, channel, push_service, requester, reviewer_a, reviewer_b
):
    factories.subscribe_push_device(reviewer_a, push_service.subscription())
    Worker().tick()

    (posted,) = slack.calls_to("chat.postMessage")
    header, fields = posted["blocks"][0]["text"]["text"], [f["text"] for f in posted["blocks"][2]["fields"]]
    assert header == f"Approval requested: {HEADLINE}"
    assert "Amount: EUR 22.00" in fields and f"Currency: {NOTE}" in fields and "Target: order:7002" in fields
    assert "order_id" not in header + json.dumps(fields)

    (card,) = channel.cards
    shown = json.dumps(card, ensure_ascii=False)
    assert HEADLINE in shown and '"EUR 22.00"' in shown and NOTE in shown and '"order:7002"' in shown

    assert PushSubscription.objects.filter(user=reviewer_a).exists()
    (delivered,) = [d for d in push_service.delivered if d["payload"]["tag"] == str(adapter_proposal.id)]
    assert delivered["payload"]["body"].startswith(f"{HEADLINE}: ")

    notifications.send_digests()
    digest = next(m for m in mail.outbox if m.to == [reviewer_a.email])
    assert f"What:    {HEADLINE} (currency: {NOTE})" in digest.body
    assert isinstance(digest, EmailMultiAlternatives)
    html = str(digest.alternatives[0][0])
    assert "EUR 22.00" in html and "order:7002" in html and "not part of the approved action" in html


def test_the_decision_and_the_evidence_packet_name_the_currency_and_the_target_as_the_page(
    adapter_proposal, tenant, requester, reviewer_a
):
    factories.vote(adapter_proposal, reviewer_a)
    signed = AuditEvent.objects.get(verb=Verb.DECISION_SIGNED, subject=f"proposal:{adapter_proposal.id}")
    assert signed.data["amount"] == f"EUR 22.00; currency {NOTE}"  # the audit report's decisions column
    packet = build_packet(tenant, adapter_proposal.id)
    assert packet is not None
    assert packet["proposal"]["headline"] == {"text": HEADLINE, "currency_note": NOTE}
    pdf = io.BytesIO()
    write_evidence(packet, pdf)
    assert pdf.getvalue().startswith(b"%PDF")


def test_a_currency_in_the_arguments_needs_no_note_on_any_line(
    agent, refund_policy, workspace, slack, channel, requester
):
    factories.submit(agent)  # arguments {"order_id": "1182", "amount": "40.00", "currency": "EUR"}
    Worker().tick()
    (posted,) = slack.calls_to("chat.postMessage")
    assert posted["blocks"][0]["text"]["text"] == "Approval requested: Refund EUR 40.00 · order:1182"
    assert "Currency:" not in json.dumps(posted["blocks"]) and "Currency" not in json.dumps(channel.cards)
