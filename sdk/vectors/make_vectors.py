"""Writes the shared test vectors that reviewer-gate (Python) and @reviewer/gate (TypeScript) both check.

    .venv/bin/python sdk/vectors/make_vectors.py           # rewrite canonical.json and tokens.json
    .venv/bin/python sdk/vectors/make_vectors.py --check   # exit 1 when the committed files differ

The expected values come from the Python package itself (rfc8785 for the canonical form, PyJWT with the
committed test-only keys for the tokens), so the TypeScript suite is held to what Python does. Ed25519
signatures are deterministic and every claim is fixed, so a rewrite reproduces the same bytes and
`--check` (run by sdk/python/tests/test_vectors.py) catches a generator and its output drifting apart.

Every token that should pass the time checks is valid from 2026-01-01 to 2100-01-01, so the vectors do
not go stale; the ones that must fail them lie wholly in the past or the future.
"""

import base64
import hashlib
import hmac
import json
import sys
from pathlib import Path
from typing import Any

import jwt
import rfc8785

HERE = Path(__file__).resolve().parent
KEYS = json.loads((HERE / "test-only-keys.json").read_text())

ISSUER = "https://reviewer.example"
AUDIENCE = "urn:agent:vectors"
TENANT = "acme"
TASK_ID = "task-1"
REQUEST_ID = "request-1"
CONTEXT_ID = "ctx-1"
ACTION = {
    "tool": "payments.refund",
    "arguments": {"order_id": "1182", "amount": "40.00", "currency": "EUR"},
    "target": "order_id:1182",
}
EDITED_ACTION = {**ACTION, "arguments": {**ACTION["arguments"], "amount": "25.00"}}
ISSUED = 1767225600  # 2026-01-01T00:00:00Z
FOREVER = 4102444800  # 2100-01-01T00:00:00Z
FUTURE = 4070908800  # 2099-01-01T00:00:00Z
TOKEN_TYPE = "approval-decision+jwt"  # noqa: S105 - a JOSE typ value, not a secret

# Canonicalization cases: JSON text, parsed by each language's own JSON parser, then canonicalized.
# `note` says what the case is about.
CANONICAL_CASES: list[tuple[str, str, str]] = [
    ("key order", '{"b": 1, "a": 2, "c": {"z": null, "y": [3, 2, 1]}}', "keys sorted at every level"),
    ("whitespace", ' { "a" : [ 1 , { "b" : true } , false ] } ', "insignificant whitespace dropped"),
    ("empty containers", '{"o": {}, "a": [], "s": ""}', "empty object, array and string"),
    ("nested arrays", "[[[]], [[1], [2, [3]]], {}]", "arrays keep their order"),
    ("literals", "[null, true, false]", "the three literals"),
    ("the action", json.dumps(ACTION), "a refund action as agents send it"),
    ("amount as string", '{"amount": "40.00"}', "a string amount keeps its zeros"),
    ("amount as number", '{"amount": 40.00}', "40.00 as a number is 40"),
    ("integer 0", "[0, -0, 0.0, -0.0]", "zero and negative zero serialize as 0"),
    ("1e21", "[1e21, 1E21, 1000000000000000000000.0]", "from 1e21 up, exponent form"),
    ("1e20", "[1e20, 100000000000000000000.0]", "below 1e21, plain digits"),
    ("1e-7", "[1e-7, 0.0000001]", "below 1e-6, exponent form"),
    ("1e-6", "[1e-6, 0.000001]", "from 1e-6 up, plain digits"),
    ("0.1 + 0.2", "[0.30000000000000004, 0.1, 0.2, 0.3]", "shortest round-trip digits"),
    ("negative exponent", "[-1e-7, 123e-20, -5e-324]", "sign and tiny magnitudes"),
    ("extremes", "[5e-324, 1.7976931348623157e308, -1.7976931348623157e308]", "smallest and largest doubles"),
    ("safe integers", "[9007199254740991, -9007199254740991]", "the largest integers JSON carries exactly"),
    ("decimals", "[333333333.3333333, 4.35, 0.5, 100.0, 1.5e3]", "decimal fractions, trailing zeros"),
    ("big integer", "[9007199254740992]", "2**53: Python refuses it as an integer (see `js`)"),
    ("huge integer", "[123456789012345678901234567890]", "beyond 2**64 (see `js`)"),
    ("overflow", "[1e400]", "not a finite double: refused"),
    ("escapes", '["\\"\\\\\\/\\b\\f\\n\\r\\t"]', "the two-character escapes; / is not escaped"),
    ("control characters", '["\\u0000\\u0001\\u001f\\u007f"]', "controls below 0x20 as \\u00xx, DEL as is"),
    ("unicode as is", '{"name": "Zoë Ñandú €100 中文"}', "non-ASCII kept as UTF-8, not escaped"),
    ("unicode escapes", '["\\u00e9\\u4e2d"]', "escaped input, UTF-8 output"),
    ("surrogate pair", '["\\ud83d\\ude00", "😀"]', "an astral character, escaped or not"),
    ("line separators", '["\\u2028\\u2029\\u00ad"]', "U+2028, U+2029 and a soft hyphen kept as is"),
    ("lone surrogate", '["\\ud800"]', "not Unicode text: refused"),
    ("NFC and NFD", '["\\u00e9", "e\\u0301"]', "not normalized: the two spellings stay different"),
    (
        "key order by UTF-16",
        '{"\\ud83d\\ude00": 1, "\\uffff": 2, "a": 3, "\\u00e9": 4, "A": 5, "": 6}',
        "code units",
    ),
    ("keys NFC and NFD", '{"e\\u0301": 1, "\\u00e9": 2}', "two different keys"),
    ("deep", '{"a": {"b": {"c": {"d": [{"e": "f"}]}}}}', "nesting"),
]

# Where TypeScript differs on purpose. JSON.parse turns every number into a double, so an integer
# beyond 2**53 arrives as the nearest double and is canonicalized as one (what RFC 8785 prescribes for
# numbers); Python's rfc8785 refuses the integer instead. Reviewer refuses such integers in any body,
# so neither form ever reaches a decision.
JS_DIFFERENCES = {
    "big integer": "[9007199254740992]",
    "huge integer": "[1.2345678901234568e+29]",
}


def canonical_case(name: str, text: str, note: str) -> dict[str, Any]:
    case: dict[str, Any] = {"name": name, "note": note, "json": text}
    try:
        canonical = rfc8785.dumps(json.loads(text))
    except rfc8785.CanonicalizationError as error:
        case["refused"] = type(error).__name__
    else:
        case["canonical"] = canonical.decode("utf-8")
        case["digest"] = "sha256:" + hashlib.sha256(canonical).hexdigest()
    if name in JS_DIFFERENCES:
        canonical = JS_DIFFERENCES[name].encode()
        case["js"] = {
            "canonical": canonical.decode(),
            "digest": "sha256:" + hashlib.sha256(canonical).hexdigest(),
        }
    return case


def digest(action: dict[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(action)).hexdigest()


def claims(name: str, **overrides: Any) -> dict[str, Any]:
    """Decision claims as approvals/signing.py writes them, with a jti naming the case."""
    base: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": TASK_ID,
        "jti": f"vector-{name}",
        "iat": ISSUED,
        "nbf": ISSUED,
        "exp": FOREVER,
        "context_id": CONTEXT_ID,
        "request_id": REQUEST_ID,
        "proposal_id": "00000000-0000-4000-8000-000000000001",
        "action_digest": digest(ACTION),
        "action": ACTION,
        "replaces": [],
        "decision": "approved",
        "reason": "approved by quorum",
        "approvers": [
            {
                "sub": "person:7",
                "name": "Rita Reviewer",
                "group": "finance",
                "auth": {"method": "totp", "at": "2026-01-01T00:00:00.000000Z"},
                "reason": "",
                "reservation": "",
            }
        ],
        "quorum": {"required": [{"group": "finance", "count": 1}], "approved_by": ["person:7"]},
        "policy": {"id": "refunds", "version": 3},
        "policies": [{"id": "refunds", "version": 3}],
        "tenant": TENANT,
        "rev": 2,
        "consume": True,
    }
    base.update(overrides)
    return {key: value for key, value in base.items() if value is not _DROP}


_DROP = object()  # a claim left out of the token


def private_key(which: str = "reviewer") -> Any:
    return jwt.PyJWK(KEYS[which], algorithm="EdDSA").key


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signed(payload: dict[str, Any], *, key: str = "reviewer", **header: Any) -> str:
    headers = {"kid": KEYS[key]["kid"], "typ": TOKEN_TYPE, **header}
    return jwt.encode(payload, private_key(key), algorithm="EdDSA", headers=headers)


def unsigned(header: dict[str, Any], payload: dict[str, Any], signature: bytes = b"") -> str:
    def part(value: dict[str, Any]) -> str:
        return b64url(json.dumps(value, separators=(",", ":")).encode())

    return f"{part(header)}.{part(payload)}.{b64url(signature)}"


def hs256_with_public_key(name: str) -> str:
    header = {"alg": "HS256", "typ": TOKEN_TYPE, "kid": KEYS["reviewer"]["kid"]}
    head_and_body = unsigned(header, claims(name)).rsplit(".", 1)[0]
    secret = KEYS["reviewer"]["x"].encode()
    mac = hmac.new(secret, head_and_body.encode(), hashlib.sha256).digest()
    return f"{head_and_body}.{b64url(mac)}"


def tampered(name: str) -> str:
    header, _, signature = signed(claims(name)).split(".")
    richer = unsigned({}, claims(name, action_digest="sha256:" + "0" * 64)).split(".")[1]
    return f"{header}.{richer}.{signature}"


def token_cases() -> list[dict[str, Any]]:
    """(name, token, what the agent passes to verify, the gate's tenant, what verify answers)."""
    ok = {"ok": True}
    edited = {
        "request_id": "request-2",
        "replaces": [REQUEST_ID],
        "action": EDITED_ACTION,
        "action_digest": digest(EDITED_ACTION),
    }
    cases: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
        ("approved", signed(claims("approved")), {}, {**ok, "decision": "approved", "edited": False}),
        (
            "rejected verifies",
            signed(claims("rejected verifies", decision="rejected", reason="no proof", consume=False)),
            {},
            {**ok, "decision": "rejected", "edited": False},
        ),
        (
            "needs_info verifies",
            signed(claims("needs_info verifies", decision="needs_info", consume=False)),
            {},
            {**ok, "decision": "needs_info", "edited": False},
        ),
        ("edited", signed(claims("edited", **edited)), {}, {**ok, "decision": "approved", "edited": True}),
        (
            "batch member names its manifest",
            signed(claims("batch member names its manifest", manifest=manifest_of([digest(ACTION)]))),
            {},
            {**ok, "decision": "approved", "edited": False},
        ),
        (
            "without policies",
            signed(claims("without policies", policies=_DROP)),
            {},
            {**ok, "decision": "approved", "edited": False},
        ),
        ("replayed", signed(claims("replayed")), {"times": 2}, {"code": "replayed"}),
        ("garbage", "not-a-token", {}, {"code": "malformed"}),
        ("two parts", "eyJhbGciOiJFZERTQSJ9.e30", {}, {"code": "malformed"}),
        ("header not json", "bm90IGpzb24.e30.c2ln", {}, {"code": "malformed"}),
        (
            "alg none",
            unsigned({"alg": "none", "typ": TOKEN_TYPE, "kid": KEYS["reviewer"]["kid"]}, claims("alg none")),
            {},
            {"code": "bad_algorithm"},
        ),
        ("alg HS256 with the public key", hs256_with_public_key("hs256"), {}, {"code": "bad_algorithm"}),
        (
            "alg RS256",
            unsigned(
                {"alg": "RS256", "typ": TOKEN_TYPE, "kid": KEYS["reviewer"]["kid"]}, claims("rs256"), b"x"
            ),
            {},
            {"code": "bad_algorithm"},
        ),
        ("wrong typ", signed(claims("wrong typ"), typ="JWT"), {}, {"code": "bad_type"}),
        (
            "no kid",
            unsigned({"alg": "EdDSA", "typ": TOKEN_TYPE}, claims("no kid"), b"x"),
            {},
            {"code": "unknown_kid"},
        ),
        ("unknown kid", signed(claims("unknown kid"), kid="ed25519-unknown"), {}, {"code": "unknown_kid"}),
        (
            "foreign key under the known kid",
            signed(claims("foreign"), key="foreign"),
            {},
            {"code": "bad_signature"},
        ),
        ("altered payload", tampered("altered"), {}, {"code": "bad_signature"}),
        (
            "expired",
            signed(claims("expired", iat=ISSUED, nbf=ISSUED, exp=ISSUED + 600)),
            {},
            {"code": "expired"},
        ),
        ("not yet valid", signed(claims("not yet valid", nbf=FUTURE)), {}, {"code": "not_yet_valid"}),
        ("issued in the future", signed(claims("iat future", iat=FUTURE)), {}, {"code": "not_yet_valid"}),
        (
            "wrong issuer",
            signed(claims("wrong issuer", iss="https://evil.example")),
            {},
            {"code": "wrong_issuer"},
        ),
        (
            "wrong audience",
            signed(claims("wrong audience", aud="urn:agent:other")),
            {},
            {"code": "wrong_audience"},
        ),
        (
            "audience as a list",
            signed(claims("audience list", aud=[AUDIENCE])),
            {},
            {"code": "wrong_audience"},
        ),
        ("missing request_id", signed(claims("missing", request_id=_DROP)), {}, {"code": "missing_claim"}),
        ("null exp", signed(claims("null exp", exp=None)), {}, {"code": "missing_claim"}),
        ("sub not a string", signed(claims("sub number", sub=7)), {}, {"code": "bad_claim"}),
        ("consume not a boolean", signed(claims("consume", consume="yes")), {}, {"code": "bad_claim"}),
        (
            "foreign tenant",
            signed(claims("foreign tenant", tenant="globex")),
            {"tenant": TENANT},
            {"code": "wrong_tenant"},
        ),
        (
            "no tenant claim",
            signed(claims("no tenant", tenant=_DROP)),
            {"tenant": TENANT},
            {"code": "wrong_tenant"},
        ),
        (
            "own tenant",
            signed(claims("own tenant")),
            {"tenant": TENANT},
            {**ok, "decision": "approved", "edited": False},
        ),
        ("no policy", signed(claims("no policy", policy=_DROP)), {}, {"code": "bad_policy"}),
        (
            "policy version not an integer",
            signed(claims("policy version", policy={"id": "refunds", "version": "3"})),
            {},
            {"code": "bad_policy"},
        ),
        (
            "policies without policy",
            signed(claims("policies", policies=[{"id": "other", "version": 1}])),
            {},
            {"code": "bad_policy"},
        ),
        (
            "request deadline passed",
            signed(claims("deadline passed")),
            {"expires_at": "2026-01-02T00:00:00Z"},
            {"code": "request_expired"},
        ),
        (
            "exp outlives the request deadline",
            signed(claims("deadline outlived")),
            {"expires_at": "2099-06-01T00:00:00Z"},
            {"code": "request_expired"},
        ),
        (
            "rejection after the request deadline",
            signed(claims("rejection deadline", decision="rejected", consume=False)),
            {"expires_at": "2026-01-02T00:00:00Z"},
            {**ok, "decision": "rejected", "edited": False},
        ),
        ("wrong task", signed(claims("wrong task", sub="task-2")), {}, {"code": "wrong_task"}),
        (
            "wrong context",
            signed(claims("wrong context", context_id="ctx-2")),
            {"context_id": CONTEXT_ID},
            {"code": "wrong_context"},
        ),
        (
            "wrong request",
            signed(claims("wrong request", request_id="request-0")),
            {},
            {"code": "wrong_request"},
        ),
        (
            "wrong digest",
            signed(claims("wrong digest", action_digest=digest({**ACTION, "target": "order_id:1183"}))),
            {},
            {"code": "wrong_digest"},
        ),
        (
            "edited action not matching its digest",
            signed(claims("edit mismatch", **{**edited, "action_digest": digest(ACTION)})),
            {},
            {"code": "wrong_digest"},
        ),
        (
            "unknown decision",
            signed(claims("unknown decision", decision="maybe")),
            {},
            {"code": "bad_decision"},
        ),
    ]
    result = []
    for name, token, given, expected in cases:
        verify: dict[str, Any] = {
            "task_id": TASK_ID,
            "request_id": REQUEST_ID,
            "action_digest": digest(ACTION),
        }
        for key in ("context_id", "expires_at"):
            if key in given:
                verify[key] = given[key]
        case: dict[str, Any] = {"name": name, "token": token, "verify": verify}
        if "tenant" in given:
            case["tenant"] = given["tenant"]
        if "times" in given:
            case["times"] = given["times"]  # the same token verified again by the same gate
        case["expect"] = expected
        result.append(case)
    return result


def manifest_of(member_digests: list[str]) -> str:
    """A batch's manifest digest: RFC 8785 of the ordered list of the members' action digests, hashed."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(list(member_digests))).hexdigest()


def manifest_cases() -> list[dict[str, Any]]:
    """Members' actions in order, their digests, the canonical list and the manifest digest."""
    second = {
        "tool": "payments.refund",
        "arguments": {"order_id": "1183", "amount": "25.00", "currency": "EUR"},
    }
    third = {
        "tool": "payments.refund",
        "arguments": {"order_id": "1184", "amount": "9.90", "currency": "EUR"},
    }
    cases = []
    for name, actions in (
        ("two members", [ACTION, second]),
        ("the same two in the other order", [second, ACTION]),
        ("three members", [ACTION, second, third]),
    ):
        digests = [digest(action) for action in actions]
        cases.append(
            {
                "name": name,
                "actions": actions,
                "member_digests": digests,
                "canonical": rfc8785.dumps(digests).decode("utf-8"),
                "manifest_digest": manifest_of(digests),
            }
        )
    return cases


def public_jwks() -> dict[str, Any]:
    public = {key: value for key, value in KEYS["reviewer"].items() if key != "d"}
    return {"keys": [public]}


def vectors() -> dict[str, dict[str, Any]]:
    return {
        "canonical.json": {
            "about": "RFC 8785 canonical JSON and the action digest (sdk/vectors/README.md)",
            "cases": [canonical_case(*case) for case in CANONICAL_CASES],
        },
        "manifests.json": {
            "about": "a batch's manifest digest over its members' action digests (docs/agents/batches.md)",
            "cases": manifest_cases(),
        },
        "tokens.json": {
            "about": "decision tokens and what the gate answers (sdk/vectors/README.md)",
            "gate": {"issuer": ISSUER, "audience": AUDIENCE, "leeway_seconds": 30, "jwks": public_jwks()},
            "cases": token_cases(),
        },
    }


def rendered(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    stale = []
    for name, document in vectors().items():
        path = HERE / name
        text = rendered(document)
        if "--check" in argv:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"stale: {', '.join(stale)}; run sdk/vectors/make_vectors.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
