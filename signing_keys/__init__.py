"""Ed25519 signing keys: decisions and audit checkpoints are signed with the active key.

Private keys are files (one PEM per key id in SIGNING_KEY_DIR) or one PEM given in the environment;
never rows in the database, never logged. Rotation writes a new key file; the old key is marked
retired (a `<kid>.retired` file holding the time) and stays in the JWKS until every token it can have
signed has expired. Pruning then deletes its private half and keeps its public half (`<kid>.pub`, out
of the JWKS), because audit checkpoints it signed must still verify. No Django models are imported
here: approvals/ (decision tokens) and audit/ (checkpoints, bundles) both import it.
"""

import functools
import hashlib
import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.utils import timezone

from lib import base64url


@dataclass(frozen=True)
class SigningKey:
    kid: str
    private_key: Ed25519PrivateKey | None
    public_key: Ed25519PublicKey
    retired_at: datetime | None = None

    def signer(self) -> Ed25519PrivateKey:
        """The private half, to sign with; a key read without one (a retired, published key) cannot sign."""
        if self.private_key is None:
            raise RuntimeError(f"signing key {self.kid} has no private half")
        return self.private_key

    def public_jwk(self) -> dict:
        raw = self.public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        x = base64url.encode(raw)
        return {"kty": "OKP", "crv": "Ed25519", "x": x, "kid": self.kid, "alg": "EdDSA", "use": "sig"}


def _kid_for(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519-" + hashlib.sha256(raw).hexdigest()[:16]


def _load_pem(pem: bytes) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("the signing key must be an Ed25519 private key")
    return key


def _load_public_pem(pem: bytes) -> Ed25519PublicKey:
    key = serialization.load_pem_public_key(pem)
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("a pruned key's public half must be an Ed25519 public key")
    return key


# The gate accepts a token up to its leeway (30 s by default) past `exp`, and a process may have read the
# old key just before a rotation: a retired key stays published this much longer than a token can live.
RETIREMENT_GRACE = timedelta(minutes=5)


def _key_dir() -> Path:
    return Path(settings.SIGNING_KEY_DIR)


def _key_files() -> list[tuple[Path, SigningKey]]:
    """(file, key) for each key in the folder, oldest first (file names start with a UTC timestamp).
    A pruned key is only its public half (`.pub`); a private key file wins over a leftover public copy."""
    directory = _key_dir()
    if not directory.exists():
        return []
    by_stem = {path.stem: path for path in sorted(directory.glob("*.pub")) + sorted(directory.glob("*.pem"))}
    found = []
    for stem in sorted(by_stem):
        path = by_stem[stem]
        retired_file = path.with_suffix(".retired")
        retired_at = None
        if retired_file.exists():
            retired_at = datetime.fromisoformat(retired_file.read_text().strip())
        if path.suffix == ".pem":
            private = _load_pem(path.read_bytes())
            public = private.public_key()
        else:
            private, public = None, _load_public_pem(path.read_bytes())
        found.append((path, SigningKey(stem.split("_", 1)[1], private, public, retired_at)))
    return found


# The keys as last read from the folder, with the folder's (path, inode, mtime) when they were read.
# Every change the functions below make adds, renames or removes a file, which sets the folder's mtime;
# so does an operator's `rm` of a compromised key. File times are coarse (a kernel tick), so a change
# in the same tick as an earlier one could leave the mtime as it was: a listing is kept only when the
# folder's last change is RACY_SECONDS older than the read (git's "racy" rule).
_folder_read: tuple[tuple, list[SigningKey]] | None = None
RACY_SECONDS = 2


def _file_keys() -> list[SigningKey]:
    """The folder's keys: read again whenever the folder changed (a signing request costs one stat,
    not a listing and a PEM parse per key)."""
    global _folder_read
    directory = _key_dir()
    try:
        folder = directory.stat()
    except FileNotFoundError:
        return []
    stamp = (str(directory), folder.st_ino, folder.st_mtime_ns)
    if _folder_read is not None and _folder_read[0] == stamp:
        return _folder_read[1]
    keys = [key for _, key in _key_files()]
    if time.time_ns() - folder.st_mtime_ns > RACY_SECONDS * 1_000_000_000:
        _folder_read = (stamp, keys)
    return keys


@functools.lru_cache(maxsize=4)
def _key_from_environment(pem: str) -> SigningKey:
    private = _load_pem(pem.encode())
    return SigningKey(_kid_for(private.public_key()), private, private.public_key())


def all_keys() -> list[SigningKey]:
    if settings.SIGNING_KEY_PEM:
        return [_key_from_environment(settings.SIGNING_KEY_PEM)]
    keys = _file_keys()
    if not keys and settings.SIGNING_KEY_AUTOGENERATE:
        keys = [generate_key()]
    return keys


def active_key() -> SigningKey:
    live = [key for key in all_keys() if key.retired_at is None and key.private_key is not None]
    if not live:
        raise RuntimeError("no active signing key: run `manage.py rotate_signing_key`")
    return live[-1]


def published_keys(now: datetime | None = None) -> list[SigningKey]:
    """Keys whose public half belongs in the JWKS: active ones, and retired ones still in use."""
    now = now or timezone.now()
    return [key for key in all_keys() if _still_published(key, now)]


def _still_published(key: SigningKey, now: datetime) -> bool:
    keep = timedelta(seconds=settings.DECISION_TOKEN_MAX_SECONDS) + RETIREMENT_GRACE
    return key.retired_at is None or key.retired_at + keep > now


def key_by_kid(kid: str) -> SigningKey | None:
    return next((key for key in all_keys() if key.kid == kid), None)


def jwks() -> dict:
    return {"keys": [key.public_jwk() for key in published_keys()]}


def generate_key() -> SigningKey:
    """Write a new private key file; it becomes the active key."""
    directory = _key_dir()
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    private = Ed25519PrivateKey.generate()
    kid = _kid_for(private.public_key())
    stamp = timezone.now().strftime("%Y%m%dT%H%M%S%f")
    path = directory / f"{stamp}_{kid}.pem"
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path.write_bytes(pem)
    path.chmod(0o600)
    return SigningKey(kid, private, private.public_key())


def rotate() -> tuple[SigningKey, list[str]]:
    """Add a new active key and retire the previous ones. Returns (new key, retired kids)."""
    if settings.SIGNING_KEY_PEM:
        raise RuntimeError(
            "REVIEWER_SIGNING_KEY is set: rotate by replacing it (or use REVIEWER_SIGNING_KEY_DIR)"
        )
    previous = [key for key in _file_keys() if key.retired_at is None and key.private_key is not None]
    new_key = generate_key()
    now = timezone.now().isoformat()
    for path in _key_dir().glob("*.pem"):
        kid = path.stem.split("_", 1)[1]
        if kid in {key.kid for key in previous}:
            path.with_suffix(".retired").write_text(now)
    return new_key, [key.kid for key in previous]


def prune_expired(now: datetime | None = None) -> list[str]:
    """Delete the private half of retired keys that no unexpired token can need any more. Only retired
    key files are considered (never the active key, whatever REVIEWER_SIGNING_KEY says); the public
    half stays as `<stamp>_<kid>.pub` so the audit checkpoints the key signed still verify."""
    now = now or timezone.now()
    removed = []
    for path, key in _key_files():
        if key.private_key is None or key.retired_at is None or _still_published(key, now):
            continue
        public_path = path.with_suffix(".pub")
        public_path.write_bytes(
            key.public_key.public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        path.unlink()  # after the public copy is written: a crash in between loses nothing
        removed.append(key.kid)
    return removed


def sign_bytes(payload: bytes) -> tuple[str, str]:
    """Detached Ed25519 signature of payload with the active key: (kid, base64url signature)."""
    key = active_key()
    signature = key.signer().sign(payload)
    return key.kid, base64url.encode(signature)


def jwks_json() -> str:
    return json.dumps(jwks(), indent=2)
