"""Registering a protected resource: its agent registration (pull, audience = the resource's
identifier, an API token to consume and report with) and its resource row (challenge keys, RAR types
and their tools), in one transaction with the audit events."""

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from approvals.models import Agent
from approvals.services.agents import register_agent
from audit.labels import actor_label, agent_label
from audit.models import Verb
from audit.trail import record
from lib.errors import ServiceError
from lib.tokens import new_token
from oauth.keys import KeyRefused, public_jwks
from oauth.models import ProtectedResource
from oauth.resources import TYPE_NAME_MAX
from tenants.models import Tenant


def checked_types(types: dict[str, Any]) -> dict[str, str]:
    if not isinstance(types, dict) or not types:
        raise ServiceError(
            "types_required", "name at least one authorization_details type and its tool", "types"
        )
    for kind, tool in types.items():
        if not isinstance(kind, str) or not kind or len(kind) > TYPE_NAME_MAX:
            raise ServiceError("bad_type", f"a type is a string of 1 to {TYPE_NAME_MAX} characters", "types")
        if not isinstance(tool, str) or not tool or len(tool) > 200:
            raise ServiceError(
                "bad_type", f"the tool of {kind!r} is a string of 1 to 200 characters", "types"
            )
    return dict(types)


def register_resource(
    *,
    tenant: Tenant,
    slug: str,
    name: str,
    audience: str,
    jwks: dict[str, Any],
    types: dict[str, Any],
    api_token: str,
    jwks_url: str = "",
    actor: User | None = None,
) -> ProtectedResource:
    """Create or update a protected resource. Refuses a private key, a key of another kind than
    Ed25519 or P-256, and an empty or malformed type map (ServiceError); nothing is written then."""
    try:
        keys = public_jwks(jwks)
    except KeyRefused as error:
        raise ServiceError("bad_key", str(error), "jwks") from error
    types = checked_types(types)
    if not audience.strip():
        raise ServiceError(
            "audience_required", "a resource's audience is its identifier, e.g. its base URL", "audience"
        )
    with transaction.atomic(durable=True):
        agent = register_agent(
            tenant=tenant,
            slug=slug,
            name=name,
            audience=audience,
            delivery=Agent.Delivery.PULL,
            push_token=new_token(),  # a pull agent pushes nothing; the hash only fills the column
            api_token=api_token,
            actor=actor,
        )
        resource, created = ProtectedResource.objects.update_or_create(
            agent=agent, defaults={"jwks": keys, "jwks_url": jwks_url, "types": types}
        )
        record(
            tenant.id,
            actor=actor_label(actor),
            verb=Verb.RESOURCE_REGISTERED,
            subject=agent_label(slug),
            data={
                "created": created,
                "audience": agent.audience,
                "types": types,
                "kids": [key.get("kid") for key in keys["keys"]],
                "jwks_url": jwks_url,
            },
        )
    return resource
