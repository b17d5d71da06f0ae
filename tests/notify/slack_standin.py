"""A local stand-in for Slack's Web API, for tests: Slack cannot be reached from here (no network beyond
loopback), so Reviewer's real client (slack_sdk's WebClient, pointed at this server by
settings.SLACK_API_BASE_URL) talks to this server instead. It implements the methods Reviewer calls
(chat.postMessage, chat.update, views.open) as Slack documents them: a JSON body, the bot token as a
Bearer header, an `{"ok": ...}` answer with `channel` and `ts`, and `invalid_auth` for a wrong token.
It records every call so a test can assert what Slack was asked to show.
"""

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BOT_TOKEN = "xoxb-test-bot-token"


class SlackStandIn:
    def __init__(self, token: str = BOT_TOKEN):
        self.token = token
        self.calls: list[tuple[str, dict]] = []
        self.messages: dict[tuple[str, str], dict] = {}  # (channel, ts) -> the message as last set
        self._ts = itertools.count(1)
        self._lock = threading.Lock()
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                method = self.path.rsplit("/", 1)[-1]
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_form": raw.decode()}
                answer = standin.answer(method, self.headers.get("Authorization", ""), body)
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/"

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def answer(self, method: str, authorization: str, body: dict) -> dict:
        with self._lock:
            self.calls.append((method, body))
            if authorization != f"Bearer {self.token}":
                return {"ok": False, "error": "invalid_auth"}
            if method == "chat.postMessage":
                channel = body.get("channel", "")
                if not channel:
                    return {"ok": False, "error": "channel_not_found"}
                # A message to a user id lands in the bot's direct-message channel with them.
                posted = "D" + channel[1:] if channel.startswith("U") else channel
                ts = f"1700000000.{next(self._ts):06d}"
                self.messages[(posted, ts)] = body
                return {"ok": True, "channel": posted, "ts": ts, "message": {"text": body.get("text")}}
            if method == "chat.update":
                key = (body.get("channel", ""), body.get("ts", ""))
                if key not in self.messages:
                    return {"ok": False, "error": "message_not_found"}
                self.messages[key] = {**self.messages[key], **body}
                return {"ok": True, "channel": key[0], "ts": key[1]}
            if method == "views.open":
                if not body.get("trigger_id") or not isinstance(body.get("view"), dict):
                    return {"ok": False, "error": "invalid_arguments"}
                return {"ok": True, "view": {"id": "V1", **body["view"]}}
            return {"ok": False, "error": "unknown_method"}

    def calls_to(self, method: str) -> list[dict]:
        return [body for name, body in self.calls if name == method]
