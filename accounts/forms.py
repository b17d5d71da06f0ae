"""Sign-in and enrollment forms: a password and a one-time code in one form, and the first code of a new
authenticator. The one-time code widget and its normalization are shared with the decision form's step-up."""

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm
from django_otp import devices_for_user

from accounts import passkeys, throttle
from accounts.codes import verify_sign_in_code
from sso.sign_in.required import password_refusal

ONE_TIME_CODE = {
    "autocomplete": "one-time-code",
    "inputmode": "numeric",
    "spellcheck": "false",
    "autocapitalize": "off",
}


SIGN_IN_REFUSED = (
    "That username, password and one-time code do not match, or there were too many attempts. "
    "Check them and try again in a minute, or sign in with a passkey or a backup code."
)


class PasskeyAnswerInput(forms.HiddenInput):
    """The hidden field a passkey's answer travels in. A page shown again (a refusal) leaves it empty:
    an answer is usable once, and a stale one would only be refused."""

    def format_value(self, value):
        return None


def passkey_answer_field() -> forms.CharField:
    return forms.CharField(required=False, max_length=passkeys.MAX_ANSWER_CHARS, widget=PasskeyAnswerInput)


def normalized_code(value: str | None) -> str:
    return (value or "").strip().replace(" ", "")


class LoginForm(AuthenticationForm):
    """Username, password and a one-time code (or a passkey's answer) in one form. A person who has no
    authenticator yet signs in with the password alone and is sent to enroll one (`device` stays None)."""

    otp_token = forms.CharField(
        label="One-time code", required=False, max_length=16, widget=forms.TextInput(attrs=ONE_TIME_CODE)
    )
    # The browser's answer to a sign-in passkey challenge (static/js/passkeys.js), instead of a code.
    passkey = passkey_answer_field()

    error_messages = {
        **AuthenticationForm.error_messages,
        # One message for every refusal (a wrong password, a wrong code, a throttled account or address),
        # so a guesser cannot tell a right password from a wrong one.
        "invalid_login": SIGN_IN_REFUSED,
    }

    def __init__(self, request=None, *args, throttled=False, **kwargs):
        super().__init__(request, *args, **kwargs)
        self.device = None
        self.throttled = throttled  # axes refuses this account or address for now: check nothing
        self.fields["username"].widget.attrs["autocomplete"] = "username"
        self.fields["password"].widget.attrs["autocomplete"] = "current-password"

    def clean(self):
        if self.throttled:
            raise forms.ValidationError(self.error_messages["invalid_login"], code="invalid_login")
        # Past the account's limit only a passkey or a backup code signs in: without one, nothing is
        # checked (so nothing more is learnt or counted).
        self.account_locked = throttle.account_locked(self.cleaned_data.get("username"))
        factor_given = self.cleaned_data.get("passkey") or normalized_code(self.cleaned_data.get("otp_token"))
        if self.account_locked and not factor_given:
            raise forms.ValidationError(self.error_messages["invalid_login"], code="invalid_login")
        cleaned = super().clean()  # authenticates (axes first); raises invalid_login on a wrong password
        if self.user_cache is None:  # a required field was left empty; its own error says so
            return cleaned
        if not any(True for _ in devices_for_user(self.user_cache, confirmed=True)):
            return cleaned
        token = normalized_code(cleaned.get("otp_token"))
        if cleaned.get("passkey"):
            self.device = passkeys.verify_sign_in(self.user_cache, cleaned["passkey"])
        else:
            self.device = (
                verify_sign_in_code(self.user_cache, token, backup_only=self.account_locked)
                if token
                else None
            )
        if self.device is None:
            self.code_refused = True
            raise forms.ValidationError(self.error_messages["invalid_login"], code="invalid_login")
        return cleaned

    code_refused = False  # the password was right and the code was not
    account_locked = False  # past the account's limit (accounts/throttle.py): a passkey or backup code only

    def get_invalid_login_error(self):
        """A right password of someone whose tenant requires single sign-on (the password backend refused
        it) is told where to sign in instead; every other refusal reads alike."""
        user = get_user_model().objects.filter(username=self.cleaned_data.get("username")).first()
        if user is not None and user.check_password(self.cleaned_data.get("password") or ""):
            message = password_refusal(user)
            if message:
                return forms.ValidationError(message, code="sso_required")
        return super().get_invalid_login_error()


class EnrollForm(forms.Form):
    otp_token = forms.CharField(
        label="Code from your authenticator app", max_length=16, widget=forms.TextInput(attrs=ONE_TIME_CODE)
    )


class PasskeyNameForm(forms.Form):
    """Add a passkey: its name, and the browser's answer to the registration challenge (hidden)."""

    name = forms.CharField(
        label="Name of the new passkey",
        max_length=64,
        help_text="So you can tell your passkeys apart, e.g. “work laptop” or “blue security key”.",
    )
    passkey = passkey_answer_field()

    def clean_passkey(self):
        if not self.cleaned_data.get("passkey"):
            raise forms.ValidationError("your browser did not create a passkey; press Add a passkey again")
        return self.cleaned_data["passkey"]


class ConfirmForm(forms.Form):
    """Confirm it is you before changing your factors: a code (authenticator or backup), or a passkey's
    answer to the confirm challenge (hidden; static/js/passkeys.js)."""

    otp_token = forms.CharField(
        label="Code from your authenticator app (or a backup code)",
        required=False,
        max_length=16,
        widget=forms.TextInput(attrs=ONE_TIME_CODE),
    )
    passkey = passkey_answer_field()

    def clean(self):
        super().clean()
        cleaned = self.cleaned_data
        if not cleaned.get("passkey") and not normalized_code(cleaned.get("otp_token")):
            raise forms.ValidationError("type a code, or press Confirm with a passkey")
        return cleaned
