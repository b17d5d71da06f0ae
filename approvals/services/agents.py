"""Registering and changing agents, and rotating the decision signing key.

An agent's card URL and audience are its own across the whole installation (every tenant): Reviewer
finds parked tasks at the card URL and signs decisions for the audience, so two registrations sharing
either would let one tenant's policy answer the other tenant's requests. They are compared by
`identity_key` (blanks and trailing slashes dropped; a URL's scheme and host, a URN's `urn:` and
namespace in lower case; a URL's default port dropped), so that trivial spelling variants cannot share
one; the database's unique constraints hold the exact values.
"""

import re
from urllib.parse import urlsplit, urlunsplit

from django.db import IntegrityError, transaction

import signing_keys as keys
from approvals.models import Agent
from approvals.services.tenants import require_config_admin
from audit.labels import actor_label, agent_label
from audit.models import Verb
from audit.trail import record
from lib.errors import Conflict, NotFound, ServiceError
from lib.url_credentials import without_credentials
from tenants.models import Tenant

DEFAULT_PORTS = {"http": 80, "https": 443}
# RFC 3986 section 3.1.
URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def identity_key(value: str) -> str:
    """The form two card URLs or audiences are compared in: surrounding blanks and trailing slashes
    dropped, and the parts that name nothing by their case in lower case. A URL (http, https): its scheme
    and host, and its default port dropped (path and query kept as they are). Any other URI, such as the
    URN `urn:agent:refunds`: its scheme, and a URN's namespace (RFC 8141: `urn` and the namespace are
    case-insensitive); the rest as given."""
    text = value.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return text.rstrip("/")
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return _uri_key(text)
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port in (None, DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    if parts.username or parts.password:
        netloc = f"{parts.netloc.rpartition('@')[0]}@{netloc}"
    return urlunsplit((scheme, netloc, parts.path.rstrip("/"), parts.query, ""))


def _uri_key(text: str) -> str:
    text = text.rstrip("/")
    scheme, colon, rest = text.partition(":")
    if not colon or not URI_SCHEME.fullmatch(scheme):
        return text
    scheme = scheme.lower()
    if scheme == "urn":
        namespace, colon, specific = rest.partition(":")
        rest = f"{namespace.lower()}{colon}{specific}"
    return f"{scheme}:{rest}"


def refuse_shared_identity(
    card_url: str, audience: str, *, tenant_id: int | None, other_than: int | None
) -> None:
    """Conflict when another agent (of any tenant) has this card URL or audience. Agents are few (one
    row per registered agent), so they are compared in Python, by identity_key. The refusal names the
    other agent only when it is of the same tenant: another tenant's agents are none of this one's
    business, and the message would list them one guess at a time."""
    card_key, audience_key = identity_key(card_url), identity_key(audience)
    others = Agent.objects.exclude(pk=other_than) if other_than else Agent.objects.all()
    for slug, other_tenant_id, other_card, other_audience in others.values_list(
        "slug", "tenant_id", "card_url", "audience"
    ):
        whose = f"agent {slug!r}'s" if other_tenant_id == tenant_id else "another agent's"
        if card_key and identity_key(other_card) == card_key:  # pull agents have none to share
            raise Conflict(
                "card_url_taken",
                f"the card URL {card_url!r} is already {whose}: an agent's card URL is its own",
                "card_url",
            )
        if identity_key(other_audience) == audience_key:
            raise Conflict(
                "audience_taken",
                f"the audience {audience!r} is already {whose}: an agent's audience is its own",
                "audience",
            )


def _saved(agent_write):
    """Run a write whose unique constraint another registration may have won meanwhile: a Conflict."""
    try:
        with transaction.atomic():
            return agent_write()
    except IntegrityError as error:
        raise Conflict(
            "agent_identity_taken", f"another agent has this slug, card URL or audience: {error}"
        ) from error


def delivery_for(card_url: str, audience: str, delivery: str | None = None) -> str:
    """How an agent with this card URL gets its decisions: pull exactly when it has none. A pull agent
    names its audience itself (there is no card URL to default it to)."""
    if not card_url:
        if delivery == Agent.Delivery.A2A:
            raise ServiceError("card_url_required", "an A2A agent needs its card URL", "card_url")
        if not audience.strip():
            raise ServiceError(
                "audience_required",
                "an agent without a card URL (a pull agent) needs an audience, e.g. urn:agent:refunds",
                "audience",
            )
        return Agent.Delivery.PULL
    if delivery == Agent.Delivery.PULL:
        raise ServiceError("card_url_with_pull", "a pull agent has no card URL: leave it empty", "card_url")
    return Agent.Delivery.A2A


def register_agent(
    *,
    tenant: Tenant,
    slug: str,
    name: str,
    card_url: str = "",
    audience: str = "",
    delivery: str | None = None,
    push_token: str,
    api_token: str,
    outbound_auth_scheme: str = Agent.AuthScheme.NONE,
    outbound_auth_credentials: str = "",
    approval_extension: str = Agent.ApprovalExtension.REVIEWER,
    actor=None,
) -> Agent:
    """Create or update an agent's registration; tokens are stored as sha256 hashes only. Without a card
    URL the agent is a pull agent (`delivery` pull), which must give its `audience`."""
    from lib.tokens import hash_token

    card_url = (card_url or "").strip()
    delivery = delivery_for(card_url, audience or "", delivery)
    with transaction.atomic():
        owner = Agent.objects.select_for_update().filter(slug=slug).first()
        if owner is not None and owner.tenant_id != tenant.id:
            # Slugs are global: re-registering must never move another tenant's agent (and its tasks) here.
            raise Conflict("slug_taken", f"the agent slug {slug!r} is already taken", "slug")
        audience = audience or card_url
        refuse_shared_identity(
            card_url, audience, tenant_id=tenant.id, other_than=owner.pk if owner else None
        )
        agent, created = _saved(
            lambda: Agent.objects.update_or_create(
                slug=slug,
                defaults={
                    "tenant": tenant,
                    "name": name,
                    "card_url": card_url,
                    "delivery": delivery,
                    "audience": audience,
                    "push_token_hash": hash_token(push_token),
                    "api_token_hash": hash_token(api_token),
                    "outbound_auth_scheme": outbound_auth_scheme,
                    "outbound_auth_credentials": outbound_auth_credentials,
                    "approval_extension": approval_extension,
                },
            )
        )
        record(
            tenant.id,
            actor=actor_label(actor),
            verb=Verb.AGENT_REGISTERED,
            subject=agent_label(slug),
            data={
                "created": created,
                "card_url": without_credentials(card_url),
                "delivery": delivery,
                "audience": without_credentials(agent.audience),
                "approval_extension": approval_extension,
            },
        )
    return agent


def rotate_signing_key(*, actor=None) -> str:
    with transaction.atomic(durable=True):
        new_key, retired = keys.rotate()
        record(
            None,
            actor=actor_label(actor),
            verb=Verb.SIGNING_KEY_ROTATED,
            subject=f"key:{new_key.kid}",
            data={"kid": new_key.kid, "retired": retired},
        )
    return new_key.kid


# The registration's fields that hold a URL (or a URN): recorded without credentials.
URL_FIELDS = ("card_url", "audience")

AGENT_EDITABLE = (
    "name",
    "card_url",
    "delivery",
    "audience",
    "outbound_auth_scheme",
    "outbound_auth_credentials",
    "approval_extension",
)


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
        if {"card_url", "delivery", "audience"} & set(changed):
            # The delivery follows the card URL (pull exactly without one); a contradiction is refused.
            delivery = delivery_for(agent.card_url, agent.audience, changes.get("delivery"))
            if delivery != agent.delivery:
                agent.delivery = delivery
                changed = [*changed, "delivery"] if "delivery" not in changed else changed
        if {"card_url", "audience"} & set(changed):
            refuse_shared_identity(
                agent.card_url, agent.audience, tenant_id=agent.tenant_id, other_than=agent.pk
            )
        _saved(lambda: agent.save(update_fields=changed))
        # Outbound credentials are secrets: the trail says they changed, never what they are; a URL
        # keeps its shape without the credentials it may carry.
        record(
            agent.tenant_id,
            actor=actor_label(actor),
            verb=Verb.AGENT_CHANGED,
            subject=agent_label(agent.slug),
            data={
                "changed": changed,
                **{
                    name: _as_recorded(name, getattr(agent, name))
                    for name in changed
                    if name != "outbound_auth_credentials"
                },
            },
        )
    return agent


def _as_recorded(field: str, value):
    """A registration field's value as the trail keeps it: a URL without the credentials it may carry."""
    return without_credentials(value) if field in URL_FIELDS else value


def rotate_agent_tokens(agent: Agent, *, actor=None) -> tuple[str, str]:
    """New push and API tokens for an agent; the old ones stop working at once. Returns (push, api): the
    only time anyone sees them, since only their hashes are stored."""
    from lib.tokens import hash_token, new_token

    require_config_admin(actor, agent.tenant_id)
    push_token, api_token = new_token(), new_token()
    with transaction.atomic(durable=True):
        updated = Agent.objects.filter(pk=agent.pk).update(
            push_token_hash=hash_token(push_token), api_token_hash=hash_token(api_token)
        )
        if updated != 1:
            raise NotFound("not_found", "no such agent")
        record(
            agent.tenant_id,
            actor=actor_label(actor),
            verb=Verb.AGENT_TOKENS_ROTATED,
            subject=agent_label(agent.slug),
            data={"rotated": ["push_token", "api_token"]},
        )
    return push_token, api_token
