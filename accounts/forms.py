"""Sign-in and enrollment forms: a password and a one-time code in one form, and the first code of a new
authenticator. The one-time code widget and its normalization are shared with the decision form's step-up."""

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django_otp import devices_for_user

from accounts.codes import verify_sign_in_code

ONE_TIME_CODE = {
    "autocomplete": "one-time-code",
    "inputmode": "numeric",
    "spellcheck": "false",
    "autocapitalize": "off",
}


SIGN_IN_REFUSED = (
    "That username, password and one-time code do not match, or there were too many attempts. "
    "Check them and try again in a minute."
)


def normalized_code(value: str) -> str:
    return (value or "").strip().replace(" ", "")


class LoginForm(AuthenticationForm):
    """Username, password and a one-time code in one form. A person who has no authenticator yet signs in
    with the password alone and is sent to enroll one (`device` stays None)."""

    otp_token = forms.CharField(
        label="One-time code", required=False, max_length=16, widget=forms.TextInput(attrs=ONE_TIME_CODE)
    )

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
        cleaned = super().clean()  # authenticates (axes first); raises invalid_login on a wrong password
        if self.user_cache is None:  # a required field was left empty; its own error says so
            return cleaned
        if not any(True for _ in devices_for_user(self.user_cache, confirmed=True)):
            return cleaned
        token = normalized_code(cleaned.get("otp_token"))
        self.device = verify_sign_in_code(self.user_cache, token) if token else None
        if self.device is None:
            self.code_refused = True
            raise forms.ValidationError(self.error_messages["invalid_login"], code="invalid_login")
        return cleaned

    code_refused = False  # the password was right and the code was not


class EnrollForm(forms.Form):
    otp_token = forms.CharField(
        label="Code from your authenticator app", max_length=16, widget=forms.TextInput(attrs=ONE_TIME_CODE)
    )
