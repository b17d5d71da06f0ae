"""Every change to what an open page knows of its person's access tells that person's sockets.

A proposal page keeps its person's facts in memory (consumers.py): their session, their one-time-code
device, their memberships. Whatever path changes one of those rows (a service, the admin, a cascade, a
sign-out deleting the session), the row's own signal sends events.access_facts_changed after commit, so
no service has to remember to. Paths that bypass signals (QuerySet.update, raw SQL) on these rows must
call events.access_facts_changed themselves; none changes an access fact today. A socket also re-reads
when its facts are older than consumers.FACTS_MAX_AGE, for an invalidation lost on the way.
"""

from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.db.models.signals import post_delete, post_save
from django_otp.models import Device

from approvals import events
from tenants.models import GroupMembership, TenantMembership

# The fields of a user whose change ends or changes access (a sign-in's last_login does not).
USER_ACCESS_FIELDS = {"is_active", "password"}


def _session_ended(sender, instance, **kwargs):
    events.access_facts_changed(session_key=instance.session_key)


def _membership_changed(sender, instance, **kwargs):
    events.access_facts_changed(user_id=instance.user_id)


def _device_changed(sender, instance, **kwargs):
    if instance.user_id is not None:
        events.access_facts_changed(user_id=instance.user_id)


def _user_changed(sender, instance, update_fields=None, created=False, **kwargs):
    if created or (update_fields is not None and not USER_ACCESS_FIELDS & set(update_fields)):
        return
    events.access_facts_changed(user_id=instance.pk)


def connect() -> None:
    """Connect the receivers (ApprovalsConfig.ready): every concrete one-time-code device model too."""
    post_delete.connect(_session_ended, sender=Session, dispatch_uid="live-session-ended")
    for membership in (TenantMembership, GroupMembership):
        name = membership.__name__
        post_save.connect(_membership_changed, sender=membership, dispatch_uid=f"live-{name}-saved")
        post_delete.connect(_membership_changed, sender=membership, dispatch_uid=f"live-{name}-deleted")
    for model in apps.get_models():
        if issubclass(model, Device):
            label = model._meta.label
            post_save.connect(_device_changed, sender=model, dispatch_uid=f"live-{label}-saved")
            post_delete.connect(_device_changed, sender=model, dispatch_uid=f"live-{label}-deleted")
    user_model = get_user_model()
    post_save.connect(_user_changed, sender=user_model, dispatch_uid="live-user-saved")
    post_delete.connect(_user_changed, sender=user_model, dispatch_uid="live-user-deleted")
