"""A person's push devices ("Your devices"): subscribing one, removing one, and their end when the person
is deprovisioned; and the worker's record of what it pushed."""

from urllib.parse import urlsplit

from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals.models.notifications import PushSent, PushSubscription
from audit.labels import SYSTEM, actor_label, user_label
from audit.models import Verb
from audit.trail import record
from lib.errors import ActionRefused

MAX_DEVICES = 10


def subscribe(
    user, *, endpoint: str, p256dh: str, auth: str, name: str, refusal: str | None
) -> PushSubscription:
    """Store a browser's push subscription for `user`. `refusal` is the sender's verdict on the endpoint
    (approvals/notify/push.py endpoint_refusal), given here so a refused endpoint is never stored."""
    if refusal:
        raise ActionRefused("push_endpoint", refusal, "endpoint")
    if not p256dh or not auth or len(p256dh) > 200 or len(auth) > 100:
        raise ActionRefused("push_keys", "the subscription's keys are missing or malformed", "keys")
    name = (name or "").strip()[:100] or "This device"
    with transaction.atomic(durable=True):
        if PushSubscription.objects.filter(user=user).count() >= MAX_DEVICES:
            raise ActionRefused("push_devices", f"at most {MAX_DEVICES} devices; remove one first")
        try:
            with transaction.atomic():
                device = PushSubscription.objects.create(
                    user=user, endpoint=endpoint, p256dh=p256dh, auth=auth, name=name
                )
        except IntegrityError:
            raise ActionRefused("push_endpoint", "this device is already subscribed", "endpoint") from None
        record(
            None,
            actor=actor_label(user),
            verb=Verb.PUSH_DEVICE_ADDED,
            subject=user_label(user),
            # The push service's host only: the endpoint's path is the device's capability URL.
            data={"device": device.pk, "name": name, "service": urlsplit(endpoint).hostname or ""},
        )
    return device


def remove(user, device_id: int) -> None:
    with transaction.atomic(durable=True):
        deleted, _ = PushSubscription.objects.filter(user=user, pk=device_id).delete()
        if not deleted:
            raise ActionRefused("not_found", "no such device")
        record(
            None,
            actor=actor_label(user),
            verb=Verb.PUSH_DEVICE_REMOVED,
            subject=user_label(user),
            data={"device": device_id},
        )


def forget_subscription(device: PushSubscription, why: str) -> None:
    with transaction.atomic(durable=True):
        PushSubscription.objects.filter(pk=device.pk).delete()
        record(
            None,
            actor=SYSTEM,
            verb=Verb.PUSH_DEVICE_REMOVED,
            subject=user_label(device.user),
            data={"device": device.pk, "reason": why},
        )


def end_for_deprovisioned() -> int:
    """Every subscription of a person who is no longer active ends."""
    ended = 0
    for device in PushSubscription.objects.filter(user__is_active=False).select_related("user")[:200]:
        forget_subscription(device, "the person was deprovisioned")
        ended += 1
    return ended


def not_yet_pushed(proposal, user, reason: str) -> bool:
    """Whether this push is still to be sent: each reason once; "new" only to someone told nothing yet
    about the proposal (a person the escalation added heard of it as an escalation)."""
    sent = PushSent.objects.filter(proposal=proposal, user=user)
    return not (sent.exists() if reason == "new" else sent.filter(reason=reason).exists())


def record_pushed(proposal, user, reason: str) -> None:
    PushSent.objects.get_or_create(
        proposal=proposal, user=user, reason=reason, defaults={"at": timezone.now()}
    )
