"""The SCIM endpoints' authentication: the tenant's own bearer token (never a session or a password).

django-scim2 wraps each of its views in the middleware named by AUTH_CHECK_MIDDLEWARE; this one finds the
tenant whose token's SHA-256 matches and puts it on the request (request.scim_tenant), or answers 401 in
SCIM's error format. Every query of the adapters is then limited to that tenant.
"""

import hashlib
import json
import secrets

from django.db import transaction
from django.http import HttpResponse
from django_scim.constants import SCIM_CONTENT_TYPE, SchemaURI

from sso.models import ScimToken

TOKEN_PREFIX = "rvscim_"  # noqa: S105 (a prefix that names what a token is for, not a secret)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue_token(provider) -> str:
    """A new SCIM token for the provider's tenant (the old one stops working); shown once by the caller."""
    from audit.models import Verb
    from audit.trail import record

    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        ScimToken.objects.filter(provider=provider).delete()
        ScimToken.objects.create(provider=provider, token_sha256=token_hash(token))
        record(
            provider.tenant_id,
            actor="system",
            verb=Verb.IDENTITY_PROVIDER_CHANGED,
            subject=f"identity_provider:{provider.tenant.slug}",
            data={"scim_token": "issued"},
        )
    return token


def _unauthorized(detail: str) -> HttpResponse:
    response = HttpResponse(
        json.dumps({"schemas": [SchemaURI.ERROR], "status": "401", "detail": detail}),
        content_type=SCIM_CONTENT_TYPE,
        status=401,
    )
    response["WWW-Authenticate"] = 'Bearer realm="reviewer-scim"'
    return response


class BearerTokenCheck:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request, *args, **kwargs):
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return _unauthorized("a SCIM request needs the tenant's bearer token (Authorization: Bearer …)")
        found = (
            ScimToken.objects.select_related("provider__tenant")
            .filter(token_sha256=token_hash(token.strip()), provider__enabled=True)
            .first()
        )
        if found is None:
            return _unauthorized("this bearer token is not a SCIM token of any tenant")
        request.scim_tenant = found.provider.tenant
        return self.get_response(request, *args, **kwargs)
