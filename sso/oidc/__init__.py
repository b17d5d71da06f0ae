"""OpenID Connect sign-in per tenant on mozilla-django-oidc: the tenant's provider as the library's
settings (`provider`), the ID-token check (`id_token`), the authentication backend that signs the person
in (`backend`), the views that start a sign-in and take the provider's callback (`views`), and a vote's
step-up by a fresh sign-in at the provider (`idp_step_up`)."""

# AUTHENTICATION_BACKENDS names the backend sso.oidc.ProviderBackend, and so does every session it signed
# in (Django keeps the path and checks it against the setting): the name stays, the class lives in backend.
from sso.oidc.backend import ProviderBackend

__all__ = ["ProviderBackend"]
