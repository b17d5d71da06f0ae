"""Erasing a person (`manage.py erase_person`): their personal data goes, the trail stays verifiable.

The trail names people only by pseudonym, so nothing hashed changes: the directory row that named the
pseudonym is deleted, and the User row is kept (votes, decisions and memberships point at it) with its
username, name, e-mail and password replaced. The sign-in logs (django-axes' attempts, successes and
failures, which key on the username) and the admin's log of changes to the account (its `object_repr`
is the username) then name the pseudonym. The erasure itself is an event that names the pseudonym only.
What it cannot reach is listed in docs/compliance.md."""

from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import transaction

from audit.labels import actor_label
from audit.models import Verb
from audit.people import erase
from audit.trail import record
from tenants import queries as tenant_queries

ERASED = [
    "directory_entry",
    "username",
    "first_name",
    "last_name",
    "email",
    "password",
    "sign_in_logs",
    "admin_log",
]


def erase_person(user, *, actor=None) -> str:
    """Erase `user`'s personal data in one transaction, recorded on the system chain and on the chain of
    every tenant they belong to; returns their pseudonym."""
    by = actor_label(actor)
    tenants = tenant_queries.tenants_for(user, roles=tenant_queries.METRICS_ROLES)
    username = user.get_username()
    with transaction.atomic():
        pseudonym = erase(user)
        _pseudonymize_logs(user, username, pseudonym)
        for tenant_id in [None, *(tenant.id for tenant in tenants)]:
            record(tenant_id, actor=by, verb=Verb.PERSON_ERASED, subject=pseudonym, data={"erased": ERASED})
    return pseudonym


def _pseudonymize_logs(user, username: str, pseudonym: str) -> None:
    """The sign-in logs count under the username as the limits spell it (case-folded, accounts/throttle.py)
    or, in rows older than that rule, as typed: both are matched without regard to case. An attempt's
    stored form data carries the username too, so it goes."""
    for model in (AccessAttempt, AccessLog, AccessFailureLog):
        model.objects.filter(username__iexact=username).update(username=pseudonym)
    AccessAttempt.objects.filter(username=pseudonym).update(get_data="", post_data="")
    LogEntry.objects.filter(
        content_type=ContentType.objects.get_for_model(user), object_id=str(user.pk)
    ).update(object_repr=pseudonym)
