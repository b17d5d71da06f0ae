"""base64url without padding (RFC 7515 §2, RFC 4648 §5): how JWKs, JWS parts, WebAuthn fields, signed
manifests and our list cursors write bytes as text. Standard library only: the offline audit verifier
(audit/verify/) imports it without Django. The reviewer-gate package keeps its own copy in
`reviewer_gate.testing` because it is installed without Reviewer and cannot import this module."""

import base64


def encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def decode(text: str) -> bytes:
    """Raises ValueError (binascii.Error) for text that is not base64url."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
