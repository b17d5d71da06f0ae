"""Verify the chains stored in the database (used by `manage.py audit_verify`)."""

from audit.chain import format_time
from audit.models import AuditEvent, ChainHead, Checkpoint
from audit.verify import Result, verify_checkpoints, verify_events


def event_dict(event: AuditEvent) -> dict:
    return {"chain": event.chain, "seq": event.seq, "at": format_time(event.at), "actor": event.actor,
            "verb": event.verb, "subject": event.subject, "data": event.data, "prev_hash": event.prev_hash,
            "hash": event.hash}


def checkpoint_dict(checkpoint: Checkpoint) -> dict:
    return {"chain": checkpoint.chain, "seq": checkpoint.seq, "hash": checkpoint.hash,
            "at": format_time(checkpoint.at), "kid": checkpoint.kid, "signature": checkpoint.signature}


def verify_chain(chain: str, jwks: dict | None = None) -> Result:
    from approvals import keys  # the shared signing-key module

    events = (event_dict(e) for e in AuditEvent.objects.filter(chain=chain).order_by("seq").iterator(chunk_size=2000))
    result, hashes = verify_events(events)
    head = ChainHead.objects.filter(chain=chain).first()
    if result.ok and head and head.seq != (max(hashes) if hashes else 0):
        result.fail(max(hashes, default=0) + 1, f"{chain}: the chain head says seq {head.seq}, the events end at "
                                                f"{max(hashes, default=0)}")
    jwks = jwks if jwks is not None else {"keys": [k.public_jwk() for k in keys.all_keys()]}
    checkpoints = (checkpoint_dict(c) for c in Checkpoint.objects.filter(chain=chain).order_by("seq"))
    return verify_checkpoints(checkpoints, hashes, jwks, result)


def all_chains() -> list[str]:
    return sorted(set(AuditEvent.objects.values_list("chain", flat=True).distinct()))
