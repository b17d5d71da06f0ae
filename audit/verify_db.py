"""Verify the chains stored in the database (used by `manage.py audit_verify` and the PDF report), with
the same streaming checks as the offline verifier."""

from collections.abc import Generator

from audit.chain import verification_jwks
from audit.models import AuditEvent, ChainHead, Checkpoint
from audit.records import checkpoint_dict, event_pages
from audit.verify import ChainVerifier, Result, public_keys


def verify_chain_steps(
    chain: str, jwks: dict | None = None, *, result: Result | None = None
) -> Generator[int, None, Result]:
    """Check every hash, link and checkpoint of one chain, and that it ends at its recorded head.
    Yields how many events were checked after each page; returns the Result."""
    result = result if result is not None else Result()
    keys = public_keys(jwks if jwks is not None else verification_jwks())
    # Checkpoints before the head: a checkpoint written meanwhile can then never look like a truncation.
    checkpoints = [checkpoint_dict(c) for c in Checkpoint.objects.filter(chain=chain).order_by("seq")]
    head = ChainHead.objects.filter(chain=chain).first()
    verifier = ChainVerifier(chain, keys=keys, checkpoints=checkpoints, result=result)
    events = AuditEvent.objects.filter(chain=chain)
    if head is not None:
        events = events.filter(seq__lte=head.seq)
    for page in event_pages(events):
        if not all(verifier.feed(event) for event in page):
            break
        yield result.events
    return verifier.finish(expected_last=(head.seq, head.hash) if head else None)


def verify_chain(chain: str, jwks: dict | None = None, *, result: Result | None = None) -> Result:
    steps = verify_chain_steps(chain, jwks, result=result)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def all_chains() -> list[str]:
    chains = set(AuditEvent.objects.values_list("chain", flat=True).distinct())
    chains |= set(ChainHead.objects.values_list("chain", flat=True))
    chains |= set(Checkpoint.objects.values_list("chain", flat=True).distinct())
    return sorted(chains)
