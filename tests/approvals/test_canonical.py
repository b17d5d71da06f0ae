"""Canonical JSON (RFC 8785) and the action digest: what a decision is bound to. Expected digests are
computed here with hashlib over canonical bytes written by hand, not with the code under test."""

import hashlib

import pytest
import rfc8785

from approvals.canonical import action_digest, canonical_bytes, digest_of


def sha256_digest(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def test_known_vector_matches_hand_written_canonical_bytes():
    action = {
        "tool": "payments.refund",
        "target": "order:1182",
        "arguments": {"order_id": "1182", "currency": "EUR", "amount": "40.00"},
    }
    expected = (
        b'{"arguments":{"amount":"40.00","currency":"EUR","order_id":"1182"},'
        b'"target":"order:1182","tool":"payments.refund"}'
    )

    assert canonical_bytes(action) == expected
    assert action_digest(action) == sha256_digest(expected)
    assert action_digest(action) == "sha256:" + hashlib.sha256(expected).hexdigest()


def test_key_order_is_irrelevant():
    one = {"tool": "t", "arguments": {"b": 1, "a": [{"y": 2, "x": 1}]}}
    other = {"arguments": {"a": [{"x": 1, "y": 2}], "b": 1}, "tool": "t"}

    assert canonical_bytes(one) == canonical_bytes(other)
    assert action_digest(one) == action_digest(other)


def test_array_order_matters():
    assert action_digest({"tool": "t", "ids": [1, 2]}) != action_digest({"tool": "t", "ids": [2, 1]})


def test_whitespace_and_insignificant_formatting_are_gone():
    assert canonical_bytes({"a": [1, {"b": None, "c": True}]}) == b'{"a":[1,{"b":null,"c":true}]}'


def test_non_ascii_is_preserved_as_utf8_not_escaped():
    action = {"tool": "mail.send", "arguments": {"to": "José Müller", "subject": "Rückerstattung – 40 €"}}
    expected = (
        '{"arguments":{"subject":"Rückerstattung – 40 €","to":"José Müller"},"tool":"mail.send"}'.encode()
    )

    assert canonical_bytes(action) == expected
    assert action_digest(action) == sha256_digest(expected)


def test_non_bmp_characters_are_preserved():
    action = {"tool": "chat.post", "arguments": {"text": "ok 👍 𝄞"}}
    expected = '{"arguments":{"text":"ok 👍 𝄞"},"tool":"chat.post"}'.encode()

    assert canonical_bytes(action) == expected
    assert "👍".encode() in canonical_bytes(action)  # 4-byte UTF-8, not a \ud83d\udc4d escape


def test_keys_sort_by_utf16_code_units_as_rfc8785_requires():
    # U+FB01 sorts after U+1F600 here: in UTF-16 the emoji starts with the surrogate 0xD83D < 0xFB01,
    # although by code point it is the other way round.
    value = {"\ufb01": 1, "\U0001f600": 2}

    assert canonical_bytes(value) == '{"\U0001f600":2,"\ufb01":1}'.encode()


def test_control_characters_are_escaped_minimally():
    assert canonical_bytes({"s": 'line\nquote"\u0001'}) == b'{"s":"line\\nquote\\"\\u0001"}'


def test_a_number_and_a_string_of_it_give_different_digests():
    as_string = {"tool": "payments.refund", "arguments": {"amount": "40.00"}}
    as_number = {"tool": "payments.refund", "arguments": {"amount": 40.00}}

    assert canonical_bytes(as_number) == b'{"arguments":{"amount":40},"tool":"payments.refund"}'
    assert action_digest(as_string) != action_digest(as_number)


@pytest.mark.parametrize(
    "number, text",
    [(1.0, b"1"), (-0.0, b"0"), (1e21, b"1e+21"), (1e-7, b"1e-7"), (0.1, b"0.1"), (123456789, b"123456789")],
)
def test_numbers_use_the_ecmascript_form(number, text):
    assert canonical_bytes({"n": number}) == b'{"n":' + text + b"}"


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 2**53])
def test_values_json_cannot_carry_exactly_are_refused(value):
    with pytest.raises(rfc8785.CanonicalizationError):
        canonical_bytes({"n": value})


def test_digest_of_prefixes_the_algorithm():
    assert digest_of({}) == sha256_digest(b"{}")
    assert digest_of({}).startswith("sha256:")
