"""The shared test vectors of sdk/vectors/ (also checked by @reviewer/gate, sdk/js/test/vectors.test.js):
the canonical form and digest of each JSON text, and what the gate answers for each decision token."""

import json
import runpy
from pathlib import Path
from typing import Any

import pytest
import rfc8785

from reviewer_gate import gate

VECTORS = Path(__file__).resolve().parents[2] / "vectors"
CANONICAL = json.loads((VECTORS / "canonical.json").read_text(encoding="utf-8"))
TOKENS = json.loads((VECTORS / "tokens.json").read_text(encoding="utf-8"))
MANIFESTS = json.loads((VECTORS / "manifests.json").read_text(encoding="utf-8"))


def by_name(cases: list[dict[str, Any]]) -> Any:
    return pytest.mark.parametrize("case", cases, ids=[case["name"] for case in cases])


@by_name(CANONICAL["cases"])
def test_the_canonical_form_and_digest_match_the_vector(case):
    action = json.loads(case["json"])
    if "refused" in case:
        with pytest.raises(rfc8785.CanonicalizationError):
            gate.action_digest(action)
        return
    assert rfc8785.dumps(action).decode("utf-8") == case["canonical"]
    assert gate.action_digest(action) == case["digest"]


@by_name(MANIFESTS["cases"])
def test_the_manifest_digest_matches_the_vector(case):
    assert [gate.action_digest(action) for action in case["actions"]] == case["member_digests"]
    assert rfc8785.dumps(case["member_digests"]).decode("utf-8") == case["canonical"]
    assert gate.manifest_digest(case["member_digests"]) == case["manifest_digest"]


def a_gate(tenant: str | None) -> gate.Gate:
    settings = TOKENS["gate"]
    return gate.Gate(
        issuer=settings["issuer"],
        audience=settings["audience"],
        keys=gate.StaticKeySource(settings["jwks"]),
        used_store=gate.MemoryUsedStore(),
        leeway_seconds=settings["leeway_seconds"],
        tenant=tenant,
    )


@by_name(TOKENS["cases"])
def test_the_gate_answers_each_token_as_the_vector_says(case):
    the_gate = a_gate(case.get("tenant"))
    expected = case["expect"]

    def verify() -> gate.VerifiedDecision:
        return the_gate.verify(case["token"], **case["verify"])

    for _ in range(case.get("times", 1) - 1):
        verify()  # the earlier uses of a replayed token verify
    if "code" in expected:
        with pytest.raises(gate.GateError) as refused:
            verify()
        assert refused.value.code == expected["code"]
    else:
        decision = verify()
        assert (decision.decision, decision.edited) == (expected["decision"], expected["edited"])


def test_the_committed_vectors_are_what_the_generator_writes():
    generator = runpy.run_path(str(VECTORS / "make_vectors.py"))
    assert generator["main"](["--check"]) == 0
