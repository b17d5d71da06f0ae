"""The reviewer pages through HTTP: each view works, refuses the wrong method, and gives nothing away to
people without access (anonymous → sign-in, unverified → sign-in, outsider → 404, compliance never votes)."""

import re
from html import unescape

import jwt
import pytest
from django.test import Client
from django.urls import reverse
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts.devices import BACKUP_CODE_COUNT, reset_devices
from accounts.stepup import step_up_for
from approvals.models import Decision, Proposal, Vote
from approvals.policy.dry_run import dry_run
from approvals.selectors import ineligibility
from approvals.services.decisions import consume_decision
from approvals.services.votes import cast_vote, edit_proposal
from approvals.states import State
from approvals.web import queries
from approvals.web.display import TEXT_CAP
from approvals.web.forms import EditArgumentsForm
from approvals.web.list_pages import PAGE_SIZE
from approvals.web.pages import page_hash
from audit.models import AuditEvent, Verb
from lib.errors import DeviceResetRefused
from tests import factories
from tests.factories import PASSWORD, fresh_step_up, submit, totp_code, trail_name, verified_client

pytestmark = pytest.mark.django_db


def detail_url(proposal) -> str:
    return reverse("approvals:detail", kwargs={"proposal_id": proposal.id})


def action_url(name, proposal) -> str:
    return reverse(f"approvals:{name}", kwargs={"proposal_id": proposal.id})


@pytest.fixture
def proposal(agent, refund_policy, requester, reviewer_a, reviewer_b, reviewer_c, compliance):
    return submit(agent)


def vote_form(proposal, user, action="approve", **fields) -> dict:
    return {"action": action, "digest": proposal.action_digest, "otp_code": totp_code(user), **fields}


# ---------------------------------------------------------------------------------------------------
# Sign-in and enrollment


def test_login_with_password_and_current_code_verifies_the_session(reviewer_a):
    client = Client()
    response = client.post(
        reverse("login"), {"username": "reviewer_a", "password": PASSWORD, "otp_token": totp_code(reviewer_a)}
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("approvals:queue")
    assert client.get(reverse("approvals:queue")).wsgi_request.user.is_verified()  # type: ignore[union-attr]  # django-otp's middleware adds it


def test_login_goes_back_to_the_page_asked_for_but_never_off_site(reviewer_a):
    client = Client()
    response = client.post(
        reverse("login") + "?next=https://evil.example/",
        {"username": "reviewer_a", "password": PASSWORD, "otp_token": totp_code(reviewer_a)},
    )
    assert response["Location"] == reverse("approvals:queue")
    response = Client().post(
        reverse("login"),
        {
            "username": "reviewer_a",
            "password": PASSWORD,
            "otp_token": totp_code(reviewer_a),
            "next": "/watching/",
        },
    )
    assert response["Location"] == "/watching/"


def test_login_with_a_wrong_code_is_refused_with_one_message_for_every_wrong_part(reviewer_a):
    client = Client()
    wrong_code = client.post(
        reverse("login"), {"username": "reviewer_a", "password": PASSWORD, "otp_token": "000000"}
    )
    wrong_password = Client().post(
        reverse("login"), {"username": "reviewer_a", "password": "nope", "otp_token": "000000"}
    )
    assert wrong_code.status_code == wrong_password.status_code == 400
    message = "That username, password and one-time code do not match"
    assert message in wrong_code.content.decode() and message in wrong_password.content.decode()
    assert "_auth_user_id" not in client.session
    assert 'value="reviewer_a"' in wrong_code.content.decode()  # the typed username stays


def test_a_right_password_with_a_wrong_code_is_audited_and_a_wrong_password_is_not(reviewer_a):
    Client().post(reverse("login"), {"username": "reviewer_a", "password": "nope", "otp_token": "000000"})
    assert not AuditEvent.objects.filter(verb=Verb.SIGN_IN_CODE_REFUSED).exists()

    Client().post(reverse("login"), {"username": "reviewer_a", "password": PASSWORD, "otp_token": "000000"})

    (event,) = AuditEvent.objects.filter(verb=Verb.SIGN_IN_CODE_REFUSED)
    assert event.subject == trail_name("reviewer_a") and "000000" not in str(event.data)


def test_login_without_a_code_is_refused_for_a_person_with_an_authenticator(reviewer_a):
    response = Client().post(reverse("login"), {"username": "reviewer_a", "password": PASSWORD})
    assert response.status_code == 400


def test_login_page_is_a_labelled_form_and_refuses_other_methods(db):
    page = Client().get(reverse("login"))
    html = page.content.decode()
    assert page.status_code == 200
    for name in ("username", "password", "otp_token"):
        assert f'name="{name}"' in html
    assert 'autocomplete="one-time-code"' in html and 'inputmode="numeric"' in html
    assert '<label for="id_otp_token">' in html
    assert Client().put(reverse("login")).status_code == 405


def test_a_person_without_an_authenticator_is_led_to_enroll_one(tenant):
    factories.make_user("newcomer", tenant=tenant, groups=["finance"], totp=False)
    client = Client()
    response = client.post(reverse("login"), {"username": "newcomer", "password": PASSWORD})
    assert response["Location"] == reverse("approvals:enroll")
    # Signed in but not verified: every reviewer page sends them to enrollment too.
    assert client.get(reverse("approvals:queue"))["Location"] == reverse("approvals:enroll")


def test_enrollment_shows_a_qr_code_confirms_a_code_and_shows_backup_codes_once(tenant):
    user = factories.make_user("newcomer", tenant=tenant, groups=["finance"], totp=False)
    client = Client()
    client.force_login(user)
    page = client.get(reverse("approvals:enroll"))
    html = page.content.decode()
    assert page.status_code == 200
    assert "<svg" in html and re.search(r'<path [^>]*d="M\d', html)  # the QR code, drawn inline
    assert "otpauth://" not in html  # the key is shown for typing, the URI only inside the QR code

    wrong = client.post(reverse("approvals:enroll"), {"otp_token": "000000"})
    assert wrong.status_code == 400 and "not the code your authenticator shows now" in wrong.content.decode()

    device = TOTPDevice.objects.get(user=user)
    device.throttle_reset()
    done = client.post(reverse("approvals:enroll"), {"otp_token": totp_code_of(device)})
    assert done.status_code == 200
    codes = StaticDevice.objects.get(user=user).token_set.values_list("token", flat=True)
    assert len(codes) == BACKUP_CODE_COUNT
    assert all(code in done.content.decode() for code in codes)
    assert done.wsgi_request.user.is_verified()  # type: ignore[union-attr]  # django-otp's middleware adds it
    event = AuditEvent.objects.get(verb=Verb.DEVICE_ENROLLED)
    assert event.subject == trail_name("newcomer") and not any(code in str(event.data) for code in codes)

    again = client.get(reverse("approvals:enroll"))
    assert "Your authenticator is set up" in again.content.decode()
    assert not any(code in again.content.decode() for code in codes)  # shown once


def totp_code_of(device) -> str:
    device.confirmed = True  # totp_code() reads confirmed devices; this copy is not saved
    from django_otp.oath import TOTP

    totp = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
    return f"{totp.token():0{device.digits}d}"


def test_enrollment_needs_a_signed_in_person(db):
    response = Client().get(reverse("approvals:enroll"))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))


def test_an_admin_resets_devices_and_the_person_must_enroll_again(reviewer_a, admin_user, reviewer_b):
    client = verified_client(reviewer_a)
    with pytest.raises(DeviceResetRefused):
        reset_devices(reviewer_a, actor=reviewer_b)
    assert reset_devices(reviewer_a, actor=admin_user, reason="lost phone") == 1
    assert AuditEvent.objects.get(verb=Verb.DEVICE_RESET).data == {
        "devices_removed": 1,
        "reason": "lost phone",
    }
    assert client.get(reverse("approvals:queue"))["Location"] == reverse("approvals:enroll")


# ---------------------------------------------------------------------------------------------------
# Access to every page


def page_urls(proposal):
    return [
        reverse("approvals:queue"),
        reverse("approvals:watching"),
        detail_url(proposal),
        action_url("edit", proposal),
    ]


def test_anonymous_visitors_are_sent_to_sign_in_from_every_page(proposal):
    for url in page_urls(proposal):
        response = Client().get(url)
        assert response.status_code == 302 and response["Location"].startswith(reverse("login") + "?next="), (
            url
        )
    for name in ("decide", "revoke", "edit"):
        response = Client().post(action_url(name, proposal), {})
        assert response.status_code == 302 and response["Location"].startswith(reverse("login")), name


def test_a_password_only_session_is_not_enough(proposal, reviewer_a):
    client = Client()
    client.force_login(reviewer_a)  # no one-time code in this session
    for url in page_urls(proposal):
        assert client.get(url)["Location"].startswith(reverse("login")), url
    response = client.post(
        action_url("decide", proposal), vote_form(proposal, reviewer_a), HTTP_HX_REQUEST="true"
    )
    assert response["HX-Redirect"].startswith(reverse("login"))
    assert not Vote.objects.exists()


def test_an_outsider_gets_404_on_every_proposal_url(proposal, outsider):
    client = verified_client(outsider)
    for url in (detail_url(proposal), action_url("edit", proposal)):
        assert client.get(url).status_code == 404, url
    for name in ("decide", "revoke", "edit"):
        assert client.post(action_url(name, proposal), vote_form(proposal, outsider)).status_code == 404, name
    assert str(proposal.id) not in client.get(reverse("approvals:queue")).content.decode()
    assert str(proposal.id) not in client.get(reverse("approvals:watching")).content.decode()
    assert not Vote.objects.exists()


def test_pages_refuse_the_wrong_method(proposal, reviewer_a):
    client = verified_client(reviewer_a)
    assert client.post(reverse("approvals:queue")).status_code == 405
    assert client.post(reverse("approvals:watching")).status_code == 405
    assert client.post(detail_url(proposal)).status_code == 405
    assert client.get(action_url("decide", proposal)).status_code == 405
    assert client.get(action_url("revoke", proposal)).status_code == 405
    assert client.delete(action_url("edit", proposal)).status_code == 405


def test_the_jwks_is_public_and_cacheable(db):
    response = Client().get(reverse("approvals:jwks"))
    assert response.status_code == 200 and response["Cache-Control"] == "public, max-age=300"


# ---------------------------------------------------------------------------------------------------
# The queue and the watching list


def test_the_queue_lists_what_you_can_decide_most_urgent_first(
    agent, refund_policy, requester, reviewer_a, reviewer_c
):
    later = submit(agent, summary="Later refund", expires_at=factories.in_seconds(3000))
    sooner = submit(agent, summary="Sooner refund", expires_at=factories.in_seconds(600))
    html = verified_client(reviewer_a).get(reverse("approvals:queue")).content.decode()
    assert html.index("Sooner refund") < html.index("Later refund")
    assert "2 proposals waiting for you" in html
    # The socket carries when the page opened: rows that arrive later are marked new.
    assert re.search(r'ws-connect="/ws/queue/\?view=queue&amp;opened=[0-9A-FT.%-]+"', html)
    # Not for the requester (the principal), nor for ops (not a group these need).
    for person in (requester, reviewer_c):
        html = verified_client(person).get(reverse("approvals:queue")).content.decode()
        assert str(later.id) not in html and str(sooner.id) not in html
        assert str(later.id) in verified_client(person).get(reverse("approvals:watching")).content.decode()


def test_the_queue_filters_by_tenant_agent_policy_and_risk(tenant, agent, requester, reviewer_a):
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund", risk="high")
    factories.make_policy(tenant, "emails", tool_pattern="email.send", risk="low")
    refund = submit(agent, summary="A refund")
    email = submit(agent, summary="An email", action={"tool": "email.send", "arguments": {"to": "a@b.test"}})
    client = verified_client(reviewer_a)

    def listed(**params):
        html = client.get(reverse("approvals:queue"), params).content.decode()
        return {p for p in (refund, email) if str(p.id) in html}

    assert listed() == {refund, email}
    assert listed(risk="high") == {refund}
    assert listed(policy="emails") == {email}
    assert listed(agent=agent.slug, tenant=tenant.slug) == {refund, email}
    assert listed(agent="someone-else") == {refund, email}  # an unknown value filters nothing
    html = client.get(reverse("approvals:queue"), {"risk": "low"}).content.decode()
    assert (
        "1 proposal waiting for you" in html
        and 'ws-connect="/ws/queue/?view=queue&amp;risk=low&amp;opened=' in html
    )


def test_a_proposal_you_voted_on_moves_from_your_queue_to_watching(tenant, agent, requester, reviewer_a):
    factories.make_policy(tenant, "refunds", thresholds=[{"group": "finance", "count": 2}])
    proposal = submit(agent)
    cast_vote(
        proposal.id,
        reviewer_a,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )
    client = verified_client(reviewer_a)
    assert str(proposal.id) not in client.get(reverse("approvals:queue")).content.decode()
    assert str(proposal.id) in client.get(reverse("approvals:watching")).content.decode()


def test_compliance_sees_everything_under_watching_and_has_nothing_to_decide(proposal, compliance):
    client = verified_client(compliance)
    landing = client.get(reverse("approvals:queue"))
    assert landing.status_code == 302 and landing["Location"] == reverse("audit:index")
    assert (
        str(proposal.id)
        in client.get(reverse("approvals:watching"), {"state": "awaiting_review"}).content.decode()
    )


def test_the_queue_pages_through_many_proposals(agent, refund_policy, requester, reviewer_a):
    for _ in range(PAGE_SIZE + 3):
        submit(agent)
    client = verified_client(reviewer_a)
    first = client.get(reverse("approvals:queue")).content.decode()
    assert f"{PAGE_SIZE + 3} proposals waiting for you" in first
    next_link_match = re.search(r'href="\?(after=[^"]+)" rel="next"', first)
    assert next_link_match is not None
    next_link = next_link_match.group(1)
    second = client.get(reverse("approvals:queue") + "?" + unescape(next_link)).content.decode()
    assert second.count('class="proposal-link"') == 3 and 'rel="first"' in second
    shown = re.findall(r'class="proposal-link" href="/proposals/([0-9a-f-]+)/"', first + second)
    assert len(set(shown)) == PAGE_SIZE + 3  # every proposal once, none skipped or repeated


def test_above_the_cap_the_queue_says_how_many_at_least_instead_of_counting_all(
    monkeypatch, agent, refund_policy, requester, reviewer_a
):
    monkeypatch.setattr(queries, "COUNT_CAP", 5)
    for _ in range(7):
        submit(agent)
    html = verified_client(reviewer_a).get(reverse("approvals:queue")).content.decode()
    assert "5+ proposals waiting for you" in html and "Not rated: 5+" in html
    assert html.count('class="proposal-link"') == 7  # the page itself is not capped


# ---------------------------------------------------------------------------------------------------
# The proposal page


def test_the_proposal_page_puts_the_consequence_first_and_shows_what_a_vote_binds(proposal, reviewer_a):
    html = verified_client(reviewer_a).get(detail_url(proposal)).content.decode()
    order = [
        html.index(text)
        for text in (
            "If this is approved",
            "The action",
            "What changes",
            "Evidence",
            "Why this is here",
            "Exact action",
        )
    ]
    assert order == sorted(order)
    assert "No, it cannot be undone" in html and "EUR 40.00" in html
    assert '<a href="https://support.example.test/t/1" rel="noopener noreferrer nofollow">' in html
    assert "<details>" in html and proposal.action_digest in html
    assert proposal.action_canonical.replace('"', "&quot;") in html
    assert f'value="{proposal.action_digest}"' in html  # the hidden digest of the decision form
    assert "you can decide this as a member of Finance" in html
    assert "1 more needed" in html
    assert f'ws-connect="/ws/proposals/{proposal.id}/"' in html
    assert "data-server-now=" in html


def test_agent_text_is_escaped_and_long_text_is_capped_with_a_note(tenant, agent, refund_policy, reviewer_a):
    long_reason = "x" * (TEXT_CAP + 50)
    proposal = submit(
        agent,
        summary="<script>alert(1)</script> refund",
        consequences={"effect": "<img src=x onerror=alert(1)>", "note": long_reason},
    )
    html = verified_client(reviewer_a).get(detail_url(proposal)).content.decode()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html
    assert "x" * (TEXT_CAP + 1) not in html
    assert f"truncated: {TEXT_CAP} of {TEXT_CAP + 50} characters shown" in html


def test_the_principal_is_told_why_they_cannot_decide(proposal, requester):
    html = verified_client(requester).get(detail_url(proposal)).content.decode()
    assert "you are the person this action is for" in html
    assert 'name="action" value="approve"' not in html


def test_compliance_reads_the_page_but_gets_no_decision_controls(proposal, compliance):
    html = verified_client(compliance).get(detail_url(proposal)).content.decode()
    assert "compliance staff read and export; they do not vote" in html
    assert 'name="action" value="approve"' not in html


# ---------------------------------------------------------------------------------------------------
# Decisions


def test_approve_with_a_fresh_code_decides_and_records_what_the_page_showed(proposal, reviewer_a):
    client = verified_client(reviewer_a)
    response = client.post(action_url("decide", proposal), vote_form(proposal, reviewer_a, reason="checked"))
    assert response.status_code == 302 and response["Location"] == detail_url(proposal)
    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED
    vote = Vote.objects.get(proposal=proposal)
    assert vote.page_hash == page_hash(proposal) and vote.page_hash.startswith("sha256:")
    page = client.get(response["Location"]).content.decode()
    assert "Your approval is recorded." in page and "Approved" in page


def test_the_decision_buttons_are_three_named_buttons_of_one_form(proposal, reviewer_a):
    html = verified_client(reviewer_a).get(detail_url(proposal)).content.decode()
    section = html[html.index('id="decision"') :]
    section = section[: section.index("</section>")]
    assert section.count("<form") == 1
    for action in ("approve", "reject", "ask"):
        assert (
            f'<button type="submit" name="action" value="{action}" class="button button--decision">'
            in section
        )
    assert 'autocomplete="one-time-code"' in section and 'inputmode="numeric"' in section


def test_reject_without_a_reason_keeps_what_was_typed_and_says_why(proposal, reviewer_a):
    client = verified_client(reviewer_a)
    response = client.post(
        action_url("decide", proposal),
        vote_form(proposal, reviewer_a, action="reject", question="my typed words"),
    )
    html = response.content.decode()
    assert response.status_code == 403
    assert "a rejection needs a reason" in html and "my typed words" in html
    assert 'aria-invalid="true"' in html
    assert Proposal.objects.get(pk=proposal.pk).state == State.AWAITING_REVIEW


def test_a_form_error_keeps_the_code_for_the_corrected_vote(proposal, reviewer_a):
    """A refusal for the form's own words comes before the code is checked, so the code is not spent:
    the corrected form goes through with the same code, and no failed step-up is recorded."""
    client = verified_client(reviewer_a)
    code = totp_code(reviewer_a)
    missing = client.post(
        action_url("decide", proposal), {**vote_form(proposal, reviewer_a, action="reject"), "otp_code": code}
    )
    assert missing.status_code == 403 and "a rejection needs a reason" in missing.content.decode()
    fixed = client.post(
        action_url("decide", proposal),
        {**vote_form(proposal, reviewer_a, action="reject", reason="duplicate refund"), "otp_code": code},
    )
    assert fixed.status_code == 302
    assert Proposal.objects.get(pk=proposal.pk).state == State.REJECTED
    assert not AuditEvent.objects.filter(verb=Verb.STEP_UP_FAILED).exists()


def test_a_question_left_empty_keeps_the_code_for_the_question(proposal, reviewer_a):
    client = verified_client(reviewer_a)
    code = totp_code(reviewer_a)
    empty = client.post(
        action_url("decide", proposal), {**vote_form(proposal, reviewer_a, action="ask"), "otp_code": code}
    )
    assert empty.status_code == 403 and "write the question" in empty.content.decode()
    asked = client.post(
        action_url("decide", proposal),
        {**vote_form(proposal, reviewer_a, action="ask", question="Which order?"), "otp_code": code},
    )
    assert asked.status_code == 302
    assert Proposal.objects.get(pk=proposal.pk).state == State.INFO_REQUESTED
    assert not AuditEvent.objects.filter(verb=Verb.STEP_UP_FAILED).exists()


def test_a_code_that_was_checked_is_spent_even_when_the_vote_is_refused(proposal, reviewer_a, reviewer_b):
    """Single use stays: a vote refused after its code was checked (here: for another digest) spends it."""
    client = verified_client(reviewer_a)
    code = totp_code(reviewer_a)
    client.post(
        action_url("decide", proposal),
        {**vote_form(proposal, reviewer_a), "otp_code": code, "digest": "sha256:" + "0" * 64},
    )
    again = client.post(action_url("decide", proposal), {**vote_form(proposal, reviewer_a), "otp_code": code})
    assert again.status_code == 403 and "that code is not valid" in again.content.decode()
    assert not Vote.objects.exists()


def test_reject_with_a_reason_ends_the_proposal(proposal, reviewer_a):
    client = verified_client(reviewer_a)
    response = client.post(
        action_url("decide", proposal),
        vote_form(proposal, reviewer_a, action="reject", reason="duplicate refund"),
    )
    assert response.status_code == 302
    assert Proposal.objects.get(pk=proposal.pk).state == State.REJECTED
    assert Decision.objects.get(proposal=proposal).reason == "duplicate refund"


def test_a_wrong_code_is_reported_next_to_the_code_and_keeps_the_reason(proposal, reviewer_a):
    client = verified_client(reviewer_a)
    response = client.post(
        action_url("decide", proposal),
        {**vote_form(proposal, reviewer_a, reason="looks right"), "otp_code": "000000"},
        HTTP_HX_REQUEST="true",
    )
    html = response.content.decode()
    assert response.status_code == 403
    assert "<html" not in html and html.lstrip().startswith('<section id="decision"')  # the partial only
    assert "that code is not valid" in html and 'id="id_otp_code_error"' in html
    assert "looks right" in html
    assert 'id="live"' in html and 'hx-swap-oob="true"' in html
    assert AuditEvent.objects.filter(verb=Verb.STEP_UP_FAILED).count() == 1


def test_an_htmx_approval_swaps_the_decision_panel(proposal, reviewer_a):
    response = verified_client(reviewer_a).post(
        action_url("decide", proposal), vote_form(proposal, reviewer_a), HTTP_HX_REQUEST="true"
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert (
        "Your approval is recorded." in html and "Revoke the decision" in html
    )  # the sole approver may take it back


def test_a_vote_for_another_digest_is_refused_above_the_form(proposal, reviewer_a):
    response = verified_client(reviewer_a).post(
        action_url("decide", proposal), {**vote_form(proposal, reviewer_a), "digest": "sha256:" + "0" * 64}
    )
    assert response.status_code == 403
    assert "the action changed since you loaded it" in response.content.decode()
    assert not Vote.objects.exists()


def test_compliance_cannot_vote(proposal, compliance):
    response = verified_client(compliance).post(
        action_url("decide", proposal), vote_form(proposal, compliance)
    )
    assert response.status_code == 403
    assert "compliance staff read and export" in response.content.decode()
    assert not Vote.objects.exists()


def test_ask_needs_a_question_and_then_closes_the_proposal_for_an_answer(proposal, reviewer_a):
    client = verified_client(reviewer_a)
    missing = client.post(
        action_url("decide", proposal),
        {"action": "ask", "digest": proposal.action_digest, "reason": "typed reason"},
    )
    assert (
        missing.status_code == 403 and "write the question the agent must answer" in missing.content.decode()
    )
    assert "typed reason" in missing.content.decode()
    asked = client.post(
        action_url("decide", proposal),
        vote_form(proposal, reviewer_a, action="ask", question="Which order number?"),
    )
    assert asked.status_code == 302
    assert Proposal.objects.get(pk=proposal.pk).state == State.INFO_REQUESTED
    assert Decision.objects.get(proposal=proposal).kind == "needs_info"


def test_ask_without_a_one_time_code_is_refused_and_signs_nothing(proposal, reviewer_a):
    """Asking signs a needs_info decision for the agent, so it needs the vote's step-up."""
    client = verified_client(reviewer_a)
    response = client.post(
        action_url("decide", proposal),
        {"action": "ask", "digest": proposal.action_digest, "question": "Which order number?"},
    )
    assert response.status_code == 403 and "needs a fresh one-time code" in response.content.decode()
    assert Proposal.objects.get(pk=proposal.pk).state == State.AWAITING_REVIEW
    assert not Decision.objects.filter(proposal=proposal).exists()
    failures = AuditEvent.objects.filter(subject=f"proposal:{proposal.id}", verb=Verb.STEP_UP_FAILED)
    assert [event.data["code"] for event in failures] == ["step_up_required"]

    client.post(
        action_url("decide", proposal),
        vote_form(proposal, reviewer_a, action="ask", question="Which order number?"),
    )
    asked = Decision.objects.get(proposal=proposal)
    claims = jwt.decode(asked.token, options={"verify_signature": False})
    assert asked.kind == "needs_info" and claims["approvers"][0]["auth"]["method"] == "totp"


def test_an_unknown_button_is_a_bad_request(proposal, reviewer_a):
    response = verified_client(reviewer_a).post(
        action_url("decide", proposal), vote_form(proposal, reviewer_a, action="approve-all")
    )
    assert response.status_code == 400 and "Choose Approve, Reject or Ask" in response.content.decode()


def test_two_finance_approvals_reach_a_two_of_two_quorum(tenant, agent, requester, reviewer_a, reviewer_b):
    factories.make_policy(tenant, "refunds", thresholds=[{"group": "finance", "count": 2}])
    proposal = submit(agent)
    verified_client(reviewer_a).post(action_url("decide", proposal), vote_form(proposal, reviewer_a))
    page = verified_client(reviewer_b).get(detail_url(proposal)).content.decode()
    assert "Alice approved" in page and "1 of 2" in page
    verified_client(reviewer_b).post(action_url("decide", proposal), vote_form(proposal, reviewer_b))
    assert Proposal.objects.get(pk=proposal.pk).state == State.APPROVED


# ---------------------------------------------------------------------------------------------------
# Edit


def edit_form(proposal, note="", user=None, **changes) -> dict:
    """The edit form as a person would post it: every argument's shown value, some of them changed, and
    the current one-time code of `user` (an edit needs the same step-up as a vote)."""
    form = EditArgumentsForm(proposal)
    data = {"digest": proposal.action_digest, "note": note, "otp_code": totp_code(user) if user else ""}
    for name, key, _ in form.argument_fields:
        data[name] = changes.get(key, form.fields[name].initial)
    return data


def test_an_edit_that_changes_nothing_keeps_the_code_for_the_real_edit(proposal, reviewer_a):
    client = verified_client(reviewer_a)
    code = totp_code(reviewer_a)
    unchanged = client.post(action_url("edit", proposal), {**edit_form(proposal), "otp_code": code})
    assert unchanged.status_code == 403 and "the edit changes nothing" in unchanged.content.decode()
    edited = client.post(
        action_url("edit", proposal), {**edit_form(proposal, amount="30.00"), "otp_code": code}
    )
    assert edited.status_code == 302
    assert Proposal.objects.get(pk=proposal.pk).state == State.SUPERSEDED
    assert not AuditEvent.objects.filter(verb=Verb.STEP_UP_FAILED).exists()


def test_edit_makes_a_successor_that_links_back_and_shows_the_difference(proposal, reviewer_a, reviewer_b):
    client = verified_client(reviewer_a)
    form = client.get(action_url("edit", proposal)).content.decode()
    assert 'value="40.00"' in form and "<legend>" in form
    response = client.post(
        action_url("edit", proposal),
        edit_form(proposal, amount="30.00", note="customer asked for 30", user=reviewer_a),
    )
    successor = Proposal.objects.get(supersedes=proposal)
    assert response.status_code == 302 and response["Location"] == detail_url(successor)
    assert successor.action["arguments"]["amount"] == "30.00" and successor.edited_by == reviewer_a

    mine = client.get(detail_url(successor)).content.decode()
    assert "you edited this proposal; someone else must decide it" in mine
    assert "edited by Alice" in mine and f'href="{detail_url(proposal)}"' in mine
    assert (
        "<del>" in mine
        and "40.00" in mine
        and "<ins>" in mine
        and "changed from the earlier proposal" in mine
    )
    old = verified_client(reviewer_b).get(detail_url(proposal)).content.decode()
    assert f'href="{detail_url(successor)}"' in old and "was replaced by" in old


def test_edit_keeps_value_types_and_reports_bad_json(agent, refund_policy, requester, reviewer_a):
    # (A JSON number is refused at intake: a list keeps its type here.)
    proposal = submit(
        agent, action={"tool": "payments.refund", "arguments": {"order_id": "1", "items": ["a"]}}
    )
    client = verified_client(reviewer_a)
    bad = client.post(action_url("edit", proposal), edit_form(proposal, items="two"))
    assert bad.status_code == 400 and "write it as JSON" in bad.content.decode()
    same = client.post(action_url("edit", proposal), edit_form(proposal))
    assert same.status_code == 403 and "the edit changes nothing" in same.content.decode()
    number = client.post(action_url("edit", proposal), edit_form(proposal, items="3", user=reviewer_a))
    assert (
        number.status_code == 403
        and "numbers in action.arguments are sent as strings" in number.content.decode()
    )
    client.post(action_url("edit", proposal), edit_form(proposal, items='["a", "b"]', user=reviewer_a))
    assert Proposal.objects.get(supersedes=proposal).action["arguments"] == {
        "order_id": "1",
        "items": ["a", "b"],
    }


def test_an_edit_without_a_one_time_code_is_refused_and_recorded(proposal, reviewer_a):
    """An edit changes what reviewers are asked to release, so it needs the vote's step-up."""
    client = verified_client(reviewer_a)
    response = client.post(action_url("edit", proposal), edit_form(proposal, amount="4000.00"))
    assert response.status_code == 403 and "needs a fresh one-time code" in response.content.decode()
    assert not Proposal.objects.filter(supersedes=proposal).exists()
    assert Proposal.objects.get(pk=proposal.pk).state == State.AWAITING_REVIEW
    failures = AuditEvent.objects.filter(subject=f"proposal:{proposal.id}", verb=Verb.STEP_UP_FAILED)
    assert [event.data["code"] for event in failures] == ["step_up_required"]

    wrong = client.post(
        action_url("edit", proposal), {**edit_form(proposal, amount="4000.00"), "otp_code": "000000"}
    )
    assert wrong.status_code == 403 and not Proposal.objects.filter(supersedes=proposal).exists()


def test_an_ineligible_person_gets_no_edit_form(proposal, reviewer_c):
    html = verified_client(reviewer_c).get(action_url("edit", proposal)).content.decode()
    assert "You cannot edit this" in html and "<fieldset>" not in html


# ---------------------------------------------------------------------------------------------------
# Revoke and compensation


@pytest.fixture
def approved(proposal, reviewer_a):
    cast_vote(
        proposal.id,
        reviewer_a,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )
    proposal.refresh_from_db()
    return proposal


def test_the_approver_revokes_a_released_decision_with_a_reason(approved, reviewer_a):
    client = verified_client(reviewer_a)
    page = client.get(detail_url(approved)).content.decode()
    assert "Revoke the decision" in page
    missing = client.post(action_url("revoke", approved), {"action": "revoke", "reason": ""})
    assert missing.status_code == 403 and "a revocation needs a reason" in missing.content.decode()
    done = client.post(action_url("revoke", approved), {"action": "revoke", "reason": "wrong customer"})
    assert done.status_code == 302
    assert Proposal.objects.get(pk=approved.pk).state == State.REVOKED


def test_others_see_no_revoke_button(approved, reviewer_b):
    page = verified_client(reviewer_b).get(detail_url(approved)).content.decode()
    assert "Revoke the decision" not in page
    response = verified_client(reviewer_b).post(
        action_url("revoke", approved), {"action": "revoke", "reason": "x"}
    )
    assert response.status_code == 403


def test_after_the_agent_started_the_page_offers_a_compensation_note(approved, agent, reviewer_a):
    decision = Decision.objects.get(proposal=approved)
    consume_decision(agent, decision.jti, rev=decision.rev)
    client = verified_client(reviewer_a)
    page = client.get(detail_url(approved)).content.decode()
    assert "The agent has started the work" in page and "Revoke the decision" not in page
    refused = client.post(action_url("revoke", approved), {"action": "revoke", "reason": "too late"})
    assert refused.status_code == 409 and "can no longer be revoked" in refused.content.decode()
    noted = client.post(
        action_url("revoke", approved), {"action": "compensate", "note": "reversed in ledger"}
    )
    assert noted.status_code == 302
    assert "reversed in ledger" in client.get(detail_url(approved)).content.decode()


def test_the_queue_lists_exactly_what_the_vote_rules_allow(
    tenant, agent, requester, reviewer_a, reviewer_b, reviewer_c, admin_user, compliance
):
    """The queue's SQL and services.ineligibility() are two forms of one rule: they must agree."""
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund")
    factories.make_policy(
        tenant,
        "self-service",
        tool_pattern="tickets.*",
        allow_self_approval=True,
        thresholds=[{"group": "finance", "count": 1}, {"group": "ops", "count": 1}],
    )
    refund = submit(agent)
    ticket = submit(agent, action={"tool": "tickets.close", "arguments": {"id": "7"}})
    fallback = submit(agent, action={"tool": "dns.update", "arguments": {"name": "www"}})  # tenant default
    edited = edit_proposal(
        refund.id,
        reviewer_b,
        arguments={"order_id": "1182", "amount": "1.00", "currency": "EUR"},
        digest_seen=refund.action_digest,
        step_up=fresh_step_up(reviewer_b),
    )
    proposals = [ticket, fallback, edited]
    for person in (requester, reviewer_a, reviewer_b, reviewer_c, admin_user, compliance):
        html = verified_client(person).get(reverse("approvals:queue")).content.decode()
        listed = {p.id for p in proposals if str(p.id) in html}
        allowed = {p.id for p in proposals if ineligibility(p, person) is None}
        assert listed == allowed, person.username
        # The watching list is the rest of the tenant: the same rule negated row by row.
        watching = verified_client(person).get(reverse("approvals:watching")).content.decode()
        assert {p.id for p in proposals if str(p.id) in watching} == {p.id for p in proposals} - allowed
    assert ineligibility(ticket, requester) is None  # self-approval allowed by that policy


def test_the_amount_comes_from_the_bound_arguments_and_a_different_claim_is_flagged(
    agent, refund_policy, reviewer_a
):
    proposal = submit(agent, consequences={"effect": "Refund", "amount": "4.00", "currency": "EUR"})
    html = verified_client(reviewer_a).get(detail_url(proposal)).content.decode()
    facts = html[html.index("How much") :]
    assert facts.index("EUR 40.00") < facts.index("The agent's description says") < facts.index("EUR 4.00")


def test_compliance_lands_on_the_audit_trail_and_an_admin_sees_the_admin_link(tenant, agent, reviewer_a):
    auditor = factories.make_user("auditor_x", tenant=tenant, role="compliance")
    response = verified_client(auditor).get(reverse("approvals:queue"))
    assert response.status_code == 302 and response["Location"] == reverse("audit:index")
    staff = factories.make_user("staffer", tenant=tenant, groups=["finance"])
    staff.is_staff = True
    staff.save(update_fields=["is_staff"])
    assert b"open the admin" in verified_client(staff).get(reverse("approvals:queue")).content
    assert b"open the admin" not in verified_client(reviewer_a).get(reverse("approvals:queue")).content


def test_the_dry_run_counts_a_change_of_required_approvals_as_a_change(
    tenant, agent, refund_policy, requester
):
    from approvals.models import PolicyVersion

    proposal = submit(agent)
    draft = PolicyVersion(
        policy=refund_policy.policy,
        version=99,
        tool_pattern="payments.refund",
        outcome=PolicyVersion.Outcome.REQUIRE_APPROVAL,
        thresholds=[{"group": "finance", "count": 2}],
    )
    (row,) = dry_run(draft, [proposal])
    assert row.outcome_now == row.outcome_with_draft == "require_approval"
    assert row.changes
