"""Sign-in and enrollment forms: a password and a one-time code in one form, and the first code of a new
authenticator. The one-time code widget and its normalization are shared with the decision form's step-up."""

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django_otp import devices_for_user, match_token

ONE_TIME_CODE = {
    "autocomplete": "one-time-code",
    "inputmode": "numeric",
    "spellcheck": "false",
    "autocapitalize": "off",
}


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
        # One message for every wrong part, so a guesser cannot tell a right password from a wrong one.
        "invalid_login": "That username, password and one-time code do not match. Check them and try again.",
        "throttled": "Too many wrong codes in a row: wait a few seconds, then type the code your "
        "authenticator shows now.",
    }

    def __init__(self, request=None, *args, **kwargs):
        super().__init__(request, *args, **kwargs)
        self.device = None
        self.fields["username"].widget.attrs["autocomplete"] = "username"
        self.fields["password"].widget.attrs["autocomplete"] = "current-password"

    def clean(self):
        cleaned = super().clean()  # authenticates; raises invalid_login on a wrong password
        if self.user_cache is None:  # a required field was left empty; its own error says so
            return cleaned
        devices = list(devices_for_user(self.user_cache, confirmed=True))
        if not devices:
            return cleaned
        throttled = not any(device.verify_is_allowed()[0] for device in devices)
        token = normalized_code(cleaned.get("otp_token"))
        self.device = match_token(self.user_cache, token) if token and not throttled else None
        if self.device is None:
            code = "throttled" if throttled else "invalid_login"
            raise forms.ValidationError(self.error_messages[code], code=code)
        return cleaned


class EnrollForm(forms.Form):
    otp_token = forms.CharField(
        label="Code from your authenticator app", max_length=16, widget=forms.TextInput(attrs=ONE_TIME_CODE)
    )
