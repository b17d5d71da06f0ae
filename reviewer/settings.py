"""Reviewer settings: one module, configured by environment, failing loudly in production.

Development (DEBUG on, the default) needs no environment at all: SQLite under ./data, the in-memory
channel layer, a generated SECRET_KEY and signing key. With DEBUG off every secret must be given.
`.env.example` lists every variable read here.
"""

import ipaddress
import os
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from lib import tracing
from lib.env import database_settings, development_secret, env_bool, env_int, env_list, env_str
from reviewer import fixed_settings

BASE_DIR = Path(__file__).resolve().parent.parent


DEBUG = env_bool("DEBUG", True)
DATA_DIR = Path(env_str("REVIEWER_DATA_DIR", str(BASE_DIR / "data")))


SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY (or SECRET_KEY_FILE) is required when DEBUG is off")
    SECRET_KEY = development_secret(DATA_DIR, "secret_key")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"] if DEBUG else [])
if not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS is required when DEBUG is off (comma-separated host names)")
if "*" in ALLOWED_HOSTS:
    # AllowedHostsOriginValidator trusts ALLOWED_HOSTS for WebSocket origins: "*" would accept any site.
    raise ImproperlyConfigured("ALLOWED_HOSTS may not contain '*': it disables the WebSocket origin check")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# The public base URL of this Reviewer: the `iss` of every decision and the base of links in emails.
REVIEWER_ISSUER = env_str("REVIEWER_ISSUER", "http://127.0.0.1:8000").rstrip("/")
if not DEBUG and not os.environ.get("REVIEWER_ISSUER"):
    raise ImproperlyConfigured("REVIEWER_ISSUER (the public base URL) is required when DEBUG is off")

# Ed25519 signing keys (decisions and audit checkpoints). Private keys live in files, never in the
# database: one PEM per key id in this folder. `manage.py rotate_signing_key` adds one.
SIGNING_KEY_DIR = Path(env_str("REVIEWER_SIGNING_KEY_DIR", str(DATA_DIR / "keys")))
# Alternatively one private key given directly (PEM text, or REVIEWER_SIGNING_KEY_FILE).
SIGNING_KEY_PEM = env_str("REVIEWER_SIGNING_KEY")
if not DEBUG and not SIGNING_KEY_PEM and not os.environ.get("REVIEWER_SIGNING_KEY_DIR"):
    raise ImproperlyConfigured(
        "a signing key is required when DEBUG is off: REVIEWER_SIGNING_KEY(_FILE) or REVIEWER_SIGNING_KEY_DIR"
    )
# In development the first key is generated on first use; production must provide one.
SIGNING_KEY_AUTOGENERATE = DEBUG and not SIGNING_KEY_PEM
# Longest lifetime of a decision token; a retired key stays in the JWKS at least this long.
DECISION_TOKEN_MAX_SECONDS = env_int("DECISION_TOKEN_MAX_SECONDS", 3600)
# The polling interval the OAuth doors (TAC, CIBA: oauth/) answer; a client polling sooner gets slow_down.
OAUTH_POLL_INTERVAL_SECONDS = env_int("OAUTH_POLL_INTERVAL_SECONDS", 5)

INSTALLED_APPS = [
    "daphne",
    "reviewer.apps.ReviewerAdminConfig",  # django.contrib.admin with the OTP site (reviewer/admin_site.py)
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "template_partials",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "django_otp.plugins.otp_static",
    "django_otp_webauthn",
    "axes",
    "csp",
    "tenants",
    "accounts",
    "audit",
    "approvals",
    "sso",
    "health",
    "authzen",
    "oauth",
    "django_scim",
    "djangosaml2",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # A SAML response is a cross-site POST, which the Lax session cookie does not reach: djangosaml2 keeps
    # the requests a browser started (InResponseTo) in a session of its own (SameSite=None).
    "djangosaml2.middleware.SamlSessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django_otp.middleware.OTPMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it turns a throttled sign-in into AXES_LOCKOUT_CALLABLE's page.
    "axes.middleware.AxesMiddleware",
]

# django-axes checks every sign-in first (throttled accounts and addresses are refused before the
# password is checked), then Django's own backend. accounts/throttle.py says how it is used.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    # The password, refused to members of a tenant that requires single sign-on (sso/backends.py).
    "sso.backends.PasswordBackend",
    # The tenant's identity provider (sso/oidc/backend.py; sessions record this name, so it stays).
    "sso.oidc.ProviderBackend",
]

ROOT_URLCONF = "reviewer.urls"
ASGI_APPLICATION = "reviewer.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

_default_sqlite = f"sqlite:///{DATA_DIR / 'reviewer.sqlite3'}"
DATABASE_URL = env_str("DATABASE_URL", _default_sqlite)
if DATABASE_URL.startswith("sqlite"):
    DATA_DIR.mkdir(parents=True, exist_ok=True)
DATABASES = {"default": database_settings(DATABASE_URL, conn_max_age=0)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE takes the write lock at BEGIN, so two votes cannot both read "awaiting" and both win.
    DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 20}
    DATABASES["default"]["TEST"] = {"NAME": env_str("SQLITE_TEST_NAME", "") or None}
IS_POSTGRES = DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
# HTTP requests one Daphne process runs at once, agents' and people's apart (reviewer/overload.py, which
# says which paths are whose): the next of a full share gets 503 + Retry-After, and agents can never take
# people's slots. Each request holds at most one database connection while it runs. By default the
# total is MAX_CONCURRENT_REQUESTS, a quarter of it people's and the rest agents'; 0 leaves a share
# unlimited, and MAX_CONCURRENT_REQUESTS=0 both. People get at least 2: a request keeps its slot until
# Django has closed it, just after its answer left, so one person's next click can come while the last
# one still holds a slot.
MAX_CONCURRENT_REQUESTS = env_int("MAX_CONCURRENT_REQUESTS", 16)
_people_default = max(2, MAX_CONCURRENT_REQUESTS // 4) if MAX_CONCURRENT_REQUESTS > 0 else 0
_agents_default = max(1, MAX_CONCURRENT_REQUESTS - _people_default) if MAX_CONCURRENT_REQUESTS > 0 else 0
PEOPLE_CONCURRENCY_LIMIT = env_int("PEOPLE_CONCURRENCY_LIMIT", _people_default)
AGENT_CONCURRENCY_LIMIT = env_int("AGENT_CONCURRENCY_LIMIT", _agents_default)
# A decision's continuation is sent by the process that committed it, right after the commit, in a
# background thread (at most OUTBOX_DIRECT_SEND_THREADS at once; beyond that the worker is woken
# instead); the worker stays the retry path (approvals/worker/delivery.py). Off: the worker sends everything.
# Held instead for an intake decision the agent takes from the answer (`Prefer: decision-in-answer`),
# then sent only if it has not started on it (ANSWERED_CONTINUATION_DELAY_SECONDS; docs/agents/rest-api.md).
OUTBOX_DIRECT_SEND = env_bool("OUTBOX_DIRECT_SEND", True)
OUTBOX_DIRECT_SEND_THREADS = env_int("OUTBOX_DIRECT_SEND_THREADS", 4)
ANSWERED_CONTINUATION_DELAY_SECONDS = env_int("ANSWERED_CONTINUATION_DELAY_SECONDS", 10)
# After-commit work the answer need not wait for (sequencing, broadcasts) runs on one background thread
# per process (lib/commit_hooks.py); off: in the committing request, before its answer.
COMMIT_HOOKS_IN_BACKGROUND = env_bool("COMMIT_HOOKS_IN_BACKGROUND", True)
# Who chains the audit events a change accepted (docs/operations.md, "Who sequences"). "worker": the
# appending process only inserts them and wakes the workers after commit, which chain them in batches;
# "after_commit": the appending process chains them right after its commit (on the thread above). The
# default is "worker" on PostgreSQL, "after_commit" on SQLite (one writer at a time: nothing to gain).
AUDIT_SEQUENCING = env_str("AUDIT_SEQUENCING") or ("worker" if IS_POSTGRES else "after_commit")
if AUDIT_SEQUENCING not in ("worker", "after_commit"):
    raise ImproperlyConfigured(
        f"AUDIT_SEQUENCING must be 'worker' or 'after_commit', not {AUDIT_SEQUENCING!r}"
    )
# A batch with no checkpoint due commits with synchronous_commit off: a crash may lose seals, never an
# event (it is sealed again); everything is flushed before it leaves
# (audit.chain.sequencer.make_seals_durable).
AUDIT_SEQUENCER_ASYNC_COMMIT = env_bool("AUDIT_SEQUENCER_ASYNC_COMMIT", True)
# An event still pending after this long is overdue (Prometheus: reviewer_audit_oldest_pending_seconds).
AUDIT_PENDING_ALERT_SECONDS = env_int("AUDIT_PENDING_ALERT_SECONDS", 30)
# Readiness (/readyz, health/checks.py; docs/operations.md, "Health probes"): unready past these limits.
# A worker's tick (every run_worker --interval, 2 s, longer while agents answer slowly) ended at most this
# long ago; the oldest event not chained yet waited at most this long; at most this many outbox messages
# are due, the oldest due at most this long; and every check answered within the timeout.
READY_WORKER_TICK_MAX_SECONDS = env_int("READY_WORKER_TICK_MAX_SECONDS", 60)
READY_SEQUENCER_LAG_MAX_SECONDS = env_int("READY_SEQUENCER_LAG_MAX_SECONDS", AUDIT_PENDING_ALERT_SECONDS)
READY_OUTBOX_BACKLOG_MAX = env_int("READY_OUTBOX_BACKLOG_MAX", 1000)
READY_OUTBOX_DUE_MAX_SECONDS = env_int("READY_OUTBOX_DUE_MAX_SECONDS", 300)
READY_CHECK_TIMEOUT_SECONDS = env_int("READY_CHECK_TIMEOUT_SECONDS", 5)
# OpenTelemetry traces (lib/tracing.py): on when the standard OTEL_* variables name an OTLP endpoint.
TRACES_ENABLED = tracing.wanted()
# Decision waits (`?wait=N`, approvals/agent_api/decision_wait.py) hold no request slot or connection:
# per process at most DECISION_WAITS_PER_AGENT for one agent (then 429) and DECISION_WAITS_PER_PROCESS
# in all (then 503); their reads use at most DECISION_WAIT_READS pooled connections at once.
DECISION_WAITS_PER_AGENT = env_int("DECISION_WAITS_PER_AGENT", 50)
DECISION_WAITS_PER_PROCESS = env_int("DECISION_WAITS_PER_PROCESS", 5000)
DECISION_WAIT_READS = max(1, env_int("DECISION_WAIT_READS", 2))
# The pool's size and PostgreSQL's max_connections: reviewer/fixed_settings.py, "Database pool".
_DIRECT_SENDERS = OUTBOX_DIRECT_SEND_THREADS if OUTBOX_DIRECT_SEND else 0
DB_POOL_MAX_SIZE = env_int(
    "DB_POOL_MAX_SIZE",
    AGENT_CONCURRENCY_LIMIT + PEOPLE_CONCURRENCY_LIMIT + _DIRECT_SENDERS + DECISION_WAIT_READS + 4
    if AGENT_CONCURRENCY_LIMIT > 0 and PEOPLE_CONCURRENCY_LIMIT > 0
    else 0,
)
if IS_POSTGRES and DB_POOL_MAX_SIZE > 0:
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": min(env_int("DB_POOL_MIN_SIZE", 2), DB_POOL_MAX_SIZE),
        "max_size": DB_POOL_MAX_SIZE,
        "timeout": env_int("DB_POOL_TIMEOUT", 10),
    }
    # A connection taken from the pool is checked (one empty round trip) only when it may have died: it
    # was last taken DB_POOL_CHECK_IDLE_SECONDS ago or more, or the server wrote to or closed it while idle
    # (seen without a round trip), or it is new. After PostgreSQL restarts every idle one is dead, and
    # each served a 500 unchecked (tests/faults/test_processes_die.py). Not CONN_HEALTH_CHECKS, which
    # under the pool is a round trip per checkout: lib/storage/pool_checks.py.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = False
DB_POOL_CHECK_IDLE_SECONDS = env_int("DB_POOL_CHECK_IDLE_SECONDS", 30)
# The audit sequencer's own role (setup_database_roles --sequencer), the only one that may insert seals
# and move chain heads: give it to every process that sequences (docs/operations.md).
AUDIT_SEQUENCER_DATABASE_URL = env_str("AUDIT_SEQUENCER_DATABASE_URL")
if AUDIT_SEQUENCER_DATABASE_URL:
    DATABASES["sequencer"] = {
        **dj_database_url.parse(AUDIT_SEQUENCER_DATABASE_URL, conn_max_age=60, conn_health_checks=True),
        # The same database under another role: tests use the default connection's test database.
        "TEST": {"MIRROR": "default"},
    }

# Where the worker's LISTEN connections go (its outbox wake-up and its audit sequencer's): a direct
# connection to the PostgreSQL primary, when DATABASE_URL goes through PgBouncer in transaction mode,
# which loses LISTEN's notifications (lib/storage/pg_listen.py). Empty: DATABASE_URL's connection.
DATABASE_LISTEN_URL = env_str("DATABASE_LISTEN_URL")
if DATABASE_LISTEN_URL and not (
    IS_POSTGRES and DATABASE_LISTEN_URL.startswith(("postgres://", "postgresql://"))
):
    raise ImproperlyConfigured(
        "DATABASE_LISTEN_URL is a postgres:// URL, and only for a PostgreSQL DATABASE_URL (LISTEN/NOTIFY)"
    )

REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CHANNEL_LAYERS = fixed_settings.redis_channel_layers(
        REDIS_URL,
        prefix=env_str("CHANNELS_PREFIX", "reviewer"),
        socket_timeout=env_int("REDIS_SOCKET_TIMEOUT", 30),
    )
else:
    # One process only: the embedded default. Several Daphne processes need REDIS_URL.
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "approvals:queue"
LOGOUT_REDIRECT_URL = "login"

# django-otp: failed attempts back off exponentially (1 s, 2 s, 4 s, ...) per device.
OTP_TOTP_THROTTLE_FACTOR = env_int("OTP_TOTP_THROTTLE_FACTOR", 1)
OTP_STATIC_THROTTLE_FACTOR = env_int("OTP_STATIC_THROTTLE_FACTOR", 1)
OTP_TOTP_ISSUER = env_str("OTP_TOTP_ISSUER", "Reviewer")

# Passkeys (WebAuthn, accounts/passkeys.py). WEBAUTHN_RP_ID is the host name passkeys are bound to (a
# domain, never an IP address); a passkey made for it works only on pages whose origin is one of
# WEBAUTHN_ORIGINS (scheme, host and port exactly). Browsers allow WebAuthn only in a secure context
# (https, or http://localhost), so both default to REVIEWER_ISSUER's host and origin when it is https
# (plus the https CSRF_TRUSTED_ORIGINS on that host), and otherwise (development, an IP address) to
# localhost on REVIEWER_ISSUER's port. Changing the id later makes every registered passkey useless.
_issuer = urlsplit(REVIEWER_ISSUER)
_issuer_host = _issuer.hostname or ""
_issuer_named = (
    _issuer.scheme == "https" and not _issuer_host.replace(".", "").isdigit() and ":" not in _issuer_host
)
WEBAUTHN_RP_ID = env_str("WEBAUTHN_RP_ID", _issuer_host if _issuer_named else "localhost")
WEBAUTHN_ORIGINS = env_list(
    "WEBAUTHN_ORIGINS",
    list(
        dict.fromkeys(
            ([f"https://{_issuer.netloc}"] if _issuer_named else [])
            + [
                o
                for o in CSRF_TRUSTED_ORIGINS
                if o.startswith("https://") and urlsplit(o).hostname == WEBAUTHN_RP_ID
            ]
        )
    )
    or [f"http://localhost:{_issuer.port or 8000}"],
)
# django-otp-webauthn reads its own names; Reviewer mounts none of its views (no passwordless sign-in).
OTP_WEBAUTHN_RP_ID = WEBAUTHN_RP_ID
OTP_WEBAUTHN_RP_NAME = env_str("WEBAUTHN_RP_NAME", "Reviewer")
OTP_WEBAUTHN_ALLOWED_ORIGINS = WEBAUTHN_ORIGINS
OTP_WEBAUTHN_ALLOW_PASSWORDLESS_LOGIN = False
# A passkey added less than this long ago does not satisfy a `step_up: "passkey"` policy (nor count as
# a passkey when the person changes their factors) unless an admin vouched for it: its registration
# rested on a weaker factor, and the person has this long, after the e-mail that says it was added, to
# have it reset. 0 turns the cool-off off.
PASSKEY_COOL_OFF_SECONDS = env_int("PASSKEY_COOL_OFF_SECONDS", 24 * 3600)
# How long confirming with a factor on Your devices lets the person change their factors.
FACTOR_CHANGE_WINDOW_SECONDS = env_int("FACTOR_CHANGE_WINDOW_SECONDS", 300)
if PASSKEY_COOL_OFF_SECONDS < 0 or FACTOR_CHANGE_WINDOW_SECONDS <= 0:
    raise ImproperlyConfigured(
        "PASSKEY_COOL_OFF_SECONDS must be 0 or more and FACTOR_CHANGE_WINDOW_SECONDS more than 0 (seconds)"
    )

# Sign-in throttling (django-axes, accounts/throttle.py): after SIGN_IN_FAILURE_LIMIT failures (a wrong
# password, or a right one with a wrong code) a pair (account, client address), and separately a client
# address, is refused for SIGN_IN_COOL_OFF_SECONDS: a guesser elsewhere does not keep the person out.
# Across addresses, SIGN_IN_ACCOUNT_FAILURE_LIMIT failures within SIGN_IN_ACCOUNT_WINDOW_SECONDS make the
# account sign in only with a passkey or a backup code (which unlocks it) until the window holds fewer.
SIGN_IN_COOL_OFF_SECONDS = env_int("SIGN_IN_COOL_OFF_SECONDS", 120)
AXES_FAILURE_LIMIT = env_int("SIGN_IN_FAILURE_LIMIT", 5)
SIGN_IN_ACCOUNT_FAILURE_LIMIT = env_int("SIGN_IN_ACCOUNT_FAILURE_LIMIT", 30)
SIGN_IN_ACCOUNT_WINDOW_SECONDS = env_int("SIGN_IN_ACCOUNT_WINDOW_SECONDS", 900)
if SIGN_IN_ACCOUNT_FAILURE_LIMIT <= AXES_FAILURE_LIMIT:
    raise ImproperlyConfigured(
        "SIGN_IN_ACCOUNT_FAILURE_LIMIT must be above SIGN_IN_FAILURE_LIMIT: else one address's failures "
        "lock the account everywhere"
    )
AXES_COOLOFF_TIME = timedelta(seconds=SIGN_IN_COOL_OFF_SECONDS)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"]
# Refused attempts neither count nor extend the cool-down; every counted failure is in AccessFailureLog,
# which the account limit counts.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_ENABLE_ACCESS_FAILURE_LOG = True
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "accounts.throttle.client_address"
AXES_LOCKOUT_CALLABLE = "accounts.views.refused_page"
AXES_USERNAME_FORM_FIELD = "username"
AXES_USERNAME_CALLABLE = "accounts.throttle.axes_username"  # one count per name however it is spelled
AXES_SENSITIVE_PARAMETERS = ["password", "otp_token"]
AXES_VERBOSE = False

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", 8 * 3600)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# Behind a TLS-terminating proxy (the production set-up), the proxy says the request came over https with
# X-Forwarded-Proto. It is read only from TRUSTED_PROXIES (below), and the proxy must always set it
# (overwriting what a client sent); set SECURE_PROXY_SSL_HEADER to an empty value when Daphne terminates
# TLS itself.
_proxy_ssl_header = env_str("SECURE_PROXY_SSL_HEADER", "" if DEBUG else "HTTP_X_FORWARDED_PROTO")
SECURE_PROXY_SSL_HEADER = (_proxy_ssl_header, "https") if _proxy_ssl_header else None
# The proxies whose X-Forwarded-For and X-Forwarded-Proto are believed (reviewer/proxies.py): addresses
# or CIDRs of the peers Daphne sees. From anyone else those headers are dropped before Django reads them.
TRUSTED_PROXIES = env_list("TRUSTED_PROXIES", [])
for _proxy in TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_proxy, strict=False)
    except ValueError:
        raise ImproperlyConfigured(f"TRUSTED_PROXIES: {_proxy!r} is not an IP address or network") from None
# With DEBUG off, http is redirected to https and browsers are told to use https only (HSTS). The
# defaults make `manage.py check --deploy` clean; HSTS preload is a promise to browsers: keep it only for a
# domain that will always serve https (SECURE_HSTS_PRELOAD=false to opt out).
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 365 * 24 * 3600)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", not DEBUG)

CONTENT_SECURITY_POLICY = fixed_settings.CONTENT_SECURITY_POLICY  # django-csp
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"
# With DEBUG on, Daphne serves css/js from the app folders as they are (SERVE_STATIC). With DEBUG off,
# `manage.py collectstatic` writes them to STATIC_ROOT under hashed names, compressed (ServeStatic's
# manifest storage), and ServeStatic serves them from there, cached for good (reviewer/static_files.py).
SERVE_STATIC = env_bool("SERVE_STATIC", DEBUG)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if SERVE_STATIC
        else "servestatic.storage.CompressedManifestStaticFilesStorage"
    },
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "reviewer@localhost")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)  # seconds per SMTP operation (the worker's mail jobs)
# Reviewers get one e-mail digest of new proposals at most this often (approvals/worker/notifications.py).
NOTIFICATION_DIGEST_SECONDS = env_int("NOTIFICATION_DIGEST_SECONDS", 60)
# A standing grant's approvers are asked to renew it or let it lapse this long before it expires (or a
# fifth of its window when shorter; approvals/services/grants.py).
GRANT_RENEWAL_NOTICE_SECONDS = env_int("GRANT_RENEWAL_NOTICE_SECONDS", 24 * 3600)

# Intake limits: agent-provided text is untrusted and capped.
PROPOSAL_MAX_BYTES = env_int("PROPOSAL_MAX_BYTES", 64 * 1024)
# Intake quotas (approvals/services/quotas.py): the defaults of an agent's and a tenant's limits, which
# the admin may set per agent and per tenant. A token bucket per agent and per tenant: BURST proposals
# at once, refilled at PER_MINUTE; and a ceiling of open proposals (waiting for people). Over a limit
# intake answers 429 with Retry-After and stores nothing; one audit event per agent per
# QUOTA_AUDIT_WINDOW_SECONDS says it was throttled and how many were refused in the window before (and
# one per window, the same way, for the requests intake refused as invalid within the rates).
AGENT_INTAKE_BURST = env_int("AGENT_INTAKE_BURST", 60)
AGENT_INTAKE_PER_MINUTE = env_int("AGENT_INTAKE_PER_MINUTE", 120)
AGENT_OPEN_PROPOSALS = env_int("AGENT_OPEN_PROPOSALS", 500)
TENANT_INTAKE_BURST = env_int("TENANT_INTAKE_BURST", 600)
TENANT_INTAKE_PER_MINUTE = env_int("TENANT_INTAKE_PER_MINUTE", 1200)
TENANT_OPEN_PROPOSALS = env_int("TENANT_OPEN_PROPOSALS", 5000)
QUOTA_AUDIT_WINDOW_SECONDS = env_int("QUOTA_AUDIT_WINDOW_SECONDS", 300)
# What a refusal at an open-proposal ceiling asks the agent to wait (a slot frees when people decide).
QUOTA_OPEN_RETRY_AFTER_SECONDS = env_int("QUOTA_OPEN_RETRY_AFTER_SECONDS", 60)
OUTBOX_MAX_ATTEMPTS = env_int("OUTBOX_MAX_ATTEMPTS", 8)  # outbox delivery: then the message is dead-lettered
OUTBOX_BACKOFF_CAP_SECONDS = env_int("OUTBOX_BACKOFF_CAP_SECONDS", 300)
EXECUTING_RECONCILE_SECONDS = env_int("EXECUTING_RECONCILE_SECONDS", 300)  # executing this long: GetTask
PARKED_TASKS_LIST_SECONDS = env_int("PARKED_TASKS_LIST_SECONDS", 60)  # per agent, ListTasks for lost pushes
# Audit checkpoints: the sequencer signs the chain head every N events, and the worker signs any head
# that moved once its last checkpoint is T seconds old. Events after the last checkpoint (at most N, or
# T seconds of them) are what a database owner could rewrite or remove unnoticed: keep both small.
AUDIT_CHECKPOINT_EVERY = env_int("AUDIT_CHECKPOINT_EVERY", 100)
AUDIT_CHECKPOINT_SECONDS = env_int("AUDIT_CHECKPOINT_SECONDS", 60)
# Every checkpoint is also appended here (one JSON Lines file per chain): ship it off the machine.
AUDIT_CHECKPOINT_DIR = Path(env_str("AUDIT_CHECKPOINT_DIR") or DATA_DIR / "checkpoints")

# Audit exports and metrics: the only place for their defaults (audit/ reads settings.* directly).
METRICS_TOKEN = env_str("METRICS_TOKEN")  # bearer token for /metrics (Prometheus); empty: endpoint off
# Where finished exports are kept until downloaded.
AUDIT_EXPORT_DIR = Path(env_str("AUDIT_EXPORT_DIR") or DATA_DIR / "exports")
# CSV and JSON Lines of at most this many events stream straight to the browser; larger ones run in the
# background with a progress bar.
AUDIT_EXPORT_STREAM_MAX_EVENTS = env_int("AUDIT_EXPORT_STREAM_MAX_EVENTS", 20000)
# How long one call of run_pending_exports() may work before it hands the worker back.
AUDIT_EXPORT_TICK_SECONDS = float(env_str("AUDIT_EXPORT_TICK_SECONDS", "1.0"))
# A running export without progress for this long belonged to a worker that died: it is retried.
AUDIT_EXPORT_STALE_SECONDS = env_int("AUDIT_EXPORT_STALE_SECONDS", 300)
AUDIT_PDF_MAX_ROWS = env_int("AUDIT_PDF_MAX_ROWS", 2000)
AUDIT_PDF_FONT = env_str("AUDIT_PDF_FONT")  # a TTF file; empty: DejaVu or Liberation if installed
AUDIT_RUBBER_STAMP_MIN_SAMPLE = env_int("AUDIT_RUBBER_STAMP_MIN_SAMPLE", 300)
# A tenant's Prometheus counters are recomputed at most this often (and only when its chain moved).
AUDIT_METRICS_CACHE_SECONDS = env_int("AUDIT_METRICS_CACHE_SECONDS", 60)

# ---------------------------------------------------------------------------------------------------
# Outbound calls to agents: reviewer/fixed_settings.py, "Outbound calls" (the SSRF allow-list).
AGENT_ALLOWED_HOSTS = env_list("AGENT_ALLOWED_HOSTS", [])
AGENT_ALLOWED_NETWORKS = env_list("AGENT_ALLOWED_NETWORKS", [])

# ---------------------------------------------------------------------------------------------------
# Notifications and escalation (docs/notifications.md). Slack's Web API (tests point it at a stand-in);
# a workspace's bot token and signing secret are references in its row ("env:NAME" or "file:/path").
SLACK_API_BASE_URL = env_str("SLACK_API_BASE_URL", "https://slack.com/api/")
# Teams bots (approvals/notify/teams_bot.py): where Teams' signing keys are published (the Bot Framework's
# OpenID metadata) and where a bot gets its token to post and update cards; tests point both at stand-ins.
TEAMS_BOT_OPENID_METADATA_URL = env_str(
    "TEAMS_BOT_OPENID_METADATA_URL", "https://login.botframework.com/v1/.well-known/openidconfiguration"
)
TEAMS_BOT_TOKEN_URL = env_str(
    "TEAMS_BOT_TOKEN_URL", "https://login.microsoftonline.com/botframework.com/oauth2/v2.0/token"
)
# Webhooks and push share the agents' allow-list (AGENT_ALLOWED_*); http:// only for tests and development.
NOTIFY_ALLOW_HTTP = env_bool("NOTIFY_ALLOW_HTTP", False)
# The worker's calls to Slack, Teams, webhook endpoints and push services (docs/operations.md, "The
# worker"): each kind calls at most NOTIFY_THREADS targets (workspaces, channels, endpoints) at once,
# each call within these timeouts (Slack's client takes one timeout: the read one); a target whose
# call failed is skipped for NOTIFY_TARGET_BACKOFF_SECONDS, doubling while it keeps failing up to the
# cap, and what waits for it stays due (nothing is dropped).
NOTIFY_CONNECT_TIMEOUT_SECONDS = env_int("NOTIFY_CONNECT_TIMEOUT_SECONDS", 3)
NOTIFY_READ_TIMEOUT_SECONDS = env_int("NOTIFY_READ_TIMEOUT_SECONDS", 5)
NOTIFY_THREADS = env_int("NOTIFY_THREADS", 4)
NOTIFY_TARGET_BACKOFF_SECONDS = env_int("NOTIFY_TARGET_BACKOFF_SECONDS", 30)
NOTIFY_TARGET_BACKOFF_CAP_SECONDS = env_int("NOTIFY_TARGET_BACKOFF_CAP_SECONDS", 600)
# SIEM (audit/siem.py): JSON over HTTPS ("hec", "elastic", "jsonl", "cloudevents") and/or syslog
# ("tcp://…", "tls://…").
AUDIT_SIEM_HTTP_URL = env_str("AUDIT_SIEM_HTTP_URL")
AUDIT_SIEM_HTTP_FORMAT = env_str("AUDIT_SIEM_HTTP_FORMAT", "hec")
AUDIT_SIEM_HTTP_TOKEN = env_str("AUDIT_SIEM_HTTP_TOKEN")
AUDIT_SIEM_HTTP_TOKEN_FILE = env_str("AUDIT_SIEM_HTTP_TOKEN_FILE")  # preferred over the variable
AUDIT_SIEM_SYSLOG = env_str("AUDIT_SIEM_SYSLOG")
AUDIT_SIEM_CA_FILE = env_str("AUDIT_SIEM_CA_FILE")  # a private CA for the sinks' TLS; empty: the system's
# Web Push (approvals/notify/push.py): the VAPID key (PEM; empty: push is off), the contact, and the
# only push-service hosts a browser-chosen subscription endpoint may be on.
WEB_PUSH_VAPID_PRIVATE_KEY_FILE = env_str("WEB_PUSH_VAPID_PRIVATE_KEY_FILE")
WEB_PUSH_CONTACT = env_str("WEB_PUSH_CONTACT", "mailto:reviewer@localhost")
WEB_PUSH_SERVICE_HOSTS = env_list(
    "WEB_PUSH_SERVICE_HOSTS",
    ["fcm.googleapis.com", "updates.push.services.mozilla.com", ".push.apple.com", ".notify.windows.com"],
)

LOGGING = fixed_settings.logging_config(env_str("LOG_LEVEL", "INFO"))
SCIM_SERVICE_PROVIDER = fixed_settings.SCIM_SERVICE_PROVIDER  # SCIM 2.0 provisioning, under /scim/v2/
# SAML per tenant (sso/saml/; no SAML_CONFIG). Signatures are checked by xmlsec1; without it, refused.
SAML_XMLSEC_BINARY = env_str("SAML_XMLSEC_BINARY", "")  # empty: xmlsec1 on PATH
SAML_DEFAULT_BINDING = fixed_settings.SAML_DEFAULT_BINDING
SAML_SESSION_COOKIE_NAME = "saml_session"
