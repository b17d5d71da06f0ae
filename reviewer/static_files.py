"""Static files with DEBUG off: ServeStatic (WhiteNoise's ASGI successor) answers /static/ from
`manage.py collectstatic`'s output (STATIC_ROOT) under the hashed names of its manifest, compressed when
the browser accepts it, cached for good (a new release has new names). It speaks ASGI itself and reads
each file off the event loop, so every other request stays on the async path (WhiteNoise's and
ServeStatic's Django middleware would put each static request through the middleware chain's thread).
A name under the prefix that ServeStatic does not have is its 404, never a request to Django."""

from django.conf import settings
from servestatic import ServeStaticASGI

# ManifestStaticFilesStorage's names: "reviewer.3f2a9c1b7d4e.css".
HASHED_NAME = r"\.[0-9a-f]{12}\.[A-Za-z0-9]+$"


def url_prefix() -> str:
    """The path prefix of static files ("/static/"), from STATIC_URL."""
    return "/" + settings.STATIC_URL.strip("/") + "/"


def with_static_files(application, *, root, prefix: str):
    """`application` with ServeStatic answering every HTTP request under `prefix` from `root`."""
    # No application behind ServeStatic: a name it does not have gets its own 404.
    static_files = ServeStaticASGI(None, root=str(root), prefix=prefix, immutable_file_test=HASHED_NAME)

    async def serve(scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith(prefix):
            return await static_files(scope, receive, send)
        return await application(scope, receive, send)

    return serve
