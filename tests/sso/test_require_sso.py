"""A tenant that requires single sign-on refuses its members' local passwords, except the one named
break-glass admin's; a password session made before the requirement ends at its next request."""

import pytest

from tests import factories

pytestmark = pytest.mark.django_db


def sign_in_with_password(client, user):
    return client.post(
        "/accounts/login/",
        {"username": user.username, "password": factories.PASSWORD, "otp_token": factories.totp_code(user)},
    )


@pytest.fixture
def required(identity_provider):
    identity_provider.require_sso = True
    identity_provider.save()
    return identity_provider


def test_a_members_password_is_refused_with_where_to_sign_in(client, required, reviewer_a):
    answer = sign_in_with_password(client, reviewer_a)

    assert answer.status_code == 400
    assert "Acme Payments signs you in through Acme IdP" in answer.content.decode()
    assert client.get("/").status_code == 302


def test_a_wrong_password_still_reads_like_any_refusal(client, required, reviewer_a):
    answer = client.post("/accounts/login/", {"username": reviewer_a.username, "password": "wrong"})
    assert answer.status_code == 400
    assert b"do not match" in answer.content and b"signs you in through" not in answer.content


def test_the_named_break_glass_admin_still_signs_in_with_a_password(client, required, admin_user):
    required.break_glass_user = admin_user
    required.save()

    answer = sign_in_with_password(client, admin_user)

    assert answer.status_code == 302
    assert client.get("/").status_code == 200


def test_someone_in_no_such_tenant_signs_in_as_before(client, required, outsider):
    assert sign_in_with_password(client, outsider).status_code == 302


def test_a_password_session_ends_once_the_tenant_requires_single_sign_on(
    client, identity_provider, reviewer_a
):
    assert sign_in_with_password(client, reviewer_a).status_code == 302
    assert client.get("/").status_code == 200
    identity_provider.require_sso = True
    identity_provider.save()

    assert client.get("/").status_code == 302  # back to the sign-in page
