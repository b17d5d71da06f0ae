"""A software passkey for tests without a browser: it answers WebAuthn options the way a platform
authenticator does (ES256 key, "none" attestation, user present and verified, a signature counter), so
the server's real checks (accounts/passkeys.py, py_webauthn) run on real signatures. The browser test
uses Chromium's own virtual authenticator instead."""

import base64
import hashlib
import json
import os
from datetime import timedelta

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from django.conf import settings
from django.utils import timezone
from django_otp_webauthn.models import WebAuthnCredential

from accounts import devices, factors, passkeys

UP, UV, AT = 0x01, 0x04, 0x40


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SoftAuthenticator:
    def __init__(self, origin: str | None = None):
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.credential_id = os.urandom(16)
        self.sign_count = 0
        self.user_handle = b""
        self.origin = origin

    def _origin(self) -> str:
        return self.origin or passkeys.origins()[0]

    def _rp_hash(self, rp_id: str) -> bytes:
        return hashlib.sha256(rp_id.encode()).digest()

    def _client_data(self, kind: str, challenge: str) -> bytes:
        return json.dumps(
            {"type": kind, "challenge": challenge, "origin": self._origin(), "crossOrigin": False}
        ).encode()

    def _cose_public_key(self) -> bytes:
        numbers = self.key.public_key().public_numbers()
        return cbor2.dumps(
            {1: 2, 3: -7, -1: 1, -2: numbers.x.to_bytes(32, "big"), -3: numbers.y.to_bytes(32, "big")}
        )

    def create(self, options: dict) -> dict:
        """The answer to navigator.credentials.create(options), as PublicKeyCredential.toJSON() gives it."""
        self.user_handle = unb64url(options["user"]["id"])
        auth_data = (
            self._rp_hash(options["rp"]["id"])
            + bytes([UP | UV | AT])
            + self.sign_count.to_bytes(4, "big")
            + bytes(16)  # AAGUID
            + len(self.credential_id).to_bytes(2, "big")
            + self.credential_id
            + self._cose_public_key()
        )
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data})
        return {
            "id": b64url(self.credential_id),
            "rawId": b64url(self.credential_id),
            "type": "public-key",
            "authenticatorAttachment": "platform",
            "clientExtensionResults": {"credProps": {"rk": True}},
            "response": {
                "clientDataJSON": b64url(self._client_data("webauthn.create", options["challenge"])),
                "attestationObject": b64url(attestation),
                "transports": ["internal"],
            },
        }

    def get(self, options: dict) -> dict:
        """The answer to navigator.credentials.get(options): the counter goes up, the challenge signed."""
        self.sign_count += 1
        auth_data = self._rp_hash(options["rpId"]) + bytes([UP | UV]) + self.sign_count.to_bytes(4, "big")
        client_data = self._client_data("webauthn.get", options["challenge"])
        signature = self.key.sign(auth_data + hashlib.sha256(client_data).digest(), ec.ECDSA(hashes.SHA256()))
        return {
            "id": b64url(self.credential_id),
            "rawId": b64url(self.credential_id),
            "type": "public-key",
            "authenticatorAttachment": "platform",
            "clientExtensionResults": {},
            "response": {
                "clientDataJSON": b64url(client_data),
                "authenticatorData": b64url(auth_data),
                "signature": b64url(signature),
                "userHandle": b64url(self.user_handle),
            },
        }


def register_passkey(user, name: str = "laptop", *, established: bool = True) -> SoftAuthenticator:
    """A passkey registered for `user` through the services, as Your devices does after the person
    confirmed with their strongest factor. `established`: one they have had for longer than the cool-off
    (its creation time moved back); otherwise a passkey added just now, in its cool-off."""
    authenticator = SoftAuthenticator()
    answer = authenticator.create(passkeys.registration_options(user))
    confirmed = factors.Confirmation(factors.PASSKEY, timezone.now())
    device = devices.register_passkey(user, answer=answer, name=name, confirmation=confirmed)
    if established:
        long_ago = timezone.now() - timedelta(seconds=settings.PASSKEY_COOL_OFF_SECONDS + 1)
        WebAuthnCredential.objects.filter(pk=device.pk).update(created_at=long_ago)
    return authenticator
