"""What an audit event may hold, checked before it is accepted: a verb the trail knows, no secrets
(event data is kept for years and exported to third parties), and only numbers JSON keeps exactly (a
number jsonb would store differently could not be hashed when the event is chained, which would stop
its chain)."""

from audit.models import Verb
from audit.verify.hashing import first_inexact_number

# Checked here, not by the verb column's choices: a new verb then needs no migration.
KNOWN_VERBS = frozenset(Verb.values)

# Keys that would mean a secret is about to be written into the permanent record. Event data is kept
# for years and exported to third parties, so a caller that passes one of these fails loudly instead.
FORBIDDEN_DATA_KEYS = frozenset(
    {
        "password",
        "otp",
        "otp_code",
        "totp",
        "backup_code",
        "token",
        "api_token",
        "push_token",
        "secret",
        "private_key",
        "authorization",
        "credentials",
        "outbound_auth_credentials",
        "session_key",
    }
)


def refuse_secrets(data, path: str = "data") -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            if str(key).lower() in FORBIDDEN_DATA_KEYS:
                raise ValueError(
                    f"audit event {path}.{key}: secrets, codes and tokens never go into the audit log"
                )
            refuse_secrets(value, f"{path}.{key}")
    elif isinstance(data, list):
        for index, value in enumerate(data):
            refuse_secrets(value, f"{path}[{index}]")


def refuse_unfit_event(verb: str, data: dict) -> None:
    """ValueError naming an unknown verb or the first value the trail may not hold."""
    if verb not in KNOWN_VERBS:
        raise ValueError(f"unknown audit verb {verb!r}: add it to audit.models.Verb")
    refuse_secrets(data)
    inexact = first_inexact_number(data, "data")
    if inexact:
        raise ValueError(
            f"audit event {inexact[0]}: {inexact[1]!r} is outside the numbers JSON keeps exactly "
            "(±(2^53 - 1)); record it as text"
        )
