"""Web Push to reviewers' devices: a new proposal for them, a reminder and an escalation arrive as a
notification that opens the proposal's page (the vote itself happens there, with a passkey or a code).

Sent with pywebpush: the payload encrypted to the subscription's keys (RFC 8291, aes128gcm) and the
request signed with Reviewer's VAPID key (RFC 8292), read from WEB_PUSH_VAPID_PRIVATE_KEY_FILE. A
subscription's endpoint is a URL the browser chose, so it is called only if its host is one of
WEB_PUSH_SERVICE_HOSTS (the browser vendors' push services) and every address it resolves to passes the
outbound rule of lib/outbound.py. A push service that answers 404 or 410 has dropped the
subscription: it is removed.

The payload carries Reviewer's headline and a one-line summary (hidden characters written out,
capped), the page link and the proposal id as tag: no token, digest or code. Each (proposal, person,
reason) is pushed once (PushSent).
"""

import ipaddress
import json
import logging
import socket
from functools import lru_cache
from urllib.parse import urlsplit

from cryptography.hazmat.primitives import serialization
from django.conf import settings
from py_vapid import Vapid02
from pywebpush import WebPushException, webpush

from approvals.models.notifications import PushSubscription
from approvals.notify.audience import waiting_reviewers
from approvals.notify.common import headline_line, one_line, proposal_link
from approvals.services.push_devices import (
    end_for_deprovisioned,
    forget_subscription,
    not_yet_pushed,
    record_pushed,
)
from lib import base64url, outbound

log = logging.getLogger(__name__)

TTL_SECONDS = 3600


class PushNotConfigured(Exception):
    pass


@lru_cache(maxsize=4)
def _vapid(path: str) -> Vapid02:
    return Vapid02.from_file(path)


def vapid() -> Vapid02:
    path = settings.WEB_PUSH_VAPID_PRIVATE_KEY_FILE
    if not path:
        raise PushNotConfigured("WEB_PUSH_VAPID_PRIVATE_KEY_FILE is not set")
    return _vapid(str(path))


def application_server_key() -> str:
    """The VAPID public key as the browser's PushManager.subscribe() takes it (base64url, uncompressed)."""
    raw = vapid().public_key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return base64url.encode(raw)


def configured() -> bool:
    return bool(settings.WEB_PUSH_VAPID_PRIVATE_KEY_FILE)


def endpoint_refusal(endpoint: str) -> str | None:
    """Why Reviewer will not call this push endpoint (None if it will)."""
    parts = urlsplit(endpoint or "")
    host = (parts.hostname or "").lower()
    if parts.scheme != "https" and not (parts.scheme == "http" and settings.NOTIFY_ALLOW_HTTP):
        return "a push endpoint is an https:// URL"
    allowed = [h.lower() for h in settings.WEB_PUSH_SERVICE_HOSTS]
    if not any(host == h or (h.startswith(".") and host.endswith(h)) for h in allowed):
        return "that push service is not one Reviewer sends to (WEB_PUSH_SERVICE_HOSTS)"
    return None


def _addresses_allowed(endpoint: str) -> bool:
    """Every address the push host resolves to is public, or inside the operator's allowed networks
    (outbound.refusal: never link-local or a metadata address)."""
    parts = urlsplit(endpoint)
    if not parts.hostname:
        return False
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        answers = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for answer in answers:
        address = ipaddress.ip_address(str(answer[4][0]).split("%", 1)[0])
        if not address.is_global and outbound.refusal(parts.hostname, address) is not None:
            return False
    return True


def payload(proposal, reason: str) -> dict:
    title = {
        "new": "Approval requested",
        "escalation": "Escalated to you",
    }.get(reason, "Reminder: still waiting for you")
    return {
        "title": title,
        # Reviewer's headline first (the currency named, the target spelled as its history), then the
        # agent's words.
        "body": f"{headline_line(proposal, 80)}: {one_line(proposal.summary, 120)}",
        "url": proposal_link(proposal),
        "tag": str(proposal.id),
    }


def push_to(user, proposal, reason: str) -> int:
    """Push once per (proposal, person, reason) to each of the person's devices; returns devices reached."""
    if not user.is_active or not configured() or not not_yet_pushed(proposal, user, reason):
        return 0
    data = json.dumps(payload(proposal, reason))
    reached = 0
    for subscription in PushSubscription.objects.filter(user=user).order_by("id"):
        if endpoint_refusal(subscription.endpoint) or not _addresses_allowed(subscription.endpoint):
            continue
        try:
            webpush(
                subscription_info={
                    "endpoint": subscription.endpoint,
                    "keys": {"p256dh": subscription.p256dh, "auth": subscription.auth},
                },
                data=data,
                vapid_private_key=vapid(),
                vapid_claims={"sub": settings.WEB_PUSH_CONTACT},
                ttl=TTL_SECONDS,
                # requests' (connect, read): a push service that never answers costs one call this long
                timeout=(settings.NOTIFY_CONNECT_TIMEOUT_SECONDS, settings.NOTIFY_READ_TIMEOUT_SECONDS),
            )
            reached += 1
        except WebPushException as error:
            status = getattr(error.response, "status_code", None)
            if status in (404, 410):
                forget_subscription(subscription, "the push service dropped it")
            else:
                log.warning("push to device %s failed: %s", subscription.pk, status)
        except OSError as error:
            log.warning("push to device %s failed: %s", subscription.pk, type(error).__name__)
    record_pushed(proposal, user, reason)
    return reached


def announce(proposal) -> int:
    """A new proposal, pushed once to the people who could decide it (the worker's announcing step,
    approvals/notify/announce.py); returns how many devices it reached."""
    if not configured():
        return 0
    return sum(push_to(person, proposal, "new") for person in waiting_reviewers(proposal))


def run(now=None) -> int:
    """The worker's step: end the subscriptions of deprovisioned people."""
    return end_for_deprovisioned()
