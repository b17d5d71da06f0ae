"""How the audit trail names who acted, what was acted on, and each chain: every label is spelled here
and parsed back here, so a caller never writes `f"agent:{...}"` or `"tenant:"` itself.

Actors: `person:<random id>` (a person, pseudonymous: the directory in audit/people.py names them),
`agent:<slug>`, `policy:<slug>@<version>` (written by the policy engine), `system` (scripts, the
worker). Chains: `tenant:<id>` per tenant, `system` for the rest.
"""

from audit.people import pseudonym_of, pseudonym_of_username

SYSTEM = "system"
SYSTEM_CHAIN = "system"
_TENANT_CHAIN = "tenant:"


def user_label(user) -> str:
    """The trail's name for a person (actor, subject, or inside event data): their pseudonym, never a
    name or an e-mail address, so erasing the person leaves every hash intact."""
    return pseudonym_of(user)


def username_label(username: str) -> str:
    """The label of the person signed in as `username` (an export's reviewer filter)."""
    return pseudonym_of_username(username)


def actor_label(actor) -> str:
    """Who acted: a User, or None for the system (scripts, the worker)."""
    return user_label(actor) if actor is not None else SYSTEM


def agent_label(slug: str) -> str:
    return f"agent:{slug}"


def tenant_label(slug: str) -> str:
    """A tenant as the subject of an event (by slug; its chain is named by id, `tenant_chain`)."""
    return f"tenant:{slug}"


def tenant_chain(tenant_id: int | None) -> str:
    return f"{_TENANT_CHAIN}{tenant_id}" if tenant_id is not None else SYSTEM_CHAIN


def tenant_of_chain(chain: str) -> int | None:
    return int(chain.removeprefix(_TENANT_CHAIN)) if chain.startswith(_TENANT_CHAIN) else None


def parse_label(label: str) -> tuple[str, str]:
    """("agent", "refunds") for `agent:refunds`; ("system", "") for `system`."""
    kind, _, value = label.partition(":")
    return kind, value
