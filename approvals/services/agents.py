"""Registering and changing agents, and rotating the decision signing key."""

from django.db import transaction

import signing_keys as keys
from approvals.models import Agent
from approvals.services.tenants import require_config_admin
from audit.models import Verb
from audit.trail import actor_label, record
from lib.errors import Conflict, NotFound, ServiceError
from tenants.models import Tenant


def register_agent(
    *,
    tenant: Tenant,
    slug: str,
    name: str,
    card_url: str,
    audience: str = "",
    push_token: str,
    api_token: str,
    outbound_auth_scheme: str = Agent.AuthScheme.NONE,
    outbound_auth_credentials: str = "",
    actor=None,
) -> Agent:
    """Create or update an agent's registration; tokens are stored as sha256 hashes only."""
    from lib.tokens import hash_token

    with transaction.atomic():
        owner = Agent.objects.select_for_update().filter(slug=slug).first()
        if owner is not None and owner.tenant_id != tenant.id:
            # Slugs are global: re-registering must never move another tenant's agent (and its tasks) here.
            raise Conflict("slug_taken", f"the agent slug {slug!r} is already taken", "slug")
        agent, created = Agent.objects.update_or_create(
            slug=slug,
            defaults={
                "tenant": tenant,
                "name": name,
                "card_url": card_url,
                "audience": audience or card_url,
                "push_token_hash": hash_token(push_token),
                "api_token_hash": hash_token(api_token),
                "outbound_auth_scheme": outbound_auth_scheme,
                "outbound_auth_credentials": outbound_auth_credentials,
            },
        )
        record(
            tenant.id,
            actor=actor_label(actor),
            verb=Verb.AGENT_REGISTERED,
            subject=f"agent:{slug}",
            data={"created": created, "card_url": card_url, "audience": agent.audience},
        )
    return agent


def rotate_signing_key(*, actor=None) -> str:
    with transaction.atomic():
        new_key, retired = keys.rotate()
        record(
            None,
            actor=actor_label(actor),
            verb=Verb.SIGNING_KEY_ROTATED,
            subject=f"key:{new_key.kid}",
            data={"kid": new_key.kid, "retired": retired},
        )
    return new_key.kid


AGENT_EDITABLE = ("name", "card_url", "audience", "outbound_auth_scheme", "outbound_auth_credentials")


def update_agent(agent: Agent, *, actor=None, **changes) -> Agent:
    """Change an agent's registration (not its slug, tenant or tokens: see rotate_agent_tokens)."""
    unknown = set(changes) - set(AGENT_EDITABLE)
    if unknown:
        raise ServiceError("bad_field", "cannot change " + ", ".join(sorted(unknown)))
    require_config_admin(actor, agent.tenant_id)
    with transaction.atomic():
        agent = Agent.objects.select_for_update().get(pk=agent.pk)
        changed = [name for name, value in changes.items() if getattr(agent, name) != value]
        if not changed:
            return agent
        for name in changed:
            setattr(agent, name, changes[name])
        agent.save(update_fields=changed)
        # Outbound credentials are secrets: the trail says they changed, never what they are.
        record(
            agent.tenant_id,
            actor=actor_label(actor),
            verb=Verb.AGENT_CHANGED,
            subject=f"agent:{agent.slug}",
            data={
                "changed": changed,
                **{name: changes[name] for name in changed if name != "outbound_auth_credentials"},
            },
        )
    return agent


def rotate_agent_tokens(agent: Agent, *, actor=None) -> tuple[str, str]:
    """New push and API tokens for an agent; the old ones stop working at once. Returns (push, api): the
    only time anyone sees them, since only their hashes are stored."""
    from lib.tokens import hash_token, new_token

    require_config_admin(actor, agent.tenant_id)
    push_token, api_token = new_token(), new_token()
    with transaction.atomic():
        updated = Agent.objects.filter(pk=agent.pk).update(
            push_token_hash=hash_token(push_token), api_token_hash=hash_token(api_token)
        )
        if updated != 1:
            raise NotFound("not_found", "no such agent")
        record(
            agent.tenant_id,
            actor=actor_label(actor),
            verb=Verb.AGENT_TOKENS_ROTATED,
            subject=f"agent:{agent.slug}",
            data={"rotated": ["push_token", "api_token"]},
        )
    return push_token, api_token
