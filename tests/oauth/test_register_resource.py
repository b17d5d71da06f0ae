"""`manage.py register_resource`: the agent registration and the resource row, the token printed once;
a private key or a key of another kind is refused and nothing is written."""

import json
from io import StringIO

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.core.management import CommandError, call_command

from approvals.models import Agent
from audit.models import AuditEvent, Verb
from oauth.models import ProtectedResource
from tests.oauth.challenges import RESOURCE_AUDIENCE, ChallengeKey


def register(tmp_path, jwk: dict, *extra: str) -> str:
    path = tmp_path / "key.jwk"
    path.write_text(json.dumps(jwk))
    out = StringIO()
    call_command(
        "register_resource",
        "--tenant=acme",
        "--slug=refunds-api",
        "--name=Refunds API",
        f"--audience={RESOURCE_AUDIENCE}",
        f"--jwk-file={path}",
        "--type=refund=payments.refund",
        *extra,
        stdout=out,
    )
    return out.getvalue()


def test_a_resource_is_a_pull_agent_with_its_keys_and_types(tenant, tmp_path):
    output = register(tmp_path, ChallengeKey().public_jwk())

    resource = ProtectedResource.objects.get()
    assert resource.agent.delivery == Agent.Delivery.PULL and resource.agent.audience == RESOURCE_AUDIENCE
    assert resource.types == {"refund": "payments.refund"}
    assert "API token (shown once):" in output and "refund -> payments.refund" in output
    assert AuditEvent.objects.filter(verb=Verb.RESOURCE_REGISTERED).count() == 1


def test_a_private_key_is_refused_and_nothing_is_written(tenant, tmp_path):
    key = ChallengeKey()
    assert isinstance(key.private, ed25519.Ed25519PrivateKey)
    private = json.loads(jwt.algorithms.OKPAlgorithm.to_jwk(key.private))  # with its "d"

    with pytest.raises(CommandError, match="private key"):
        register(tmp_path, private)

    assert not ProtectedResource.objects.exists() and not Agent.objects.exists()


def test_an_rsa_key_is_refused(tenant, tmp_path):
    with pytest.raises(CommandError, match="Ed25519"):
        register(tmp_path, {"kty": "RSA", "n": "AQAB", "e": "AQAB"})
