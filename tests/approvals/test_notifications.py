"""Reviewers who can decide a new proposal get an email with a link, and nothing secret."""

import pytest
from django.core import mail

from approvals import notifications, services
from approvals.stepup import step_up_for
from tests import factories
from tests.factories import submit, totp_code

pytestmark = pytest.mark.django_db(transaction=True)  # intake notifies on commit


@pytest.fixture
def everyone(requester, reviewer_a, reviewer_b, reviewer_c, admin_user, compliance, outsider):
    return None


def test_each_eligible_reviewer_gets_one_email_with_a_link(settings, agent, refund_policy, everyone):
    settings.REVIEWER_ISSUER = "https://reviewer.example.test"
    proposal = submit(agent)
    # Finance decides refunds; the requester is the principal, ops and compliance are not asked.
    assert sorted(message.to[0] for message in mail.outbox) == [
        "reviewer_a@example.test",
        "reviewer_b@example.test",
    ]
    message = mail.outbox[0]
    link = f"https://reviewer.example.test/proposals/{proposal.id}/"
    assert link in message.body
    html, mimetype = message.alternatives[0]
    assert mimetype == "text/html" and f'href="{link}"' in html
    assert message.subject == f"[Reviewer] Decision needed: {proposal.summary}"


def test_the_email_carries_no_secret_and_escapes_agent_text(agent, refund_policy, everyone):
    proposal = submit(agent, summary="Refund <b>now</b>\nBcc: victim@example.test")
    message = mail.outbox[0]
    html = message.alternatives[0][0]
    assert "\n" not in message.subject and "Bcc" in message.subject  # one line: no header injection
    assert "<b>now</b>" not in html and "&lt;b&gt;now&lt;/b&gt;" in html
    for secret in (
        proposal.action_digest,
        proposal.action_digest.removeprefix("sha256:"),
        "otpauth",
        "api-secret",
        "push-secret",
    ):
        assert secret not in message.body and secret not in html and secret not in message.subject


def test_a_long_summary_is_cut_in_the_subject(agent, refund_policy, everyone):
    submit(agent, summary="word " * 90)
    subject = mail.outbox[0].subject
    assert len(subject) <= 200 and subject.endswith("…")


def test_the_tenant_default_emails_the_admins_only(agent, everyone):
    submit(agent)  # no policy matches: the tenant admins decide
    assert [message.to[0] for message in mail.outbox] == ["admin@example.test"]


def test_nobody_is_emailed_for_a_proposal_that_no_longer_waits(agent, refund_policy, everyone, reviewer_a):
    proposal = submit(agent)
    services.cast_vote(
        proposal.id,
        reviewer_a,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )
    mail.outbox.clear()
    assert notifications.notify_eligible_reviewers(proposal.id) == 0
    assert mail.outbox == []


def test_people_without_an_email_address_are_skipped(tenant, agent, refund_policy, everyone):
    silent = factories.make_user("no_mail", tenant=tenant, groups=["finance"])
    silent.email = ""
    silent.save(update_fields=["email"])
    submit(agent)
    assert "" not in [message.to[0] for message in mail.outbox]
    assert len(mail.outbox) == 2
