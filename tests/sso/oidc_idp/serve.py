"""`python -m tests.sso.oidc_idp.serve PORT`: migrate the provider's own database, then serve it on
127.0.0.1:PORT (threads: the relying party calls the token endpoint while a browser waits)."""

import os
import sys
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        sys.stderr.write("idp: " + (format % args) + "\n")


def main() -> None:
    port = int(sys.argv[1])
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sso.oidc_idp.settings"
    import django
    from django.core.management import call_command
    from django.core.wsgi import get_wsgi_application

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    server = make_server(
        "127.0.0.1", port, get_wsgi_application(), server_class=_ThreadingServer, handler_class=_QuietHandler
    )
    sys.stderr.write(f"idp: serving on 127.0.0.1:{port}\n")
    server.serve_forever()


if __name__ == "__main__":
    main()
