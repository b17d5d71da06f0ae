"""Erasing a person (`manage.py erase_person`): their personal data goes, the trail stays verifiable.

The trail names people only by pseudonym, so nothing hashed changes: the directory row that named the
pseudonym is deleted, and the User row is kept (votes, decisions and memberships point at it) with its
username, name, e-mail and password replaced. The erasure itself is an event that names the pseudonym
only. What it cannot reach is listed in docs/compliance.md."""

from django.db import transaction

from audit.labels import actor_label
from audit.models import Verb
from audit.people import erase
from audit.trail import record
from tenants import queries as tenant_queries

ERASED = ["directory_entry", "username", "first_name", "last_name", "email", "password"]


def erase_person(user, *, actor=None) -> str:
    """Erase `user`'s personal data in one transaction, recorded on the system chain and on the chain of
    every tenant they belong to; returns their pseudonym."""
    by = actor_label(actor)
    tenants = tenant_queries.tenants_for(user, roles=tenant_queries.METRICS_ROLES)
    with transaction.atomic():
        pseudonym = erase(user)
        for tenant_id in [None, *(tenant.id for tenant in tenants)]:
            record(tenant_id, actor=by, verb=Verb.PERSON_ERASED, subject=pseudonym, data={"erased": ERASED})
    return pseudonym
