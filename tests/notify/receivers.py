"""Local stand-ins for the services Reviewer sends to, for tests: none of them can be reached from here
(no network beyond loopback), so each is a loopback server that speaks the service's side of the
protocol and checks what it receives with the protocol's own reference code:

- `PushService`: a Web Push service (RFC 8030). It checks the VAPID authorization (RFC 8292: an ES256
  JWT whose `aud` is the push service's origin, with the sender's public key as `k`) and decrypts the
  aes128gcm body (RFC 8291) with http_ece and the subscription's private key and auth secret, as the
  browser would.
- `WebhookReceiver`: a tenant's webhook endpoint verifying each request with the `standardwebhooks`
  Webhook.verify (signature and timestamp), as a receiver built on the spec's library does.
- `HttpCollector`: a SIEM HTTP collector (Splunk HEC / Elastic bulk / JSON lines), recording bodies.
- `SyslogCollector`: an RFC 5424 syslog receiver over TCP with RFC 6587 octet-counting framing.
- `HangingServer`: a service that accepts connections and never answers (Slack's API or a webhook
  endpoint behind a stuck proxy), real TCP: it records each connection and when the caller gave up on
  it; `HangingWebhookReceiver` hangs on its first connections, then answers as `WebhookReceiver`.
"""

import base64
import json
import math
import os
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import http_ece
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from standardwebhooks import Webhook, WebhookVerificationError


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class HeldConnection:
    """A connection the server accepted and never answers: `given_up` is set once the caller closed it
    (its timeout ended, or it stopped)."""

    socket: socket.socket
    given_up: threading.Event = field(default_factory=threading.Event)


class Hanging(ThreadingHTTPServer):
    """A ThreadingHTTPServer whose first `hang` connections are accepted, read, and never answered
    (socketserver's `finish_request` hook); the later ones go to its handler as usual."""

    daemon_threads = True
    hang: float = math.inf

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.held: list[HeldConnection] = []
        self.held_lock = threading.Lock()

    def finish_request(self, request, client_address):
        with self.held_lock:
            hold = len(self.held) < self.hang
            if hold:
                held = HeldConnection(request)
                self.held.append(held)
        if not hold:
            super().finish_request(request, client_address)
            return
        try:
            while request.recv(65536):  # the request arrives; no answer ever leaves
                pass
        except OSError:
            pass
        held.given_up.set()

    def first_held(self) -> HeldConnection | None:
        with self.held_lock:
            return self.held[0] if self.held else None

    def release(self) -> None:
        """Close every held connection from this side (teardown)."""
        with self.held_lock:
            for held in self.held:
                try:
                    held.socket.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class HangingServer:
    """A loopback service that accepts every connection and never answers."""

    def __init__(self):
        self.server = Hanging(("127.0.0.1", 0), BaseHTTPRequestHandler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self):
        self.server.release()
        self.server.shutdown()
        self.server.server_close()


class LoopbackServer:
    """A loopback HTTP server whose POSTs go to `self.handle(path, headers, body)`, which answers a
    status, or a (status, JSON body bytes) pair."""

    server_class: type[ThreadingHTTPServer] = ThreadingHTTPServer

    def __init__(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                answer = outer.handle(self.path, dict(self.headers.items()), body)
                status, data = answer if isinstance(answer, tuple) else (answer, b"")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = self.server_class(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.lock = threading.Lock()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self):
        if isinstance(self.server, Hanging):
            self.server.release()
        self.server.shutdown()
        self.server.server_close()

    def handle(self, path, headers, body):
        raise NotImplementedError


class PushService(LoopbackServer):
    """One push service holding one browser subscription (its keys made here, as a browser makes them)."""

    def __init__(self, vapid_public_key: ec.EllipticCurvePublicKey):
        super().__init__()
        self.vapid_public_key = vapid_public_key
        self.private_key = ec.generate_private_key(ec.SECP256R1())
        self.auth_secret = os.urandom(16)
        self.delivered: list[dict] = []
        self.refused: list[str] = []
        self.status = 201

    def subscription(self, path: str = "/push/device-1") -> dict:
        public = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return {
            "endpoint": self.origin + path,
            "keys": {"p256dh": b64url(public), "auth": b64url(self.auth_secret)},
        }

    def handle(self, path, headers, body) -> int:
        headers = {k.lower(): v for k, v in headers.items()}
        authorization = headers.get("authorization", "")
        try:
            scheme, params = authorization.split(" ", 1)
            fields = dict(part.strip().split("=", 1) for part in params.split(","))
            sent_key = b64url_decode(fields["k"])
            expected = self.vapid_public_key.public_bytes(
                serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
            )
            assert scheme == "vapid" and sent_key == expected
            claims = jwt.decode(
                fields["t"], self.vapid_public_key, algorithms=["ES256"], audience=self.origin
            )
            assert claims["sub"].startswith("mailto:")
        except Exception as error:  # the push service refuses an unsigned or wrongly signed request
            with self.lock:
                self.refused.append(f"vapid: {error!r}")
            return 401
        if headers.get("content-encoding") != "aes128gcm":
            return 415
        plain = http_ece.decrypt(
            body, private_key=self.private_key, auth_secret=self.auth_secret, version="aes128gcm"
        )
        with self.lock:
            self.delivered.append({"path": path, "ttl": headers.get("ttl"), "payload": json.loads(plain)})
        return self.status


class WebhookReceiver(LoopbackServer):
    def __init__(self, secret: str = ""):
        super().__init__()
        self.secret = secret
        self.verified: list[dict] = []
        self.refused: list[str] = []
        self.status = 204

    def handle(self, path, headers, body) -> int:
        headers = {k.lower(): v for k, v in headers.items()}
        try:
            event = Webhook(self.secret).verify(body, headers)
        except WebhookVerificationError as error:
            with self.lock:
                self.refused.append(str(error))
            return 401
        with self.lock:
            if self.status < 300:
                self.verified.append(
                    {"id": headers["webhook-id"], "event": event, "headers": headers, "body": body}
                )
        return self.status


class HangingWebhookReceiver(WebhookReceiver):
    """A webhook endpoint that hangs on its first connection (accepts it, never answers), then answers
    every later one as a working endpoint does."""

    class server_class(Hanging):  # noqa: N801 (the name LoopbackServer looks up)
        hang = 1


class HttpCollector(LoopbackServer):
    def __init__(self):
        super().__init__()
        self.requests: list[tuple[dict, bytes]] = []
        self.status = 200

    def handle(self, path, headers, body):
        with self.lock:
            if self.status < 300:
                self.requests.append(({k.lower(): v for k, v in headers.items()}, body))
        if path.endswith("/_bulk"):  # Elastic answers the bulk API with per-item results
            return self.status, json.dumps({"errors": False, "items": []}).encode()
        return self.status

    def lines(self) -> list[dict]:
        return [json.loads(line) for _, body in self.requests for line in body.decode().splitlines() if line]


class SyslogCollector:
    """Reads RFC 6587 octet-counted RFC 5424 messages from TCP connections."""

    def __init__(self):
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.messages: list[bytes] = []
        self.lock = threading.Lock()
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def address(self) -> str:
        return f"tcp://127.0.0.1:{self.socket.getsockname()[1]}"

    def _serve(self):
        while not self._stop:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            with connection:
                buffer = b""
                while chunk := connection.recv(65536):
                    buffer += chunk
                while buffer:
                    length, rest = buffer.split(b" ", 1)
                    size = int(length)
                    with self.lock:
                        self.messages.append(rest[:size])
                    buffer = rest[size:]

    def stop(self):
        self._stop = True
        self.socket.close()
