"""Authentication backends: the local password (refused where the tenant requires single sign-on) and the
identity provider's (sso/oidc/backend.py). AUTHENTICATION_BACKENDS names this module, and every session
a backend signed in keeps that name (Django checks it against the setting): it stays where it is."""

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend

from sso.sign_in.required import password_refusal, sso_required_provider

# Set on the request by PasswordBackend when the password was right but the tenant requires single
# sign-on: the sign-in form then says where to sign in, without checking the password a second time.
SSO_REFUSAL_ATTRIBUTE = "password_refused_for_single_sign_on"


class PasswordBackend(ModelBackend):
    """Django's password backend, except for members of a tenant that requires single sign-on (its named
    break-glass admin excepted). A session it signed in earlier ends at its next request too: get_user asks
    the same question.

    Every attempt costs one password hash, whatever its outcome (a wrong password, a right one, an unknown
    name: Django's backend hashes the password for an unknown name too), so the time a refusal takes does
    not tell a right password from a wrong one."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None:
            username = kwargs.get(get_user_model().USERNAME_FIELD)
        if username is None or password is None:
            return None
        user_model = get_user_model()
        try:
            user = user_model._default_manager.get_by_natural_key(username)
        except user_model.DoesNotExist:
            user_model().set_password(password)  # the same work as a check (Django's own defence)
            return None
        if not user.check_password(password) or not super().user_can_authenticate(user):
            return None
        refusal = password_refusal(user)
        if refusal:
            if request is not None:
                setattr(request, SSO_REFUSAL_ATTRIBUTE, refusal)
            return None
        return user

    def user_can_authenticate(self, user):
        return super().user_can_authenticate(user) and sso_required_provider(user) is None
