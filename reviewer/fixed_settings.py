"""The settings no environment variable changes, kept apart so that reviewer/settings.py stays readable:
the Content-Security-Policy, the loggers and SCIM's wiring. reviewer/settings.py imports them; it is
still the one settings module."""

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
            "axes": {"level": "WARNING"},  # every sign-in attempt at INFO
        },
    }


# SCIM 2.0 provisioning (sso/scim_*.py on django-scim2), under /scim/v2/, each tenant with its own bearer
# token (`manage.py scim_token <tenant>`; README "Single sign-on and provisioning").
SCIM_SERVICE_PROVIDER = {
    "NETLOC": "unused",  # locations are built from the request (sso.scim_adapters.base_location)
    "AUTHENTICATION_SCHEMES": [
        {
            "type": "oauthbearertoken",
            "name": "Bearer token",
            "description": "The tenant's SCIM token, sent as Authorization: Bearer <token>",
            "primary": True,
        }
    ],
    "USER_MODEL_GETTER": "sso.scim_adapters.scim_user_model",
    "USER_ADAPTER": "sso.scim_adapters.ScimUserAdapter",
    "GROUP_MODEL": "sso.models.ScimGroup",
    "GROUP_ADAPTER": "sso.scim_adapters.ScimGroupAdapter",
    "USER_FILTER_PARSER": "sso.scim_filters.UserFilterQuery",
    "GROUP_FILTER_PARSER": "sso.scim_filters.GroupFilterQuery",
    "SERVICE_PROVIDER_CONFIG_MODEL": "sso.scim_config.ServiceProviderConfig",
    "BASE_LOCATION_GETTER": "sso.scim_adapters.base_location",
    "GET_EXTRA_MODEL_FILTER_KWARGS_GETTER": "sso.scim_adapters.tenant_filter",
    "AUTH_CHECK_MIDDLEWARE": "sso.scim_auth.BearerTokenCheck",
    "SCHEMAS_GETTER": "sso.scim_schemas.published_schemas",
}
