"""The directory behind the trail's pseudonyms: a person is `person:<random id>` in every event, and
this module alone turns that id into a name (for pages and exports) or erases the link.

A pseudonym is random, not derived from the person, so once `erase_person` deletes the directory row
nothing in the trail (whose hashes never covered a name) leads back to them, and the chain still
verifies."""

import secrets

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from audit.models import PersonDirectoryEntry

PREFIX = "person:"
# Names the directory cannot give: an id whose row was erased, or a person never saved.
UNKNOWN = "person:unknown"


def pseudonym_of(user) -> str:
    """The person's pseudonym, made on first use (kept on the instance: one query per request)."""
    if getattr(user, "pk", None) is None:
        return getattr(user, "_audit_pseudonym", None) or UNKNOWN
    read_pseudonyms([user])  # no query when the instance keeps it already
    if getattr(user, "_audit_pseudonym", None):
        return user._audit_pseudonym
    entries = PersonDirectoryEntry.objects
    try:
        with transaction.atomic():
            pseudonym = entries.create(user_id=user.pk, pseudonym=PREFIX + secrets.token_hex(8)).pseudonym
    except IntegrityError:  # another transaction named this person first
        pseudonym = entries.get(user_id=user.pk).pseudonym
    user._audit_pseudonym = pseudonym
    return pseudonym


def read_pseudonyms(users) -> None:
    """Read the pseudonyms of `users` not kept on their instances yet, in one query, and keep them there
    (a decision names each of its N approvers: one read, not N); pseudonym_of then makes only those of
    people the directory has no row for yet."""
    waiting: dict[int, list] = {}
    for user in users:
        if getattr(user, "pk", None) is not None and not getattr(user, "_audit_pseudonym", None):
            waiting.setdefault(user.pk, []).append(user)
    if not waiting:
        return
    found = PersonDirectoryEntry.objects.filter(user_id__in=waiting).values_list("user_id", "pseudonym")
    for user_id, pseudonym in found:
        for user in waiting[user_id]:
            user._audit_pseudonym = pseudonym


def pseudonym_of_username(username: str) -> str:
    """The pseudonym of the person signed in as `username`, or UNKNOWN (which matches no event)."""
    user = get_user_model().objects.filter(username=username).first()
    return pseudonym_of(user) if user is not None else UNKNOWN


def display_names(labels) -> dict[str, str]:
    """{pseudonym: name} for the pseudonyms among `labels` the directory still knows (an erased person
    is left out: callers show the pseudonym)."""
    wanted = {label for label in labels if isinstance(label, str) and label.startswith(PREFIX)}
    rows = PersonDirectoryEntry.objects.filter(pseudonym__in=wanted, user__isnull=False).select_related(
        "user"
    )
    return {
        row.pseudonym: row.user.get_full_name() or row.user.get_username()
        for row in rows
        if row.user is not None
    }


def pseudonyms_in(events: list[dict]) -> set[str]:
    """Every pseudonym an export's events mention: as actor, subject, or anywhere in their data."""
    found: set[str] = set()

    def walk(value) -> None:
        if isinstance(value, str):
            if value.startswith(PREFIX):
                found.add(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for event in events:
        walk([event["actor"], event["subject"], event["data"]])
    return found


def display_name(label: str) -> str:
    return display_names([label]).get(label, label)


def erase(user) -> str:
    """Remove what names the person: the directory row, and the User's name, e-mail and username
    (the row stays, pseudonymized, for the foreign keys of votes, decisions and memberships). In the
    caller's transaction; returns the pseudonym, which the trail keeps."""
    pseudonym = pseudonym_of(user)
    PersonDirectoryEntry.objects.filter(user_id=user.pk).delete()
    user.username = "erased-" + secrets.token_hex(8)
    user.first_name = user.last_name = user.email = ""
    user.is_active = False
    user.set_unusable_password()
    user.save(update_fields=["username", "first_name", "last_name", "email", "is_active", "password"])
    user._audit_pseudonym = None
    return pseudonym
