"""A fake payments service that keeps refunds idempotent and can lose a response on purpose.

    python -m examples.downstream --port 8002

- `POST /refunds` with header `Idempotency-Key` and JSON `{"order_id", "amount", "currency"}` records
  the refund and answers 201 `{"transaction_id", ...}`. The same key again answers 200 with the SAME
  transaction and no second effect; the same key with a different body answers 422.
- `GET /refunds/<key>` answers 200 with the refund made under that key, or 404.
- `GET /refunds` lists every refund (tests count effects with it).
- `POST /control` `{"drop_next_response": true}` makes the next `POST /refunds` commit the refund and
  then close the connection without answering: the caller cannot know whether it happened.
  `{"reject_next": true}` makes the next `POST /refunds` answer 422 without committing anything.
  `{"delay_next_seconds": 1.5}` holds the next `POST /refunds` that long before committing it.

Standard library only (http.server in a thread), bound to loopback.
"""

import argparse
import json
import logging
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

logger = logging.getLogger("examples.downstream")


class PaymentsLedger:
    """The service's state: refunds by idempotency key, and the fault switches."""

    def __init__(self):
        self.lock = threading.Lock()
        self.refunds: dict[str, dict] = {}
        self.post_count = 0
        self.drop_next_response = False
        self.reject_next = False
        self.delay_next_seconds = 0.0

    def refund(self, key: str, order_id: str, amount: str, currency: str) -> tuple[int, dict]:
        """(HTTP status, body). Committing and answering are one step under the lock."""
        with self.lock:
            self.post_count += 1
            if self.reject_next:
                self.reject_next = False
                return 422, {"error": {"code": "refund_declined", "message": "the card issuer declined"}}
            request = {"order_id": order_id, "amount": amount, "currency": currency}
            existing = self.refunds.get(key)
            if existing is not None:
                if {name: existing[name] for name in request} != request:
                    return 422, {
                        "error": {
                            "code": "idempotency_key_reused",
                            "message": "this key was used for another refund",
                        }
                    }
                return 200, existing
            refund = {"transaction_id": f"txn_{uuid.uuid4().hex[:16]}", "idempotency_key": key, **request}
            self.refunds[key] = refund
            return 201, refund

    def take_delay(self) -> float:
        with self.lock:
            delay, self.delay_next_seconds = self.delay_next_seconds, 0.0
            return delay

    def take_drop_flag(self) -> bool:
        with self.lock:
            drop, self.drop_next_response = self.drop_next_response, False
            return drop


def _handler_for(ledger: PaymentsLedger):
    class Handler(BaseHTTPRequestHandler):
        server_version = "FakePayments/1"

        def log_message(self, format, *args):  # noqa: A002 - the base class names it so
            logger.debug("%s " + format, self.address_string(), *args)

        def _read_json(self) -> dict | None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                return None
            return body if isinstance(body, dict) else None

        def _send(self, status: int, body) -> None:
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self):  # noqa: N802 - http.server's naming
            if self.path == "/refunds":
                with ledger.lock:
                    self._send(
                        200, {"refunds": list(ledger.refunds.values()), "post_count": ledger.post_count}
                    )
            elif self.path.startswith("/refunds/"):
                key = unquote(self.path.removeprefix("/refunds/"))
                with ledger.lock:
                    refund = ledger.refunds.get(key)
                if refund is None:
                    self._send(404, {"error": {"code": "not_found", "message": "no refund with this key"}})
                else:
                    self._send(200, refund)
            else:
                self._send(404, {"error": {"code": "not_found", "message": self.path}})

        def do_POST(self):  # noqa: N802 - http.server's naming
            body = self._read_json()
            if body is None:
                self._send(400, {"error": {"code": "bad_json", "message": "expected a JSON object"}})
            elif self.path == "/control":
                with ledger.lock:
                    ledger.drop_next_response = bool(
                        body.get("drop_next_response", ledger.drop_next_response)
                    )
                    ledger.reject_next = bool(body.get("reject_next", ledger.reject_next))
                    ledger.delay_next_seconds = float(
                        body.get("delay_next_seconds", ledger.delay_next_seconds)
                    )
                self._send(200, {"ok": True})
            elif self.path == "/refunds":
                self._post_refund(body)
            else:
                self._send(404, {"error": {"code": "not_found", "message": self.path}})

        def _post_refund(self, body: dict) -> None:
            key = self.headers.get("Idempotency-Key", "")
            fields = [body.get(name) for name in ("order_id", "amount", "currency")]
            if not key or not all(isinstance(value, str) and value for value in fields):
                self._send(
                    400,
                    {
                        "error": {
                            "code": "bad_request",
                            "message": "Idempotency-Key and order_id, amount, currency required",
                        }
                    },
                )
                return
            delay = ledger.take_delay()
            if delay:
                time.sleep(min(delay, 30))  # a slow bank: the refund is in flight, not yet committed
            status, answer = ledger.refund(key, *fields)
            if status in (200, 201) and ledger.take_drop_flag():
                # The refund is committed; the caller never hears about it.
                logger.info("dropping the response for idempotency key %s", key)
                self.close_connection = True
                return
            self._send(status, answer)

    return Handler


class FakePaymentsServer:
    """The service on a loopback port, in a background thread. `port=0` picks a free port."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.ledger = PaymentsLedger()
        self.httpd = ThreadingHTTPServer((host, port), _handler_for(self.ledger))
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-payments", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakePaymentsServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m examples.downstream", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8002)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    server = FakePaymentsServer(args.host, args.port)
    print(f"fake payments service on {server.url}", flush=True)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()


if __name__ == "__main__":
    main()
