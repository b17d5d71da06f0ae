"""Verify the chains stored in the database (used by `manage.py audit_verify` and the PDF report), with
the same streaming checks as the offline verifier, against the checkpoints kept in the database and the
ones written outside it (audit/chain/checkpoint_files.py).

Verification first chains what has committed (`sequence_chain`): it checks the whole committed trail,
not a prefix that happens to be chained already."""

from collections.abc import Generator
from pathlib import Path

from django.db import DatabaseError

from audit.chain import checkpoint_files
from audit.chain.checkpoints import verification_jwks
from audit.chain.records import checkpoint_dict, event_pages
from audit.chain.sequencer import sequence_chain
from audit.models import AuditEvent, AuditPending, AuditSeal, ChainHead, Checkpoint
from audit.verify.bundle import earlier_hashes
from audit.verify.chains import ChainVerifier, Result, public_keys, signature_problem
from audit.verify.hashing import checkpoint_payload

EXTERNAL = "the checkpoint file kept outside the database"


def external_checkpoints(
    chain: str, keys: dict, result: Result, source: Path | None = None
) -> dict[int, str]:
    """{seq: hash} of the chain's checkpoints in the files outside the database whose signature verifies.
    A line whose signature does not verify is reported (someone wrote it who holds no signing key)."""
    expected = {}
    for line in checkpoint_files.read(chain, source):
        payload = checkpoint_payload(chain, line["seq"], line["hash"], line["at"])
        problem = signature_problem(keys, line.get("kid", ""), line.get("signature", ""), payload)
        if problem:
            result.fail(line["seq"], f"{chain} {EXTERNAL}, checkpoint at seq {line['seq']}: {problem}", chain)
        else:
            expected[line["seq"]] = line["hash"]
    return expected


def verify_chain_steps(
    chain: str,
    jwks: dict | None = None,
    *,
    result: Result | None = None,
    checkpoint_source: Path | None = None,
    previous: Path | None = None,
) -> Generator[int, None, Result]:
    """Check every hash, link and checkpoint of one chain, that it ends at its recorded head, and that it
    holds every checkpoint written outside the database (from `checkpoint_source`, a directory or file;
    default AUDIT_CHECKPOINT_DIR). Yields how many events were checked after each page; returns the Result."""
    result = result if result is not None else Result()
    try:
        sequence_chain(chain)
    except DatabaseError as error:
        # What is chained already is still checked; the events left waiting are named below.
        waiting = AuditPending.objects.filter(chain=chain).count()
        result.fail(
            None,
            f"{chain}: the sequencer could not chain the {waiting} event(s) waiting to be chained: "
            f"{str(error).strip()}",
            chain,
        )
    keys = public_keys(jwks if jwks is not None else verification_jwks())
    # Checkpoints before the head: a checkpoint written meanwhile can then never look like a truncation.
    checkpoints = [checkpoint_dict(c) for c in Checkpoint.objects.filter(chain=chain).order_by("seq")]
    expected = external_checkpoints(chain, keys, result, checkpoint_source)
    vouched = None
    if previous is not None:
        # An earlier bundle: its checkpoints count as external ones, and its every event hash names a
        # rewritten event exactly (not only the range between two checkpoints).
        earlier, every = earlier_hashes(previous, keys, result)
        expected = {**earlier.get(chain, {}), **expected}
        vouched = every.get(chain)
    head = ChainHead.objects.filter(chain=chain).first()
    verifier = ChainVerifier(
        chain,
        keys=keys,
        checkpoints=checkpoints,
        result=result,
        expected=expected,
        expected_source=EXTERNAL,
        vouched=vouched,
    )
    events = AuditEvent.objects.chained(chain)
    if head is not None:
        events = events.filter(seq__lte=head.seq)
    for page in event_pages(events):
        if not all(verifier.feed(event) for event in page):
            break
        yield result.events
    _unchained(chain, result)
    _past_the_head(chain, head, result)
    return verifier.finish(expected_last=(head.seq, head.hash) if head else None)


def _unchained(chain: str, result: Result) -> None:
    """An accepted event must end up in the chain: one that has neither a seal nor a pending row (the
    sequencer's queue) was taken out of that queue, so it would never be chained."""
    waiting = AuditPending.objects.filter(chain=chain).values("event_id")
    lost = (
        AuditEvent._base_manager.filter(chain=chain, seal__isnull=True)
        .exclude(id__in=waiting)
        .order_by("id")
        .values_list("id", "verb", "subject")
    )
    for event_id, verb, subject in lost[:10]:
        result.fail(
            None,
            f"{chain} event id {event_id} ({verb} {subject}) was accepted but is not chained and no longer "
            "waits to be (its row in the sequencer's queue was deleted)",
            chain,
        )


def _past_the_head(chain: str, head: ChainHead | None, result: Result) -> None:
    """A seal past the chain head was not written by the sequencer (which moves the head with it)."""
    beyond = AuditSeal.objects.filter(chain=chain, seq__gt=head.seq if head else 0).order_by("seq").first()
    if beyond is not None:
        result.fail(
            beyond.seq,
            f"{chain} seq {beyond.seq}: a seal past the chain head (seq {head.seq if head else 0}) that the "
            f"sequencer did not write (event id {beyond.event_id}, hash {beyond.hash})",
            chain,
        )


def verify_chain(
    chain: str,
    jwks: dict | None = None,
    *,
    result: Result | None = None,
    checkpoint_source: Path | None = None,
    previous: Path | None = None,
) -> Result:
    steps = verify_chain_steps(
        chain, jwks, result=result, checkpoint_source=checkpoint_source, previous=previous
    )
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def all_chains(checkpoint_source: Path | None = None) -> list[str]:
    chains = set(checkpoint_files.chains(checkpoint_source))
    chains |= set(AuditEvent.objects.values_list("chain", flat=True).distinct())
    chains |= set(ChainHead.objects.values_list("chain", flat=True))
    chains |= set(Checkpoint.objects.values_list("chain", flat=True).distinct())
    return sorted(chains)
