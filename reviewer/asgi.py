"""ASGI entry point: HTTP through Django, WebSockets through Channels (per the Channels tutorial)."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewer.settings")
# Initialise Django (apps, models) before importing anything that touches models, as
# get_asgi_application() does; the handler is Django's, run in one thread per request (http_handler.py).
django.setup(set_prefix=False)

from django.core.handlers.asgi import ASGIHandler  # noqa: E402

from reviewer.http_handler import OneThreadASGIHandler  # noqa: E402

django_asgi_app: ASGIHandler = OneThreadASGIHandler()

from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from reviewer.static_files import url_prefix as static_url_prefix  # noqa: E402
from reviewer.static_files import with_static_files  # noqa: E402

if settings.SERVE_STATIC:
    # The embedded default: css/js from the app folders as they are, no collectstatic needed.
    django_asgi_app = ASGIStaticFilesHandler(django_asgi_app)
else:
    # Production: collectstatic's hashed, compressed files, served by ServeStatic and cached for good.
    django_asgi_app = with_static_files(
        django_asgi_app, root=settings.STATIC_ROOT, prefix=static_url_prefix()
    )

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from approvals.agent_api.decision_wait import DecisionWaits  # noqa: E402
from approvals.live.origin import SameOriginValidator  # noqa: E402
from approvals.live.routing import websocket_urlpatterns  # noqa: E402
from health.probes import HealthProbes  # noqa: E402
from reviewer.overload import ConcurrencyLimit  # noqa: E402
from reviewer.proxies import TrustedProxies  # noqa: E402

# Outermost: X-Forwarded-For and -Proto count only from TRUSTED_PROXIES, for pages and sockets alike.
# Then /healthz and /readyz, answered before the limit, the host check and the sessions (health/probes.py).
application = TrustedProxies(
    HealthProbes(
        ProtocolTypeRouter(
            {
                # Decision waits are answered on the event loop, outside the limits (they hold no slot);
                # every other request takes an agent's or a person's slot, 503 + Retry-After when its
                # share is full (reviewer/overload.py).
                "http": DecisionWaits(ConcurrencyLimit(django_asgi_app)),
                # Scheme, host and port of the Origin are checked (approvals/live/origin.py), not the host.
                "websocket": SameOriginValidator(
                    AuthMiddlewareStack(URLRouter(websocket_urlpatterns))  # type: ignore[arg-type]  # approvals/live/routing.py
                ),
            }
        )
    )
)
