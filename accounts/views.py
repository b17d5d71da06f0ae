"""Sign-in (password and a one-time code or a passkey in one form), enrollment of an authenticator, and
Your devices (passkeys added, renamed and removed).

The URLs are unchanged: /accounts/login/ (named "login", reviewer/urls.py) and /accounts/enroll/ (named
"approvals:enroll", approvals/urls.py, because pages and redirects name it so). What is recorded (a
refused code, a confirmed device) goes through approvals' services like every other state change.
"""

from django.contrib import admin, messages
from django.contrib.auth import login as auth_login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_otp import login as otp_login
from django_otp.plugins.otp_static.models import StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice
from django_otp_webauthn.models import WebAuthnCredential

from accounts import factors, passkeys, stepup, throttle
from accounts.devices import (
    add_authenticator,
    confirm_totp_enrollment,
    generate_backup_codes,
    record_sign_in_code_refused,
    register_passkey,
    remove_passkey,
    rename_passkey,
    start_totp_enrollment,
)
from accounts.forms import ConfirmForm, EnrollForm, LoginForm, PasskeyNameForm
from accounts.qr import qr_svg
from lib.decorators import verified_required
from lib.errors import FactorChangeRefused, NotFound, ServiceError, error_body


def _next_url(request) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return reverse("approvals:queue")


@sensitive_post_parameters("password", "otp_token", "passkey")
@never_cache
@require_http_methods(["GET", "POST"])
def login_view(request):
    form = LoginForm(request, data=request.POST if request.method == "POST" else None)
    if form.is_bound and form.is_valid():
        if form.account_locked:  # a passkey or a backup code: the count starts again with this sign-in
            throttle.record_unlocked(
                form.get_user(), factor="passkey" if form.cleaned_data["passkey"] else "backup code"
            )
        auth_login(request, form.get_user())
        if form.device is None:
            return redirect("approvals:enroll")
        otp_login(request, form.device)
        return redirect(_next_url(request))
    if form.code_refused and form.user_cache is not None:
        # The password was right, the code was not: counted by axes like a wrong password, and recorded.
        throttle.count_code_failure(request, form.user_cache.get_username())
        record_sign_in_code_refused(form.user_cache)
    if form.is_bound and throttle.account_locked(form.cleaned_data.get("username")):
        throttle.record_account_lock(form.cleaned_data["username"])
    return _sign_in_page(request, form, status=400 if form.is_bound else 200)


def admin_sign_in(request):
    """/admin/login/ is not a second sign-in form (django-otp's admin form answers a wrong code differently
    from a wrong password): it sends people to this one, which is throttled and answers alike. Someone
    already signed in with their code is never sent to a sign-in form: into the admin if it lets them
    in, else a page that says why not (the admin sends there whoever it refuses)."""
    target = request.GET.get("next") or reverse("admin:index")
    target = target if target.startswith("/admin/") else reverse("admin:index")
    if request.user.is_authenticated and request.user.is_verified():
        if admin.site.has_permission(request):
            return redirect(target)
        return render(request, "accounts/no_admin_access.html", {"target": target}, status=403)
    return redirect_to_login(target)


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
    device = start_totp_enrollment(user)
    form = EnrollForm(request.POST if request.method == "POST" else None)
    status = 200
    if form.is_bound:
        status = 400
        if form.is_valid():
            try:
                device, codes = confirm_totp_enrollment(user, code=form.cleaned_data["otp_token"])
            except ServiceError as error:
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


# ---------------------------------------------------------------------------------------------------
# Your devices: the authenticator app, backup codes and passkeys (several, named). Passkey ceremonies
# start with a JSON request for options (static/js/passkeys.js) and end with a form post carrying the
# browser's answer; accounts/passkeys.py checks it.


@never_cache
@verified_required
@require_GET
def devices(request):
    return _devices_page(request, PasskeyNameForm(), status=200)


def _devices_page(request, add_form, *, status, rename_errors=None, confirm_form=None, **extra):
    user = request.user
    keys = list(WebAuthnCredential.objects.filter(user=user, confirmed=True).order_by("created_at"))
    for key in keys:
        key.cool_off_until = passkeys.cool_off_until(key)
    confirmation = factors.confirmation_in(request.session)
    needed = factors.needed_for_change(user)
    context = {
        "apps": list(TOTPDevice.objects.filter(user=user, confirmed=True).order_by("id")),
        "backup_codes_left": StaticToken.objects.filter(device__user=user, device__confirmed=True).count(),
        "passkeys": keys,
        "add_form": add_form,
        "rename_errors": rename_errors or {},
        "confirm_form": confirm_form or ConfirmForm(),
        "confirmed": confirmation if factors.refusal(user, confirmation, "it") is None else None,
        "confirmed_until": factors.confirmed_until(confirmation),
        "confirmed_with": factors.describe(confirmation.method) if confirmation else "",
        "needed": needed,
        "ask_for": factors.ASK_FOR.get(needed, "") if needed else "",
        "because": factors.BECAUSE.get(needed, "") if needed else "",
        **extra,
        "webauthn_origin_ok": request.build_absolute_uri("/").rstrip("/") in passkeys.origins(),
        "webauthn_origins": passkeys.origins(),
        "nav": "devices",
    }
    return render(request, "accounts/devices.html", context, status=status)


@sensitive_post_parameters("otp_token", "passkey")
@never_cache
@verified_required
@require_POST
def confirm(request):
    """Confirm it is you: a code or a passkey, kept in the session for a few minutes of changes."""
    form = ConfirmForm(request.POST)
    if form.is_valid():
        done = factors.confirm(
            request.user,
            request.session,
            code=form.cleaned_data["otp_token"],
            passkey=form.cleaned_data["passkey"],
        )
        if done is not None:
            until = factors.confirmed_until(done)
            messages.success(
                request,
                f"Confirmed with {factors.describe(done.method)}: you may change your devices until "
                f"{until:%H:%M} UTC.",
            )
            return redirect("accounts:devices")
        form.add_error(
            None,
            "that passkey was not accepted; try again"
            if form.cleaned_data["passkey"]
            else "that code is not valid (or was already used); type the current one",
        )
    return _devices_page(request, PasskeyNameForm(), status=400, confirm_form=form)


@never_cache
@verified_required
@require_POST
def passkey_confirm_options(request):
    if not passkeys.has_passkey(request.user):
        return JsonResponse(error_body("no_passkey", "you have no passkey yet"), status=409)
    return JsonResponse(passkeys.confirm_options(request.user))


@never_cache
@verified_required
@require_POST
def passkey_registration_options(request):
    """Refused before the browser creates anything when the person has not confirmed it is them."""
    message = factors.refusal(request.user, factors.confirmation_in(request.session), "adding a passkey")
    if message is not None:
        return JsonResponse(error_body("confirm_first", message), status=403)
    return JsonResponse(passkeys.registration_options(request.user))


@sensitive_post_parameters("passkey")
@never_cache
@verified_required
@require_POST
def passkey_register(request):
    form = PasskeyNameForm(request.POST)
    if form.is_valid():
        try:
            register_passkey(
                request.user,
                answer=form.cleaned_data["passkey"],
                name=form.cleaned_data["name"],
                confirmation=factors.confirmation_in(request.session),
            )
        except ServiceError as error:
            form.add_error("name" if error.field == "name" else None, error.message)
            return _devices_page(request, form, status=error.http_status)
        else:
            messages.success(request, f"Your passkey “{form.cleaned_data['name']}” is registered.")
            return redirect("accounts:devices")
    return _devices_page(request, form, status=400)


@never_cache
@verified_required
@require_POST
def passkey_rename(request, passkey_id):
    return _change_passkey(
        request,
        passkey_id,
        lambda: rename_passkey(request.user, passkey_id, name=request.POST.get("name", "")),
        "The passkey is renamed.",
    )


@never_cache
@verified_required
@require_POST
def passkey_remove(request, passkey_id):
    return _change_passkey(
        request,
        passkey_id,
        lambda: remove_passkey(
            request.user, passkey_id, confirmation=factors.confirmation_in(request.session)
        ),
        "The passkey is removed; it no longer signs in or confirms votes.",
    )


def _change_passkey(request, passkey_id, change, done: str):
    """Run a change to one of the person's own passkeys: someone else's is not found; a refusal is shown
    beside that passkey on the devices page."""
    try:
        change()
    except NotFound:
        raise Http404("no such passkey") from None
    except ServiceError as error:
        return _devices_page(
            request, PasskeyNameForm(), status=error.http_status, rename_errors={passkey_id: error.message}
        )
    messages.success(request, done)
    return redirect("accounts:devices")


@never_cache
@verified_required
@require_POST
def backup_codes(request):
    """New backup codes, shown once in this response."""
    try:
        codes = generate_backup_codes(request.user, confirmation=factors.confirmation_in(request.session))
    except FactorChangeRefused as error:
        messages.error(request, error.message)
        return redirect("accounts:devices")
    return render(request, "accounts/backup_codes.html", {"backup_codes": codes, "nav": "devices"})


@sensitive_post_parameters("otp_token")
@never_cache
@verified_required
@require_http_methods(["GET", "POST"])
def authenticator(request):
    """Set up an authenticator app in place of the current one (a new phone), after confirming."""
    user = request.user
    confirmation = factors.confirmation_in(request.session)
    refusal = factors.refusal(user, confirmation, "adding an authenticator app")
    if refusal is not None:  # recorded when a code is sent (add_authenticator), not for a look
        messages.error(request, refusal)
        return redirect("accounts:devices")
    device = start_totp_enrollment(user)
    form = EnrollForm(request.POST if request.method == "POST" else None)
    status = 200
    if form.is_bound:
        status = 400
        if form.is_valid():
            try:
                add_authenticator(user, code=form.cleaned_data["otp_token"], confirmation=confirmation)
            except ServiceError as error:
                form.add_error("otp_token", error.message)
                status = error.http_status
            else:
                messages.success(request, "Your new authenticator app is set up; the earlier one stopped.")
                return redirect("accounts:devices")
    context = {"form": form, "qr_svg": qr_svg(device.config_url), "secret": _key_for_typing(device)}
    return render(request, "accounts/authenticator.html", {**context, "nav": "devices"}, status=status)


@never_cache
@require_POST
def passkey_sign_in_options(request):
    """Options for the sign-in form's "Use a passkey": any passkey of this site (nothing about accounts)."""
    return JsonResponse(passkeys.sign_in_options())


def refused_page(request, credentials, *args, **kwargs):
    """AXES_LOCKOUT_CALLABLE: while throttled, the answer is the sign-in page with the one message every
    wrong attempt gets, with the same status (the password is not even checked)."""
    from accounts.views import render_sign_in_refused

    return render_sign_in_refused(request)
