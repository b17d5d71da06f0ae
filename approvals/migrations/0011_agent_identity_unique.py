from urllib.parse import urlsplit, urlunsplit

from django.db import migrations, models

# approvals.services.agents.identity_key as of this migration (a migration keeps its own copy).
DEFAULT_PORTS = {"http": 80, "https": 443}


def identity_key(value: str) -> str:
    text = value.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return text
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return text
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port in (None, DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    if parts.username or parts.password:
        netloc = f"{parts.netloc.rpartition('@')[0]}@{netloc}"
    return urlunsplit((scheme, netloc, parts.path.rstrip("/"), parts.query, ""))


def shared_identities(rows) -> list[str]:
    """One line per card URL or audience that several agents share (compared by identity_key)."""
    holders: dict[tuple[str, str], list[str]] = {}
    for slug, tenant, card_url, audience in rows:
        holders.setdefault(("card URL", identity_key(card_url)), []).append(f"{slug} (tenant {tenant})")
        holders.setdefault(("audience", identity_key(audience)), []).append(f"{slug} (tenant {tenant})")
    return [
        f"{what} {key!r}: agents {', '.join(sorted(agents))}"
        for (what, key), agents in sorted(holders.items())
        if len(agents) > 1
    ]


def refuse_shared_identities(apps, schema_editor):
    """Stop before the unique constraints when agents already share a card URL or an audience: each
    such pair lets one tenant's policy answer the other's requests, and only a person can tell which
    registration is the agent's own. Give the others their own card URL and audience, then migrate."""
    Agent = apps.get_model("approvals", "Agent")
    clashes = shared_identities(
        Agent.objects.order_by("slug").values_list("slug", "tenant__slug", "card_url", "audience")
    )
    if clashes:
        raise RuntimeError(
            "cannot migrate: an agent's card URL and audience must be its own, but "
            + "; ".join(clashes)
            + ". Change all but one of each (admin, Agents) and run migrate again."
        )


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0010_proposal_risk_rank_queue_order"),
    ]

    operations = [
        migrations.RunPython(refuse_shared_identities, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="agent",
            constraint=models.UniqueConstraint(fields=["card_url"], name="agent_card_url_unique"),
        ),
        migrations.AddConstraint(
            model_name="agent",
            constraint=models.UniqueConstraint(fields=["audience"], name="agent_audience_unique"),
        ),
    ]
