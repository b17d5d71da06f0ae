"""Authentication backends: the local password (refused where the tenant requires single sign-on) and the
identity provider's (sso/oidc/backend.py). AUTHENTICATION_BACKENDS names this module, and every session
a backend signed in keeps that name (Django checks it against the setting): it stays where it is."""

from django.contrib.auth.backends import ModelBackend

from sso.sign_in.required import sso_required_provider


class PasswordBackend(ModelBackend):
    """Django's password backend, except for members of a tenant that requires single sign-on (its named
    break-glass admin excepted). A session it signed in earlier ends at its next request too: get_user asks
    the same question."""

    def user_can_authenticate(self, user):
        return super().user_can_authenticate(user) and sso_required_provider(user) is None
