"""Changes to a person's account (names, e-mail, active, staff and superuser flags, permissions, password)
made in the admin. A person belongs to no one tenant, so every tenant they work in records the change
(like a device reset); someone in no tenant is recorded in the system chain. Values of flags are
recorded; a password never is, only that it changed."""

from django.db import transaction

from accounts.devices import record_for_person
from audit.labels import actor_label
from audit.models import Verb

# Fields whose old and new values go into the event; any other changed field is named only.
# Values the trail keeps; a change of name, username or e-mail is recorded by field name only, so that
# erasing the person (manage.py erase_person) leaves nothing that names them.
RECORDED_VALUES = ("is_active", "is_staff", "is_superuser")


def record_person_changed(user, *, actor, changed: list[str], before: dict | None = None) -> None:
    """Record that `actor` changed these fields of `user` (already saved in the caller's transaction).
    `before` holds the old values of RECORDED_VALUES; a new account has none."""
    if not changed:
        return
    before = before or {}
    values = {
        name: {"from": before.get(name), "to": getattr(user, name)}
        for name in changed
        if name in RECORDED_VALUES
    }
    with transaction.atomic():
        record_for_person(
            user,
            actor=actor_label(actor),
            verb=Verb.PERSON_CHANGED,
            data={"fields": sorted(changed), "values": values},
        )


def person_values(user) -> dict:
    """The recorded fields as they are now (the `before` of record_person_changed)."""
    return {name: getattr(user, name) for name in RECORDED_VALUES}
