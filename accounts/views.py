"""Sign-in (password and one-time code in one form) and enrollment of an authenticator.

The URLs are unchanged: /accounts/login/ (named "login", reviewer/urls.py) and /accounts/enroll/ (named
"approvals:enroll", approvals/urls.py, because pages and redirects name it so). What is recorded (a
refused code, a confirmed device) goes through approvals' services like every other state change.
"""

from django.contrib.auth import login as auth_login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_http_methods
from django_otp import login as otp_login

from accounts import throttle
from accounts.forms import EnrollForm, LoginForm
from accounts.qr import qr_svg
from approvals import services, stepup


def _next_url(request) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return reverse("approvals:queue")


@sensitive_post_parameters("password", "otp_token")
@never_cache
@require_http_methods(["GET", "POST"])
def login_view(request):
    form = LoginForm(request, data=request.POST if request.method == "POST" else None)
    if form.is_bound and form.is_valid():
        auth_login(request, form.get_user())
        if form.device is None:
            return redirect("approvals:enroll")
        otp_login(request, form.device)
        return redirect(_next_url(request))
    if form.code_refused:
        # The password was right, the code was not: counted by axes like a wrong password, and recorded.
        throttle.count_code_failure(request, form.user_cache.get_username())
        services.record_sign_in_code_refused(form.user_cache)
    return _sign_in_page(request, form, status=400 if form.is_bound else 200)


def admin_sign_in(request):
    """/admin/login/ is not a second sign-in form (django-otp's admin form answers a wrong code differently
    from a wrong password): it sends people to this one, which is throttled and answers alike."""
    target = request.GET.get("next") or reverse("admin:index")
    return redirect_to_login(target if target.startswith("/admin/") else reverse("admin:index"))


def render_sign_in_refused(request):
    """The page every refused sign-in gets, also while axes throttles the account or address."""
    form = LoginForm(request, data=request.POST, throttled=True)
    form.is_valid()
    return _sign_in_page(request, form, status=400)


def _sign_in_page(request, form, *, status):
    return render(
        request, "registration/login.html", {"form": form, "next": _next_url(request)}, status=status
    )


@sensitive_post_parameters("otp_token")
@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def enroll(request):
    user = request.user
    if stepup.user_has_device(user):
        if not user.is_verified():
            return redirect_to_login(reverse("approvals:queue"))
        return render(request, "approvals/enroll.html", {"already_enrolled": True})
    device = services.start_totp_enrollment(user)
    form = EnrollForm(request.POST if request.method == "POST" else None)
    status = 200
    if form.is_bound:
        status = 400
        if form.is_valid():
            try:
                device, codes = services.confirm_totp_enrollment(user, code=form.cleaned_data["otp_token"])
            except services.ServiceError as error:
                form.add_error("otp_token", error.message)
                status = error.http_status
            else:
                otp_login(request, device)
                # Shown once, in this response only: nothing stores them for a later page.
                return render(request, "approvals/enroll.html", {"backup_codes": codes})
    secret = _key_for_typing(device)
    return render(
        request,
        "approvals/enroll.html",
        {"form": form, "qr_svg": qr_svg(device.config_url), "secret": secret},
        status=status,
    )


def _key_for_typing(device) -> str:
    """The key in base32, in groups of four, for typing into an app by hand."""
    from base64 import b32encode

    text = b32encode(device.bin_key).decode().rstrip("=")
    return " ".join(text[i : i + 4] for i in range(0, len(text), 4))
