"""E-mail to a person when their second factors change: someone who phished a password and a code and
changed them would otherwise go unnoticed. Sent after the change commits (a mail server that is down
must not undo a change the trail already holds); a mail that cannot be sent is logged."""

import logging

from django.conf import settings
from django.core.mail import EmailMessage
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from lib.commit_hooks import on_commit

log = logging.getLogger(__name__)


def printable(text: str) -> str:
    """A device name as a mail shows it: no control, bidi or zero-width characters."""
    return "".join(c for c in str(text) if c.isprintable())  # Cc and Cf (bidi, zero-width) are not


def tell_person(user, what: str, *, by=None, cool_off_until=None) -> None:
    """Schedule the mail to `user` that `what` ("A passkey “laptop” was added") happened, by them or by
    the admin `by`. Inside the caller's transaction; nothing is sent if it rolls back."""
    if not user.email:
        return
    context = {
        "name": user.get_full_name() or user.get_username(),
        "what": printable(what),
        "at": timezone.now(),
        "by": (by.get_full_name() or by.get_username()) if by is not None and by != user else "",
        "cool_off_until": cool_off_until,
        "devices_link": settings.REVIEWER_ISSUER + reverse("accounts:devices"),
    }
    subject = " ".join(render_to_string("emails/factor_changed_subject.txt", context).split())
    message = EmailMessage(
        subject,
        render_to_string("emails/factor_changed.txt", context),
        settings.DEFAULT_FROM_EMAIL,
        [user.email],
    )

    def send():
        try:
            message.send()
        except Exception:  # any backend's failure: the change stands, its audit event says it happened
            log.exception("could not send the factor-change e-mail to user %s", user.pk)

    on_commit(send)
