"""Static files with DEBUG off: WhiteNoise's index of `manage.py collectstatic`'s output (STATIC_ROOT)
answers /static/ under the hashed names of its manifest, compressed when the browser accepts it, cached
for good (a new release has new names). WhiteNoise speaks WSGI; this adapter asks its index and its
responder directly and sends the answer over ASGI, reading the file off the event loop, so every other
request stays on the async path (WhiteNoise's Django middleware would put each request through a
thread, and asgiref's WSGI adapter breaks under Daphne's thread-sensitive executor)."""

import asyncio
import re

from whitenoise import WhiteNoise

# ManifestStaticFilesStorage's names: "reviewer.3f2a9c1b7d4e.css".
HASHED_NAME = re.compile(r"\.[0-9a-f]{12}\.[A-Za-z0-9]+$")
CHUNK = 1 << 16


def _environ(scope) -> dict:
    """The request headers as WhiteNoise's responder reads them (WSGI names: HTTP_ACCEPT_ENCODING)."""
    environ = {"REQUEST_METHOD": scope["method"]}
    for name, value in scope.get("headers", []):
        environ["HTTP_" + name.decode("latin-1").upper().replace("-", "_")] = value.decode("latin-1")
    return environ


def with_static_files(application, *, root, prefix: str):
    """`application` with WhiteNoise answering every HTTP request under `prefix` from `root`."""
    index = WhiteNoise(
        None,
        root=str(root),
        prefix=prefix,
        immutable_file_test=lambda path, url: bool(HASHED_NAME.search(url)),
    )

    async def serve(scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(prefix):
            return await application(scope, receive, send)
        static_file = index.files.get(scope["path"])
        if static_file is None:
            await send(
                {"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]}
            )
            return await send({"type": "http.response.body", "body": b"No such static file.\n"})
        response = static_file.get_response(scope["method"], _environ(scope))
        headers = [
            (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in response.headers
        ]
        await send({"type": "http.response.start", "status": int(response.status), "headers": headers})
        if response.file is None:
            return await send({"type": "http.response.body", "body": b""})
        try:
            while chunk := await asyncio.to_thread(response.file.read, CHUNK):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            response.file.close()
        await send({"type": "http.response.body", "body": b""})

    return serve
