"""Reviewers who can decide new proposals get one e-mail digest a minute at most, sent by the worker
(never inside the intake request), with links and nothing secret."""

from datetime import timedelta

import pytest
from django.core import mail
from django.core.mail import EmailMultiAlternatives
from django.utils import timezone

from accounts.stepup import step_up_for
from approvals.models import ReviewNotice
from approvals.services.votes import cast_vote
from approvals.worker import notifications
from approvals.worker.loop import Worker
from tests import factories
from tests.factories import submit, totp_code

pytestmark = pytest.mark.django_db


@pytest.fixture
def everyone(requester, reviewer_a, reviewer_b, reviewer_c, admin_user, compliance, outsider):
    return None


def mailed_to() -> list[str]:
    return sorted(message.to[0] for message in mail.outbox)


def test_intake_sends_no_mail_and_the_worker_sends_each_eligible_reviewer_a_link(
    settings, agent, refund_policy, everyone
):
    settings.REVIEWER_ISSUER = "https://reviewer.example.test"
    proposal = submit(agent)
    assert mail.outbox == []  # nothing inside the request: one notice row, committed with the proposal
    assert ReviewNotice.objects.filter(proposal=proposal, user=None).count() == 1
    Worker().tick()
    # Finance decides refunds; the requester is the principal, ops and compliance are not asked.
    assert mailed_to() == ["reviewer_a@example.test", "reviewer_b@example.test"]
    message = mail.outbox[0]
    link = f"https://reviewer.example.test/proposals/{proposal.id}/"
    assert link in message.body
    assert isinstance(message, EmailMultiAlternatives)
    html, mimetype = message.alternatives[0]
    assert isinstance(html, str)
    assert mimetype == "text/html" and f'href="{link}"' in html
    assert message.subject == f"[Reviewer] Decision needed: {proposal.summary}"


def test_many_proposals_in_a_minute_make_one_digest_per_reviewer(settings, agent, refund_policy, everyone):
    now = timezone.now()
    first = [submit(agent) for _ in range(10)]
    assert notifications.send_digests(now) == 2
    assert mailed_to() == ["reviewer_a@example.test", "reviewer_b@example.test"]
    assert mail.outbox[0].subject == "[Reviewer] 10 decisions needed"
    assert all(str(p.id) in mail.outbox[0].body for p in first)

    later = submit(agent)
    mail.outbox.clear()
    assert notifications.send_digests(now + timedelta(seconds=30)) == 0  # mailed half a minute ago
    assert notifications.send_digests(now + timedelta(seconds=settings.NOTIFICATION_DIGEST_SECONDS + 1)) == 2
    assert all(str(later.id) in m.body and str(first[0].id) not in m.body for m in mail.outbox)
    mail.outbox.clear()
    assert notifications.send_digests(now + timedelta(hours=1)) == 0  # nothing is mailed twice


def test_a_mail_server_outage_leaves_the_digest_for_the_next_tick(settings, agent, refund_policy, everyone):
    submit(agent)
    settings.EMAIL_BACKEND = "tests.approvals.test_notifications.RefusingBackend"
    assert notifications.send_digests() == 0 and mail.outbox == []
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    assert notifications.send_digests() == 2


class RefusingBackend:
    def __init__(self, *args, **kwargs):
        pass

    def send_messages(self, messages):
        raise ConnectionRefusedError("the mail server is down")


def test_the_email_carries_no_secret_and_escapes_agent_text(agent, refund_policy, everyone):
    proposal = submit(agent, summary="Refund <b>now</b>\nBcc: victim@example.test")
    notifications.send_digests()
    message = mail.outbox[0]
    assert isinstance(message, EmailMultiAlternatives)
    html = message.alternatives[0][0]
    assert isinstance(html, str)
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
    notifications.send_digests()
    subject = mail.outbox[0].subject
    assert len(subject) <= 200 and subject.endswith("…")


def test_the_tenant_default_emails_the_admins_only(agent, everyone):
    submit(agent)  # no policy matches: the tenant admins decide
    notifications.send_digests()
    assert mailed_to() == ["admin@example.test"]


def test_nobody_is_emailed_for_a_proposal_that_no_longer_waits(agent, refund_policy, everyone, reviewer_a):
    proposal = submit(agent)
    notifications.send_digests()  # fanned out and mailed; a second proposal waits for the next digest
    mail.outbox.clear()
    second = submit(agent)
    cast_vote(
        second.id,
        reviewer_a,
        verdict="approve",
        digest_seen=second.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )
    assert notifications.send_digests(timezone.now() + timedelta(minutes=2)) == 0
    assert mail.outbox == []
    assert not ReviewNotice.objects.filter(sent_at=None).exists()  # dropped, not left to linger
    assert proposal.notices.exclude(user=None).count() == 2


def test_people_without_an_email_address_are_skipped(tenant, agent, refund_policy, everyone):
    silent = factories.make_user("no_mail", tenant=tenant, groups=["finance"])
    silent.email = ""
    silent.save(update_fields=["email"])
    submit(agent)
    notifications.send_digests()
    assert "" not in mailed_to()
    assert len(mail.outbox) == 2
