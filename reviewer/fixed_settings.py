"""The settings no environment variable changes, kept apart so that reviewer/settings.py stays readable:
the Content-Security-Policy, the loggers, SCIM's wiring and SAML's binding, and the notes on the pool
and the outbound allow-list. reviewer/settings.py imports them; it is still the one settings module."""

# Content-Security-Policy (django-csp): scripts and styles only from this origin, no inline script at
# all (the pages have none; htmx's own indicator styles are off in base.html), no inline style either (no
# page has a style attribute or a <style> block, so one injected into a page does nothing), no plugins,
# no framing, forms post only here. Scripts still set styles through the DOM (element.style), which CSP
# allows. connect-src 'self' covers the page's own WebSocket.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}


def redis_channel_layers(url: str, prefix: str, socket_timeout: int = 30) -> dict:
    """CHANNEL_LAYERS on the Redis at `url` (REDIS_URL), keys under `prefix` (also the fault tests' own
    Redis, so that they test this configuration).

    Every open WebSocket, and each process's page channel (approvals/live/process_channel.py), waits on a
    blocking pop (BZPOPMIN) that Redis answers after at most 5 s (channels-redis's brpop_timeout).
    redis-py 8 made socket_timeout default to 5 s, so the read raced the pop and idle sockets died with
    1011 (channels_redis#422, redis-py#4091). The read timeout must exceed the pop: 30 s never fires
    against a live Redis, yet a half-open connection (a Redis that vanished without closing it) is still
    noticed. Connecting keeps a short timeout, so a Redis that is restarting is retried (sockets
    reconnect) instead of hanging them."""
    host = {
        "address": url,
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": 5,
        "socket_keepalive": True,
    }
    return {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [host], "prefix": prefix},
        }
    }


def logging_config(level: str) -> dict:
    """Django's LOGGING: plain lines on the console at `level` (LOG_LEVEL), chatty libraries quieter."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
        "root": {"handlers": ["console"], "level": level},
        # The a2a SDK logs whole agent cards at INFO on every fetch.
        "loggers": {
            "httpx": {"level": "WARNING"},
            "daphne": {"level": "WARNING"},
            "a2a": {"level": "WARNING"},
            # Every attempt at INFO and every failure at WARNING, each with the username as typed: a log
            # line outlives erase_person. Failures and lockouts are in axes' tables (erasable) and the
            # trail (sign_in.throttled, by pseudonym).
            "axes": {"level": "ERROR"},
            "xmlschema": {"level": "WARNING"},  # pysaml2's schemas, announced at INFO on every start
            "saml2": {"level": "WARNING"},  # pysaml2 logs whole assertions at INFO
        },
    }


# SCIM 2.0 provisioning (sso/scim/ on django-scim2), under /scim/v2/, each tenant with its own bearer
# token (`manage.py scim_token <tenant>`; README "Single sign-on and provisioning").
SCIM_SERVICE_PROVIDER = {
    "NETLOC": "unused",  # locations are built from the request (sso.scim.adapters.base_location)
    "AUTHENTICATION_SCHEMES": [
        {
            "type": "oauthbearertoken",
            "name": "Bearer token",
            "description": "The tenant's SCIM token, sent as Authorization: Bearer <token>",
            "primary": True,
        }
    ],
    "USER_MODEL_GETTER": "sso.scim.adapters.scim_user_model",
    "USER_ADAPTER": "sso.scim.adapters.ScimUserAdapter",
    "GROUP_MODEL": "sso.models.ScimGroup",
    "GROUP_ADAPTER": "sso.scim.adapters.ScimGroupAdapter",
    "USER_FILTER_PARSER": "sso.scim.filters.UserFilterQuery",
    "GROUP_FILTER_PARSER": "sso.scim.filters.GroupFilterQuery",
    "SERVICE_PROVIDER_CONFIG_MODEL": "sso.scim.config.ServiceProviderConfig",
    "BASE_LOCATION_GETTER": "sso.scim.adapters.base_location",
    "GET_EXTRA_MODEL_FILTER_KWARGS_GETTER": "sso.scim.adapters.tenant_filter",
    "AUTH_CHECK_MIDDLEWARE": "sso.scim.auth.BearerTokenCheck",
    "SCHEMAS_GETTER": "sso.scim.schemas.published_schemas",
}

# The SAML AuthnRequest goes as a link (HTTP-Redirect): the sign-in pages' CSP allows no inline form posting.
SAML_DEFAULT_BINDING = "urn:oasis:names:tc:SAML:2.0:bindings:HTTP-Redirect"

# Database pool (DB_POOL_* in reviewer/settings.py).
# On PostgreSQL every process draws its connections from a bounded psycopg pool (Django's "pool" option;
# it needs CONN_MAX_AGE 0, which returns a request's connection to the pool when the request ends).
# A Daphne needs AGENT_CONCURRENCY_LIMIT + PEOPLE_CONCURRENCY_LIMIT for requests,
# OUTBOX_DIRECT_SEND_THREADS for the continuations it sends after commit, one for the after-commit
# thread, DECISION_WAIT_READS for the decision waits' reads, plus what its WebSockets use: their
# database work (channels' database_sync_to_async) runs on one shared thread per process, so one
# connection, and two more are slack. The overload limits answer 503 before the pool is empty, so
# nothing waits on it in practice; should it be empty, a request waits DB_POOL_TIMEOUT seconds for a
# connection (then 500). A connection leaving the pool is checked only when it may have died
# (lib/storage/pool_checks.py, DB_POOL_CHECK_IDLE_SECONDS).
# PostgreSQL's max_connections must hold N Daphnes x DB_POOL_MAX_SIZE + M workers x (DB_POOL_MIN_SIZE
# + 1 for LISTEN) + the admin's few (README "Running several processes"). DB_POOL_MAX_SIZE=0: no pool.

# Outbound calls (AGENT_ALLOWED_* in reviewer/settings.py).
# Outbound calls to agents (lib/outbound.py). Reviewer calls an agent's card URL and A2A
# interface with the agent's credentials, so a card URL must not reach anything else (SSRF). A call
# goes out only when, after DNS resolution, every address of the host is allowed: the host name is in
# AGENT_ALLOWED_HOSTS ("agents.example.com", or ".example.com" for its subdomains) and the address is
# public, or the address is inside AGENT_ALLOWED_NETWORKS (CIDRs; the only way to allow private or
# loopback addresses, e.g. "127.0.0.0/8,::1/128" for the demo). Link-local and cloud metadata
# addresses are never allowed. Both empty: no outbound call at all (fail closed).
