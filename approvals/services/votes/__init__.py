"""Votes, questions and edits by reviewers: the verbs (`cast_vote`, `request_info`, `edit_proposal`) and
the refusal they share (`refusal_to_vote`). Whether the act carries the fresh factor its policy asks
for is `votes.step_up`, read with them: every act here checks it first.

What a vote's or an edit's own words earn (`check_words`, `check_edit`) needs neither the factor nor a
lock, and callers ask it before they check the code: a code checked is spent, so a missing reason found
after the check would cost the person their code and the wait for the next one."""

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from accounts.stepup import StepUp
from approvals import events
from approvals.canonical import action_digest, canonical_bytes
from approvals.models import Decision, Proposal, Vote
from approvals.policy.history import target_key
from approvals.schemas import NUMBERS_ARE_STRINGS, first_number
from approvals.selectors import VoterSlots, ineligibility, lock_proposal_with_role
from approvals.selectors.standins import voices_cast
from approvals.services.common import proposal_subject
from approvals.services.decisions import issue_decision
from approvals.services.delegations import record_used
from approvals.services.halts import active_halt
from approvals.services.intake import evaluate_and_route
from approvals.services.lifecycle import closed_reason, enqueue_cancel, expire_proposal, transition
from approvals.services.quorum import count_quorum
from approvals.services.votes.step_up import STEP_UP_REFUSALS, auth_detail, check_step_up
from approvals.states import OPEN_FOR_VOTES, WAITING_FOR_PEOPLE, State
from audit.labels import SYSTEM, actor_label, user_label
from audit.models import Verb
from audit.people import read_pseudonyms
from audit.trail import audit_time, record
from lib.errors import EditRefused, VoteRefused


def cast_vote(
    proposal_id,
    actor,
    *,
    verdict: str,
    digest_seen: str,
    reason: str = "",
    reservation: str = "",
    step_up: StepUp | None = None,
    page_hash: str = "",
    now: datetime | None = None,
) -> Vote:
    """Record one person's approve/reject on the exact digest they saw; decide when the quorum is met
    or any eligible person rejects. `step_up` is what the caller checked (accounts.stepup.step_up_for).
    Refusals raise VoteRefused (or NotFound for outsiders)."""
    if verdict not in Vote.Verdict.values:
        raise VoteRefused("bad_verdict", "a vote is approve or reject")
    check_words(verdict, reason=reason, reservation=reservation)
    reason = (reason or "").strip()
    reservation = (reservation or "").strip()[:2000]
    refusal: VoteRefused | None = None
    with transaction.atomic(durable=True):
        proposal, role = lock_proposal_with_role(proposal_id, actor)
        clock = now or timezone.now()
        slots = VoterSlots(proposal, actor, role=role)
        refusal = refusal_to_vote(proposal, actor, digest_seen, clock, slots=slots)
        step = None
        if refusal is None:
            step, refusal = check_step_up(proposal, actor, step_up)
        if refusal is not None:
            if refusal.code == "expired":
                expire_proposal(proposal, reason="a vote arrived after expiry: silence never approves")
            elif refusal.code == "halted" and proposal.state in WAITING_FOR_PEOPLE:
                # Submitted while the halt was committing, so the halt did not see it: cancel it as the
                # halt would have, so a resume never brings it back.
                halt = active_halt(proposal.tenant_id, proposal.agent_id)  # None if lifted since the check
                reason = f"halt: {halt.reason}" if halt is not None else "halt"
                transition(proposal, State.CANCELLED, actor=SYSTEM, reason=reason)
                enqueue_cancel(proposal, reason=reason)
            if refusal.code not in STEP_UP_REFUSALS:
                record(
                    proposal.tenant_id,
                    actor=actor_label(actor),
                    verb=Verb.VOTE_REFUSED,
                    subject=proposal_subject(proposal),
                    data={"code": refusal.code, "verdict": verdict},
                )
        elif step is not None:
            vote = store_vote(
                proposal,
                actor,
                slots,
                verdict,
                digest_seen,
                reason,
                page_hash,
                (*step, auth_detail(step_up)),
                reservation,
            )
    if refusal is not None:
        raise refusal
    return vote


ASK = "ask"


def check_words(act: str, *, reason: str = "", reservation: str = "", question: str = "") -> None:
    """Raise VoteRefused when the words of a vote ("approve", "reject") or a question ("ask") are wrong
    whoever sends them and whatever the proposal: a rejection needs a reason, a question its text, and
    a reservation goes only with an approval."""
    if act == Vote.Verdict.REJECT and not (reason or "").strip():
        raise VoteRefused("reason_required", "a rejection needs a reason", "reason")
    if act == ASK and not (question or "").strip():
        raise VoteRefused("question_required", "write the question the agent must answer", "question")
    if (reservation or "").strip() and act != Vote.Verdict.APPROVE:
        raise VoteRefused("reservation_with_reject", "a reservation goes with an approval", "reservation")


def check_edit(action: dict, arguments) -> None:
    """Raise EditRefused when an edit of `action` to these arguments is wrong whoever sends it: not an
    object, a JSON number (the intake rule), or no change at all."""
    if not isinstance(arguments, dict):
        raise EditRefused("bad_arguments", "arguments must be an object", "arguments")
    if (number := first_number(arguments, ("arguments",))) is not None:
        raise EditRefused("json_number", f"{number}: {NUMBERS_ARE_STRINGS}", "arguments")
    if {**action, "arguments": arguments} == action:
        raise EditRefused("no_change", "the edit changes nothing", "arguments")


def refusal_to_vote(
    proposal: Proposal,
    user,
    digest_seen: str,
    clock: datetime,
    *,
    once_per_person: bool = True,
    slots: VoterSlots | None = None,
    batch_vote: bool = False,
) -> VoteRefused | None:
    """Why this person may not decide this proposal now (None if they may). Asking and editing are
    open to someone who already voted (once_per_person=False); a second vote is not. `slots`: the
    person's, when the caller reads them too (a vote stores the groups it counts in). A batch member is
    decided only with its batch, against the manifest (`batch_vote`: approvals/services/batches.py)."""
    slots = slots or VoterSlots(proposal, user)
    halt_record = active_halt(proposal.tenant_id, proposal.agent_id)
    if halt_record:
        return VoteRefused("halted", f"votes are stopped: Reviewer is halted ({halt_record.reason})")
    if proposal.state not in OPEN_FOR_VOTES:
        return VoteRefused("not_open", f"No decision is open here: {closed_reason(proposal, clock)}.")
    if clock >= proposal.expires_at:
        return VoteRefused("expired", f"No decision is open here: {closed_reason(proposal, clock)}.")
    if proposal.manifest_digest and not batch_vote:
        return VoteRefused(
            "batch_member",
            "this request is a member of a batch: decide it on the batch's page, with the others",
        )
    if digest_seen != proposal.action_digest:
        return VoteRefused(
            "wrong_digest", "the action changed since you loaded it; reload and review it again", "digest"
        )
    why_not = ineligibility(proposal, user, slots)
    if why_not:
        code, message = why_not
        return VoteRefused(code, message)
    voters = voices_cast(proposal, user, slots.capacity.on_behalf_of) if once_per_person else set()
    if user.pk in voters:
        return VoteRefused("already_voted", "you already voted on this proposal; a person counts once")
    if voters:
        return VoteRefused(
            "already_voted", "you or the person you stand in for already voted here; a person counts once"
        )
    return None


def _locked_for_a_reviewer(proposal_id, actor, digest_seen: str) -> tuple[Proposal, VoteRefused | None]:
    """The proposal locked for a question or an edit, and why this person may not make one now (None
    if they may): open to someone who already voted, as a second vote is not."""
    proposal, role = lock_proposal_with_role(proposal_id, actor)
    slots = VoterSlots(proposal, actor, role=role)
    return proposal, refusal_to_vote(
        proposal, actor, digest_seen, timezone.now(), once_per_person=False, slots=slots
    )


def store_vote(proposal, user, slots, verdict, digest_seen, reason, page_hash, step, reservation="") -> Vote:
    """Store a vote refusal_to_vote and check_step_up let through, with its audit event, and decide the
    proposal when it rejects or meets the quorum. Inside the caller's transaction, the proposal locked:
    cast_vote's, or a batch vote's for each of its members (approvals/services/batches.py)."""
    method, auth_at, detail = step
    capacity, groups = slots.capacity, slots.own_groups()
    vote = Vote.objects.create(
        proposal=proposal,
        voter=user,
        on_behalf_of=capacity.on_behalf_of,
        verdict=verdict,
        digest_seen=digest_seen,
        page_hash=page_hash,
        reservation=reservation,
        reason=reason,
        auth_method=method,
        auth_at=auth_at,
        auth_detail=detail,
        group=groups[0] if len(groups) == 1 else None,
    )
    record(
        proposal.tenant_id,
        actor=actor_label(user),
        verb=Verb.VOTE_CAST,
        subject=proposal_subject(proposal),
        data={
            "verdict": verdict,
            "digest_seen": digest_seen,
            "page_hash": page_hash,
            "reason": reason,
            "reservation": reservation,
            "groups": [g.slug for g in groups],
            "auth": {"method": method, "at": audit_time(auth_at), **detail},
            **({"on_behalf_of": actor_label(capacity.on_behalf_of)} if capacity.on_behalf_of else {}),
        },
    )
    if capacity.on_behalf_of is not None:
        record_used(capacity.on_behalf_of, user, proposal)
    if verdict == Vote.Verdict.REJECT:
        transition(proposal, State.REJECTED, actor=actor_label(user), reason=reason)
        issue_decision(
            proposal,
            Decision.Kind.REJECTED,
            reason=reason,
            approvers=[_approver(vote, None)],
        )
        return vote
    quorum = count_quorum(proposal, groups=slots.groups)
    for counted in (v for votes in quorum.slots.values() for v in votes if v.voter_id == user.pk):
        counted.voter = user  # the voter's pseudonym, read for this vote's event, is kept on `user`
    if quorum.met:
        counted_votes = [v for votes in quorum.slots.values() for v in votes]
        read_pseudonyms([v.voter for v in counted_votes] + [v.on_behalf_of for v in counted_votes])
        approvers = [_approver(v, slug) for slug, votes in quorum.slots.items() for v in votes]
        transition(
            proposal,
            State.APPROVED,
            actor=actor_label(user),
            reason="quorum reached",
            data={"approved_by": [a["sub"] for a in approvers]},
        )
        issue_decision(
            proposal,
            Decision.Kind.APPROVED,
            reason="approved by quorum",
            approvers=approvers,
            quorum=quorum,
        )
    else:
        # A vote short of the quorum, rendered before its commit (transition() announces the rest).
        events.proposal_changed(proposal, render_now=True)
    return vote


def _approver(vote: Vote, group_slug: str | None) -> dict:
    voter = vote.voter
    return {
        "sub": user_label(voter),
        "name": voter.get_full_name() or voter.get_username(),
        "group": group_slug,
        "auth": {"method": vote.auth_method, "at": audit_time(vote.auth_at), **vote.auth_detail},
        # The reason the form promises goes into the signed decision: each approver's own words.
        "reason": (vote.reason or "")[:2000],
        # Approve with reservation: a dissent that did not block, signed with the decision.
        "reservation": vote.reservation or "",
        # A delegate's vote names the person whose eligibility it used.
        **({"on_behalf_of": _named(vote.on_behalf_of)} if vote.on_behalf_of_id else {}),
    }


def _named(user) -> dict:
    return {"sub": user_label(user), "name": user.get_full_name() or user.get_username()}


def request_info(
    proposal_id, actor, *, question: str, digest_seen: str, step_up: StepUp | None = None
) -> Decision:
    """Ask the agent a question: a needs_info decision; the agent answers with a new proposal. It needs
    the same step-up as a vote (`step_up`, checked by the caller), since it signs a decision."""
    check_words(ASK, question=question)
    question = (question or "").strip()
    with transaction.atomic(durable=True):
        proposal, refusal = _locked_for_a_reviewer(proposal_id, actor, digest_seen)
        if refusal:
            raise refusal
        step, refusal = check_step_up(proposal, actor, step_up, "question")
        if step is not None:  # no refusal
            transition(proposal, State.INFO_REQUESTED, actor=actor_label(actor), reason=question)
            decision = issue_decision(
                proposal,
                Decision.Kind.NEEDS_INFO,
                reason=question,
                approvers=[_asker(actor, (*step, auth_detail(step_up)), question)],
            )
    if refusal is not None:
        raise refusal  # after the commit: the step-up failure stays recorded
    return decision


def _asker(user, step: tuple[str, datetime, dict], question: str) -> dict:
    """The approver entry of a needs_info decision: the person who asked, with the same keys as every
    approver (their words in `reason`: the question; no reservation)."""
    method, auth_at, detail = step
    return {
        "sub": user_label(user),
        "name": user.get_full_name() or user.get_username(),
        "group": None,
        "auth": {"method": method, "at": audit_time(auth_at), **detail},
        "reason": question[:2000],
        "reservation": "",
    }


def edit_proposal(
    proposal_id,
    actor,
    *,
    arguments: dict,
    digest_seen: str,
    note: str = "",
    step_up: StepUp | None = None,
) -> Proposal:
    """A reviewer's edit never mutates a proposal: it creates a successor with a new digest that needs
    the full quorum again (and its author cannot approve it); the old one becomes superseded. It needs
    the same step-up as a vote (`step_up`), since it changes what reviewers are asked to release."""
    if not isinstance(arguments, dict):
        raise EditRefused("bad_arguments", "arguments must be an object", "arguments")
    with transaction.atomic(durable=True):
        old, refusal = _locked_for_a_reviewer(proposal_id, actor, digest_seen)
        if refusal:
            raise EditRefused(refusal.code, refusal.message, refusal.field)
        check_edit(old.action, arguments)
        action = {**old.action, "arguments": arguments}
        _, refusal = check_step_up(old, actor, step_up, "edit")
        if refusal is None:
            new = _create_edited(old, actor, action, note)
    if refusal is not None:
        raise EditRefused(refusal.code, refusal.message, refusal.field)
    return new


def _create_edited(old: Proposal, actor, action: dict, note: str) -> Proposal:
    """The successor proposal of an edit, routed like a new one (inside the caller's transaction)."""
    digest = action_digest(action)
    edits = Proposal.objects.filter(
        agent=old.agent, task_id=old.task_id, request_id__startswith=f"{old.request_id}.edit"
    ).count()
    new = Proposal.objects.create(
        tenant_id=old.tenant_id,
        agent=old.agent,
        task_id=old.task_id,
        context_id=old.context_id,
        request_id=f"{old.request_id}.edit{edits + 1}",
        summary=old.summary[:480] + " (edited)",
        action=action,
        action_canonical=canonical_bytes(action).decode(),
        action_digest=digest,
        tool=old.tool,
        target_key=target_key(action),
        principal_id=old.principal_id,
        principal_display=old.principal_display,
        agent_version=old.agent_version,
        consequences=old.consequences,
        diff=old.diff,
        evidence=old.evidence,
        edited_by=actor,
        expires_at=old.expires_at,
    )
    record(
        old.tenant_id,
        actor=actor_label(actor),
        verb=Verb.PROPOSAL_SUBMITTED,
        subject=proposal_subject(new),
        data={
            "via": "edit",
            "edited_from": str(old.id),
            "task_id": new.task_id,
            "request_id": new.request_id,
            "tool": new.tool,
            "action_digest": digest,
            "previous_digest": old.action_digest,
            "note": note,
        },
    )
    transition(
        old,
        State.SUPERSEDED,
        actor=actor_label(actor),
        reason=note or "edited by a reviewer",
        data={"successor": str(new.id)},
    )
    new.supersedes = old
    new.save(update_fields=["supersedes"])
    remaining = max(int((old.expires_at - timezone.now()).total_seconds()), 1)
    evaluate_and_route(
        new, requested_expiry=timezone.now() + timedelta(seconds=remaining), actor=actor_label(actor)
    )
    return new
