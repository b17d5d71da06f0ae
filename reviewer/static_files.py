"""Static files with DEBUG off: WhiteNoise serves `manage.py collectstatic`'s output (STATIC_ROOT) under
the hashed names of its manifest, compressed when the browser accepts it, and cached for good (a new
release has new names). WhiteNoise is a WSGI app: only /static/ requests take asgiref's thread hop to
it; every other request stays on the async path (a WSGI middleware in Django's stack would put every
request through a thread)."""

import re

from asgiref.wsgi import WsgiToAsgi
from whitenoise import WhiteNoise

# ManifestStaticFilesStorage's names: "reviewer.3f2a9c1b7d4e.css".
HASHED_NAME = re.compile(r"\.[0-9a-f]{12}\.[A-Za-z0-9]+$")


def _not_found(environ, start_response):
    start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
    return [b"No such static file.\n"]


def with_static_files(application, *, root, prefix: str):
    """`application` with WhiteNoise answering every HTTP request under `prefix` from `root`."""
    files = WsgiToAsgi(
        WhiteNoise(
            _not_found,
            root=str(root),
            prefix=prefix,
            immutable_file_test=lambda path, url: bool(HASHED_NAME.search(url)),
        )
    )

    async def serve(scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith(prefix):
            return await files(scope, receive, send)
        return await application(scope, receive, send)

    return serve
