"""Settings of the loopback OpenID Connect provider the SSO tests sign in through.

It stands in for Okta, Entra ID, Google or Keycloak, which cannot be reached from the test machine: a
tiny Django project whose provider is django-oauth-toolkit in its OIDC mode (authorization code flow,
PKCE required, RS256-signed ID tokens, discovery and JWKS, `prompt=login`). Its database is a SQLite file
of its own; its users and their groups are set by the test through `/_control/` (see views.py).
"""

import os

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

SECRET_KEY = os.environ.get("IDP_SECRET_KEY", "loopback-test-provider-only")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "tests.sso.oidc_idp.urls"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ.get("IDP_DATABASE", ":memory:")}
}
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [os.path.join(os.path.dirname(__file__), "templates")],
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
LOGIN_URL = "/login/"
# Cookies are per host, not per port: on 127.0.0.1 beside Reviewer, the provider's must not overwrite
# Reviewer's session and CSRF cookies.
SESSION_COOKIE_NAME = "idp_sessionid"
CSRF_COOKIE_NAME = "idp_csrftoken"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # test users only

_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "PKCE_REQUIRED": True,
    "OIDC_RSA_PRIVATE_KEY": _KEY.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode(),
    "OAUTH2_VALIDATOR_CLASS": "tests.sso.oidc_idp.views.ClaimsValidator",
    "SCOPES": {"openid": "OpenID Connect", "email": "e-mail", "profile": "profile", "groups": "groups"},
    "ID_TOKEN_EXPIRE_SECONDS": 300,
}
