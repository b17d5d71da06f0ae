"""A guesser can neither spell a username apart nor time a right password apart from a wrong one.

The limits count a name however it is typed (`' pat'`, `'pat '`, `'Pat'`, fullwidth `ｐａｔ` are one
count); and a wrong password, a right one with a wrong code and an unknown name each cost exactly one
password hash (the work that dominates a refusal's time: counted here by a hasher that counts, not
timed; `make bench` row R8 compares their medians)."""

import pytest
from django.contrib.auth.hashers import MD5PasswordHasher

from accounts.throttle import account_failures, sign_in_name
from tests.accounts.test_sign_in_throttling import sign_in, signed_in
from tests.factories import PASSWORD, totp_code

pytestmark = pytest.mark.django_db

SPELLINGS = [" reviewer_a", "reviewer_a ", "Reviewer_A", "ｒｅｖｉｅｗｅｒ＿ａ"]


def test_every_spelling_of_a_name_counts_as_the_one_name(reviewer_a):
    for spelling in SPELLINGS:
        assert not signed_in(sign_in(spelling, "wrong", address="198.51.100.7"))

    assert account_failures("reviewer_a") == len(SPELLINGS)
    assert {sign_in_name(spelling) for spelling in SPELLINGS} == {"reviewer_a"}


def test_a_name_typed_with_spaces_or_in_fullwidth_signs_in_as_the_person(reviewer_a):
    assert signed_in(
        sign_in("ｒｅｖｉｅｗｅｒ＿ａ ", PASSWORD, totp_code(reviewer_a), address="198.51.100.10")
    )


class CountingHasher(MD5PasswordHasher):
    """The tests' fast hasher, counting its work: each encode or verify is one password hash."""

    algorithm = "md5"  # reads the personas' MD5 hashes
    calls = 0

    def encode(self, password, salt):
        CountingHasher.calls += 1
        return super().encode(password, salt)


@pytest.mark.parametrize(
    "username, password, code",
    [
        ("reviewer_a", "wrong", "000000"),  # a wrong password
        ("reviewer_a", PASSWORD, "000000"),  # the right password, a wrong code
        ("nobody", "wrong", "000000"),  # an unknown name
    ],
    ids=["wrong-password", "right-password-wrong-code", "unknown-user"],
)
def test_each_refusal_costs_exactly_one_password_hash(reviewer_a, settings, username, password, code):
    settings.PASSWORD_HASHERS = [f"{__name__}.CountingHasher"]
    CountingHasher.calls = 0

    assert not signed_in(sign_in(username, password, code, address="198.51.100.11"))

    assert CountingHasher.calls == 1
