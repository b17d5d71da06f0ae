"""Event times and the hashed body of an event: pure functions that the models, the chain and the records
share (no Django models here, so none of them imports another to get these). Chain names: audit/labels.py."""

from datetime import UTC, datetime


def format_time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def event_body(chain, seq, at, actor, verb, subject, data, prev_hash) -> dict:
    """Exactly what an event's hash covers (audit.verify.hashing.HASHED_FIELDS), `at` in the hashed form."""
    return {
        "chain": chain,
        "seq": seq,
        "at": at if isinstance(at, str) else format_time(at),
        "actor": actor,
        "verb": str(verb),
        "subject": subject,
        "data": data,
        "prev_hash": prev_hash,
    }
