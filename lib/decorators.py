"""`verified_required`: the guard of every reviewer and audit page.

It imports no app of ours, so audit/ may use it without depending on approvals/.
"""

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.cache import patch_cache_control
from django_htmx.http import HttpResponseClientRedirect
from django_otp import devices_for_user


def verified_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Signed in and verified with a one-time code in this session. Someone signed in without an
    authenticator is sent to enroll one; anyone else to the sign-in page. What these pages show (the
    queue, a proposal and its decision form, the audit trail) is never stored by a browser or a proxy:
    every response is Cache-Control: no-store, private."""

    @wraps(view)
    def guarded(request, *args, **kwargs):
        user = request.user
        if user.is_authenticated and user.is_verified():
            response = view(request, *args, **kwargs)
            patch_cache_control(response, no_store=True, private=True)
            return response
        if user.is_authenticated and not any(True for _ in devices_for_user(user, confirmed=True)):
            target = reverse("approvals:enroll")
        else:
            target = redirect_to_login(request.get_full_path())["Location"]
        return HttpResponseClientRedirect(target) if getattr(request, "htmx", False) else redirect(target)

    return guarded
