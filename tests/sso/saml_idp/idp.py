"""A SAML 2.0 identity provider built with pysaml2's own Server, served over WSGI on a loopback port (a
thread of the test process, stopped after its module). It stands in for Okta, Entra ID, Google or
Keycloak, which cannot be reached from here: it answers an AuthnRequest (HTTP-Redirect binding) with a
signed assertion for the person the test names, as an auto-posting HTML form to the request's assertion
consumer URL, like a provider's page after its sign-in.

Besides good answers it makes the bad ones a test asks for (`variant`): an unsigned assertion, one for
another audience, one whose Recipient is another service, one signed by another key under this issuer
(forged), one from another provider altogether (unknown issuer), and one signed with SHA-1 (pysaml2's
own default, which real providers have left: good answers here are signed with RSA-SHA256).
"""

import base64
import datetime
import html
import re
import tempfile
import threading
from pathlib import Path
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

import saml2
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from saml2.config import IdPConfig
from saml2.metadata import entity_descriptor
from saml2.saml import NAMEID_FORMAT_PERSISTENT, SCM_BEARER, NameID
from saml2.server import Server
from saml2.xmldsig import DIGEST_SHA1, DIGEST_SHA256, SIG_RSA_SHA1, SIG_RSA_SHA256

XMLSEC = "/usr/bin/xmlsec1"
ELSEWHERE = "http://127.0.0.1:9/another-service"


def _keypair(folder: Path, name: str) -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    key_path, cert_path = folder / f"{name}.key", folder / f"{name}.crt"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return str(key_path), str(cert_path)


def _server(entity_id: str, key: tuple[str, str]) -> Server:
    config = IdPConfig()
    config.load(
        {
            "entityid": entity_id,
            "xmlsec_binary": XMLSEC,
            "key_file": key[0],
            "cert_file": key[1],
            "metadata": {},
            "service": {
                "idp": {
                    "endpoints": {
                        "single_sign_on_service": [(f"{entity_id}/sso/redirect", saml2.BINDING_HTTP_REDIRECT)]
                    },
                    "name_id_format": [NAMEID_FORMAT_PERSISTENT],
                    "policy": {"default": {"lifetime": {"minutes": 5}, "attribute_restrictions": None}},
                }
            },
        }
    )
    server = Server(config=config)
    # Reviewer's metadata is not loaded here (the test client's host is not reachable over HTTP); it asks
    # for no encrypted assertions, which is all pysaml2 would look up there.
    server.has_encrypt_cert_in_metadata = lambda entity_id: False
    return server


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


class SamlIdentityProvider:
    """The provider at http://<host>:<port>/idp, listening on 127.0.0.1; `people` maps a user name to
    (NameID, attributes). A browser test names it by another host name than Reviewer's ("localhost"
    against 127.0.0.1), so its answer reaches Reviewer as a cross-site POST, as a real provider's does.
    A request that names no `user` answers for `signed_in`, the person signed in at the provider."""

    def __init__(self, host: str = "127.0.0.1"):
        self.folder = Path(tempfile.mkdtemp(prefix="reviewer-saml-idp-"))
        self.httpd = make_server("127.0.0.1", 0, self.app, handler_class=_Quiet)
        self.entity_id = f"http://{host}:{self.httpd.server_port}/idp"
        self.signed_in = ""
        own_key, other_key = _keypair(self.folder, "idp"), _keypair(self.folder, "other")
        self.server = _server(self.entity_id, own_key)
        self.forger = _server(self.entity_id, other_key)  # this issuer's name, another key
        self.stranger = _server(f"http://127.0.0.1:{self.httpd.server_port}/other-idp", other_key)
        self.people: dict[str, tuple[str, dict]] = {}
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> "SamlIdentityProvider":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def metadata(self) -> str:
        return str(entity_descriptor(self.server.config))

    def add_person(self, username: str, name_id: str, *, email: str, groups=()) -> None:
        self.people[username] = (name_id, {"email": [email], "groups": list(groups)})

    def app(self, environ, start_response):
        query = {key: values[0] for key, values in parse_qs(environ.get("QUERY_STRING", "")).items()}
        if environ["PATH_INFO"] != "/idp/sso/redirect" or "SAMLRequest" not in query:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found"]
        request = self.server.parse_authn_request(query["SAMLRequest"], saml2.BINDING_HTTP_REDIRECT).message
        acs = request.assertion_consumer_service_url
        body = self.answer(request, query.get("user") or self.signed_in, query.get("variant", ""))
        # Posted by the page itself once loaded, as providers' pages do.
        page = (
            '<body onload="document.forms[0].submit()">'
            f'<form method="post" action="{html.escape(acs)}">'
            f'<input type="hidden" name="SAMLResponse" value="{body}">'
            f'<input type="hidden" name="RelayState" value="{html.escape(query.get("RelayState", ""))}">'
            "</form></body>"
        )
        start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
        return [page.encode()]

    def answer(self, request, username: str, variant: str) -> str:
        name_id, attributes = self.people[username]
        acs = request.assertion_consumer_service_url
        audience = request.issuer.text
        arguments = {
            "identity": attributes,
            "in_response_to": request.id,
            "destination": acs,
            "sp_entity_id": ELSEWHERE if variant == "wrong_audience" else audience,
            "name_id": NameID(format=NAMEID_FORMAT_PERSISTENT, text=name_id),
            "userid": username,
            "sign_assertion": variant != "unsigned",
            "sign_alg": SIG_RSA_SHA1 if variant == "sha1" else SIG_RSA_SHA256,
            "digest_alg": DIGEST_SHA1 if variant == "sha1" else DIGEST_SHA256,
            "sign_response": False,
            "authn": {"class_ref": saml2.saml.AUTHN_PASSWORD_PROTECTED, "authn_auth": self.entity_id},
        }
        if variant == "wrong_recipient":
            confirmation = {"in_response_to": request.id, "recipient": ELSEWHERE}
            arguments["farg"] = {
                "assertion": {
                    "subject": {
                        "subject_confirmation": {
                            "method": SCM_BEARER,
                            "subject_confirmation_data": confirmation,
                        }
                    }
                }
            }
        server = {"forged": self.forger, "unknown_issuer": self.stranger}.get(variant, self.server)
        response = server.create_authn_response(**arguments)
        return base64.b64encode(str(response).encode()).decode()


def posted_form(page: str) -> tuple[str, dict]:
    """The consumer URL and fields of the provider's auto-posting form."""
    action = html.unescape(re.search(r'<form method="post" action="([^"]+)"', page).group(1))
    fields = {name: html.unescape(value) for name, value in re.findall(r'name="(\w+)" value="([^"]*)"', page)}
    return action, fields
