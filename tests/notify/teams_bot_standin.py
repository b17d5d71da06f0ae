"""A local stand-in for the Bot Framework services a Teams bot talks to, none of which can be reached
from here (no network beyond loopback). It replaces:

- the Bot Framework's OpenID metadata and its JWKS (login.botframework.com): what the bot reads to
  check the tokens Teams signs; the key is published with `endorsements: ["msteams"]`, as the real one;
- the Bot Connector service as a sender: `signed(activity)` makes the `Authorization` header Teams puts
  on each activity it sends to the bot, an RS256 JWT with `iss` https://api.botframework.com, `aud` the
  bot's app id and the activity's `serviceUrl` as a claim, signed with that key;
- the token endpoint (login.microsoftonline.com/botframework.com/oauth2/v2.0/token): client credentials
  for the bot's app id and password, answering a bearer token;
- the Bot Connector service as a receiver: `POST /v3/conversations/{id}/activities` (a new card in a
  channel, answered with its activity id) and `PUT …/activities/{activity id}` (the card replaced in
  place), each refused 401 without the token it issued; it records what it received.
"""

import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

APP_ID = "00000000-0000-4000-8000-00000000b07a"
APP_PASSWORD = "bot-password-for-tests"
ISSUER = "https://api.botframework.com"
CONVERSATION = "19:finance-approvals@thread.tacv2"
KID = "standin-key-1"


class BotFrameworkStandIn:
    def __init__(self):
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.posted: list[dict] = []  # {"conversation", "activity_id", "card"}
        self.updated: list[dict] = []
        self.tokens: set[str] = set()
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, body: dict | None = None):
                data = json.dumps(body or {}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def do_GET(self):  # noqa: N802 (http.server's name)
                if self.path == "/v1/.well-known/openidconfiguration":
                    return self._answer(200, outer.metadata())
                if self.path == "/v1/.well-known/keys":
                    return self._answer(200, outer.jwks())
                return self._answer(404)

            def do_POST(self):  # noqa: N802
                body = self._body()
                if self.path == "/botframework.com/oauth2/v2.0/token":
                    return self._answer(*outer.token(parse_qs(body.decode())))
                return self._answer(*outer.connector("POST", self.path, self.headers, body))

            def do_PUT(self):  # noqa: N802
                return self._answer(*outer.connector("PUT", self.path, self.headers, self._body()))

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def service_url(self) -> str:
        return self.origin + "/"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    # --- login.botframework.com ---------------------------------------------------------------------

    def metadata(self) -> dict:
        return {
            "issuer": ISSUER,
            "authorization_endpoint": "https://invalid.botframework.com",
            "jwks_uri": self.origin + "/v1/.well-known/keys",
            "id_token_signing_alg_values_supported": ["RS256"],
            "token_endpoint_auth_methods_supported": ["private_key_jwt"],
        }

    def jwks(self) -> dict:
        key = RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        return {"keys": [{**key, "kid": KID, "use": "sig", "endorsements": ["msteams"]}]}

    # --- the connector as a sender ------------------------------------------------------------------

    def signed(self, activity: dict, *, key=None, kid: str = KID, **claims) -> str:
        """The Authorization header the Bot Connector service puts on `activity`; `claims` override."""
        now = int(time.time())
        payload = {
            "iss": ISSUER,
            "aud": APP_ID,
            "serviceUrl": activity.get("serviceUrl"),
            "nbf": now - 5,
            "exp": now + 3600,
            **claims,
        }
        token = jwt.encode(payload, key or self.key, algorithm="RS256", headers={"kid": kid})
        return f"Bearer {token}"

    def invoke(self, aad_object_id: str, verb: str, data: dict) -> dict:
        """The activity Teams sends when a person presses an Action.Execute button of the bot's card (the
        card's inputs, if any, merged into `data`)."""
        return {
            "type": "invoke",
            "name": "adaptiveCard/action",
            "id": secrets.token_hex(8),
            "channelId": "msteams",
            "serviceUrl": self.service_url,
            "from": {"id": f"29:{aad_object_id}", "aadObjectId": aad_object_id, "name": "someone"},
            "recipient": {"id": f"28:{APP_ID}"},
            "conversation": {"id": CONVERSATION, "conversationType": "channel"},
            "channelData": {"tenant": {"id": "tenant-entra-id"}},
            "value": {"action": {"type": "Action.Execute", "verb": verb, "data": data}, "trigger": "manual"},
        }

    # --- login.microsoftonline.com ------------------------------------------------------------------

    def token(self, form: dict) -> tuple[int, dict]:
        def one(name: str) -> str:
            return (form.get(name) or [""])[0]

        if (one("grant_type"), one("client_id"), one("client_secret"), one("scope")) != (
            "client_credentials",
            APP_ID,
            APP_PASSWORD,
            "https://api.botframework.com/.default",
        ):
            return 401, {"error": "invalid_client"}
        token = secrets.token_urlsafe(16)
        with self.lock:
            self.tokens.add(token)
        return 200, {"token_type": "Bearer", "expires_in": 3600, "access_token": token}

    # --- the connector as a receiver ----------------------------------------------------------------

    def connector(self, method: str, path: str, headers, body: bytes) -> tuple[int, dict]:
        scheme, _, token = (headers.get("Authorization") or "").partition(" ")
        with self.lock:
            if scheme != "Bearer" or token not in self.tokens:
                return 401, {"error": {"code": "Unauthorized"}}
        parts = path.strip("/").split("/")
        if parts[:2] != ["v3", "conversations"] or len(parts) < 4 or parts[3] != "activities":
            return 404, {}
        activity = json.loads(body)
        (attachment,) = activity["attachments"]
        assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
        record = {"conversation": unquote(parts[2]), "card": attachment["content"]}
        with self.lock:
            if method == "POST" and len(parts) == 4:
                record["activity_id"] = f"activity-{len(self.posted) + 1}"
                self.posted.append(record)
            elif method == "PUT" and len(parts) == 5:
                record["activity_id"] = unquote(parts[4])
                self.updated.append(record)
            else:
                return 404, {}
        return 200, {"id": record["activity_id"]}
