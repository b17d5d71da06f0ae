"""Batches with a fixed manifest (docs/agents/batches.md): an agent asks about several actions at once,
people decide them on one page against the manifest they saw, and each member gets its own signed
decision naming that manifest.

- `submit_batch`: every member taken in as a proposal (intake's `take_in`, all in one transaction), then
  the batch checked against its members' policies (approvals/policy/batching.py); any refusal leaves
  nothing stored.
- `withdraw_member`, `add_member`: the agent changes the membership before the decision; the manifest
  gets a new digest and the votes on the members still waiting are void.
- `cast_batch_vote`: one vote (one fresh factor) on the manifest a person saw, or, where the rule
  allows it, an approval of a chosen subset (the rest rejected; the subset is the new manifest). Each
  member's vote goes through the vote service's own rules (`refusal_to_vote`, `check_step_up`,
  `store_vote`), so quorum, separation of duties and the decision are a single proposal's.
- `revoke_batch`: every released, unconsumed member decision revoked, every waiting member cancelled.

Lock order: the batch row first, then its members in position order (intake, the votes, the changes
and the revocation all take them so), so two of them never wait for each other.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import rfc8785
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.stepup import StepUp
from approvals.canonical import action_digest, manifest_digest
from approvals.models import Agent, Batch, BatchMember, PolicyVersion, Proposal, Vote
from approvals.policy.batching import Rule, merged_rule, total_refusal
from approvals.policy.evaluation import TENANT_DEFAULT_ID
from approvals.schemas import ApprovalRequest, BatchSubmission, ProposalSubmission
from approvals.selectors import VoterSlots, lock_proposal_with_role, tenant_role
from approvals.services.common import agent_actor
from approvals.services.intake import take_in
from approvals.services.lifecycle import revoke_proposal, transition
from approvals.services.votes import check_words, refusal_to_vote, store_vote
from approvals.services.votes.step_up import auth_detail, check_step_up
from approvals.states import OPEN_FOR_VOTES, RELEASED, WAITING_FOR_PEOPLE, State
from audit.labels import actor_label, user_label
from audit.models import Verb
from audit.trail import record
from lib.errors import ActionRefused, Conflict, IntakeError, NotFound, ServiceError, VoteRefused
from tenants.models import TenantMembership

MIN_MEMBERS = 2


def batch_subject(batch: Batch) -> str:
    return f"batch:{batch.id}"


# ---------------------------------------------------------------------------------------------------
# Intake


def submit_announced_batch(agent: Agent, announced: BatchSubmission, *, via: str) -> tuple[Batch, bool]:
    """`submit_batch` for a batch as an agent announced it (the REST body, or a parked task's batch read
    from a push or a listing)."""
    return submit_batch(
        agent,
        task_id=announced.task_id,
        context_id=announced.context_id,
        batch_id=announced.batch_id,
        summary=announced.summary,
        members=announced.members,
        manifest=announced.manifest_digest,
        via=via,
    )


def submit_batch(
    agent: Agent,
    *,
    task_id: str,
    context_id: str,
    batch_id: str,
    summary: str,
    members: list[ApprovalRequest],
    manifest: str,
    via: str = "api",
) -> tuple[Batch, bool]:
    """Take a batch in (idempotent on agent, task and batch id with the same manifest). Returns (batch,
    created). Refusals raise IntakeError with `field` the member at fault (`members.3.action_digest`);
    nothing is stored then."""
    digests = _checked_members(members, manifest)
    try:
        with transaction.atomic(durable=True):
            known = Batch.objects.select_for_update().filter(agent=agent, task_id=task_id, batch_id=batch_id)
            if (existing := known.first()) is not None:
                return _same_batch_or_error(existing, manifest), False
            proposals = [
                _take_member(agent, task_id, context_id, member, manifest, index)
                for index, member in enumerate(members)
            ]
            rule = _rule_or_refusal(proposals)
            _check_against_rule(rule, proposals)
            batch = Batch.objects.create(
                tenant=agent.tenant,
                agent=agent,
                task_id=task_id,
                context_id=context_id,
                batch_id=batch_id,
                summary=summary,
                manifest_digest=manifest,
                submitted_digest=manifest,
                rule=rule.as_json(),
            )
            BatchMember.objects.bulk_create(
                BatchMember(batch=batch, proposal=proposal, position=index)
                for index, proposal in enumerate(proposals)
            )
            record(
                agent.tenant_id,
                actor=agent_actor(agent),
                verb=Verb.BATCH_SUBMITTED,
                subject=batch_subject(batch),
                data={
                    "via": via,
                    "task_id": task_id,
                    "batch_id": batch_id,
                    "manifest": manifest,
                    "members": [
                        {"request_id": p.request_id, "action_digest": d}
                        for p, d in zip(proposals, digests, strict=True)
                    ],
                    "rule": batch.rule,
                },
            )
    except IntegrityError:
        # The same batch arrived twice at once: the other one stored it (or a member's request id).
        existing = Batch.objects.filter(agent=agent, task_id=task_id, batch_id=batch_id).first()
        if existing is None:
            raise
        return _same_batch_or_error(existing, manifest), False
    return batch, True


def _checked_members(members: list[ApprovalRequest], manifest: str) -> list[str]:
    """The members' digests, checked before anything is read: each member's own digest, no member twice,
    and the manifest digest over them."""
    if len(members) < MIN_MEMBERS:
        raise IntakeError("invalid", f"a batch has at least {MIN_MEMBERS} members", "members")
    digests: list[str] = []
    seen_requests: set[str] = set()
    for index, member in enumerate(members):
        try:
            recomputed = action_digest(member.action)
        except rfc8785.CanonicalizationError as error:
            raise IntakeError(
                "bad_action",
                f"member {index}: action cannot be canonicalized: {error}",
                f"members.{index}.action",
            ) from error
        if recomputed != member.action_digest:
            raise IntakeError(
                "digest_mismatch",
                f"member {index}: action_digest does not match the action: Reviewer computed {recomputed}",
                f"members.{index}.action_digest",
            )
        if recomputed in digests or member.request_id in seen_requests:
            twin = digests.index(recomputed) if recomputed in digests else None
            raise IntakeError(
                "duplicate_member",
                f"member {index} repeats member {twin}: a batch asks about each action once"
                if twin is not None
                else f"member {index} repeats the request id {member.request_id!r}",
                f"members.{index}",
            )
        if member.supersedes:
            raise IntakeError(
                "invalid", "a batch member cannot supersede a request", f"members.{index}.supersedes"
            )
        digests.append(recomputed)
        seen_requests.add(member.request_id)
    expected = manifest_digest(digests)
    if manifest != expected:
        raise IntakeError(
            "manifest_mismatch",
            f"manifest_digest does not match the members: Reviewer computed {expected} (sha256 of the "
            "RFC 8785 list of the members' action digests, in order)",
            "manifest_digest",
        )
    return digests


def _take_member(
    agent: Agent, task_id: str, context_id: str, member: ApprovalRequest, manifest: str, index: int
) -> Proposal:
    """One member taken in by intake, inside the batch's transaction; its refusals name the member."""
    submission = ProposalSubmission(task_id=task_id, context_id=context_id, request=member)
    try:
        taken = take_in(agent, submission, via="batch", manifest=manifest)
    except IntakeError as error:
        field = (error.field or "").removeprefix("request")
        raise type(error)(
            error.code, f"member {index}: {error.message}", f"members.{index}{field}"
        ) from error
    if taken.refused is not None:
        raise taken.refused  # over a quota: the whole batch is refused, nothing stored
    if not taken.created:
        raise IntakeError(
            "request_id_reused",
            f"member {index}: this task already asked about request {member.request_id!r}",
            f"members.{index}.request_id",
        )
    return taken.proposal


def _same_batch_or_error(existing: Batch, manifest: str) -> Batch:
    if existing.submitted_digest != manifest:
        raise IntakeError(
            "batch_id_reused",
            "this batch_id is already known with another manifest; a changed batch needs a new batch_id",
            "batch_id",
        )
    return existing


def _rule_or_refusal(proposals: list[Proposal]) -> Rule:
    """The batch rule of every version that shaped a member, merged; refused when one has none."""
    through = Proposal.policy_versions.through
    pins = through.objects.filter(proposal_id__in=[p.pk for p in proposals]).select_related(
        "policyversion__policy"
    )
    versions_of: dict[Any, list[PolicyVersion]] = {}
    for pin in pins:
        versions_of.setdefault(pin.proposal_id, []).append(pin.policyversion)
    rules: list[tuple[str, dict[str, Any]]] = []
    for index, proposal in enumerate(proposals):
        versions = versions_of.get(proposal.pk, [])
        if proposal.requirements.get("tenant_default") or not versions:
            raise _not_batchable(
                index, proposal, f"no policy of this tenant matches it ({TENANT_DEFAULT_ID})"
            )
        for version in versions:
            if not version.batch:
                raise _not_batchable(
                    index, proposal, f"policy {version.policy.slug}@{version.version} has no batch rule"
                )
            rules.append((f"{version.policy.slug}@{version.version}", version.batch))
    rule = merged_rule(rules)
    if rule is None:  # pragma: no cover - every version was checked above
        raise IntakeError("not_batchable", "the members' policies do not allow batches", "members")
    return rule


def _not_batchable(index: int, proposal: Proposal, why: str) -> IntakeError:
    return IntakeError(
        "not_batchable",
        f"member {index}: {proposal.tool} may not be batched: {why}; ask about it alone",
        f"members.{index}.action.tool",
    )


def _check_against_rule(rule: Rule, proposals: list[Proposal]) -> None:
    if len(proposals) > rule.max_members:
        raise IntakeError(
            "batch_too_large",
            f"the batch has {len(proposals)} members; its policies allow at most {rule.max_members}",
            "members",
        )
    refusal = total_refusal(rule, [p.action for p in proposals])
    if refusal is not None:
        raise IntakeError("batch_over_total", refusal, "members")
    if not rule.irreversible:
        for index, proposal in enumerate(proposals):
            if proposal.reversibility == "R3":
                raise _not_batchable(
                    index, proposal, "it is irreversible (R3) and no batch rule says irreversible: true"
                )


# ---------------------------------------------------------------------------------------------------
# Changes by the agent before the decision


def withdraw_member(agent: Agent, batch_pk: Any, request_id: str) -> Batch:
    """Take a member that still waits for people out of the batch: it is cancelled, the manifest gets a
    new digest, and the votes on the members still waiting are void."""
    with transaction.atomic(durable=True):
        batch = _lock_for_agent(agent, batch_pk)
        member = batch.members.filter(
            proposal__request_id=request_id, standing=BatchMember.Standing.IN
        ).first()
        if member is None:
            raise NotFound("not_found", "no member with this request id in this batch")
        proposal = Proposal.objects.select_for_update(of=("self",)).get(pk=member.proposal_id)
        if proposal.state not in WAITING_FOR_PEOPLE:
            raise Conflict(
                "not_withdrawable",
                f"this member is {proposal.state}: only a member still waiting can be withdrawn",
            )
        transition(proposal, State.CANCELLED, actor=agent_actor(agent), reason="withdrawn from its batch")
        member.standing = BatchMember.Standing.WITHDRAWN
        member.save(update_fields=["standing"])
        _new_manifest(batch, actor=agent_actor(agent), change={"withdrawn": request_id})
    return batch


def add_member(agent: Agent, batch_pk: Any, member: ApprovalRequest) -> tuple[Batch, Proposal]:
    """Add a member to a batch still waiting for people: intake takes it in as at submission, the batch
    is checked against its rule again, the manifest gets a new digest and the votes on it are void."""
    with transaction.atomic(durable=True):
        batch = _lock_for_agent(agent, batch_pk)
        current = list(batch.members.filter(standing=BatchMember.Standing.IN).select_related("proposal"))
        if not any(m.proposal.state in WAITING_FOR_PEOPLE for m in current):
            raise Conflict(
                "batch_closed", "this batch was decided: ask about the action alone or in a new batch"
            )
        position = (batch.members.order_by("-position").values_list("position", flat=True).first() or 0) + 1
        digests = [m.proposal.action_digest for m in current]
        if member.action_digest in digests:
            raise IntakeError(
                "duplicate_member",
                f"the new member repeats member {digests.index(member.action_digest)}",
                "member",
            )
        try:
            proposal = _take_member(
                agent, batch.task_id, batch.context_id, member, batch.manifest_digest, position
            )
        except IntakeError as error:
            raise type(error)(
                error.code, error.message, (error.field or "").replace(f"members.{position}", "member", 1)
            ) from error
        proposals = [m.proposal for m in current] + [proposal]
        rule = _rule_or_refusal(proposals)
        _check_against_rule(rule, proposals)
        BatchMember.objects.create(batch=batch, proposal=proposal, position=position)
        batch.rule = rule.as_json()
        batch.save(update_fields=["rule"])
        _new_manifest(batch, actor=agent_actor(agent), change={"added": member.request_id})
        proposal.refresh_from_db(fields=["manifest_digest"])
    return batch, proposal


def _lock_for_agent(agent: Agent, batch_pk: Any) -> Batch:
    batch = Batch.objects.select_for_update().filter(pk=batch_pk, agent=agent).first()
    if batch is None:
        raise NotFound("not_found", "no such batch for this agent")
    if batch.revoked_at is not None:
        raise Conflict("batch_closed", "this batch was revoked")
    return batch


def _new_manifest(batch: Batch, *, actor: str, change: dict[str, Any]) -> str:
    """The manifest of the members in the batch now: its digest on the batch and on every member still
    in it (what their decisions will name), and the votes on the members still waiting void (they were
    given for another manifest). In the caller's transaction, the batch row locked."""
    members = list(
        batch.members.filter(standing=BatchMember.Standing.IN).order_by("position").select_related("proposal")
    )
    old = batch.manifest_digest
    batch.manifest_digest = manifest_digest([m.proposal.action_digest for m in members])
    batch.save(update_fields=["manifest_digest"])
    Proposal.objects.filter(pk__in=[m.proposal_id for m in members], state__in=WAITING_FOR_PEOPLE).update(
        manifest_digest=batch.manifest_digest
    )
    waiting = [m.proposal_id for m in members if m.proposal.state in WAITING_FOR_PEOPLE]
    voided = list(Vote.objects.filter(proposal_id__in=waiting).select_related("voter"))
    Vote.objects.filter(pk__in=[v.pk for v in voided]).delete()
    record(
        batch.tenant_id,
        actor=actor,
        verb=Verb.BATCH_CHANGED,
        subject=batch_subject(batch),
        data={
            **change,
            "old_manifest": old,
            "manifest": batch.manifest_digest,
            "votes_voided": [
                {"proposal": str(v.proposal_id), "voter": user_label(v.voter), "verdict": v.verdict}
                for v in voided
            ],
        },
    )
    return batch.manifest_digest


# ---------------------------------------------------------------------------------------------------
# People's decision


@dataclass
class BatchVote:
    """What a batch vote did: the votes stored (one per member voted on), the members left out of an
    approved subset (rejected), and the manifest the approval counts for."""

    votes: list[Vote]
    excluded: list[str]
    manifest: str


def lock_batch_for(batch_pk: Any, actor: Any) -> tuple[Batch, str]:
    """The batch row locked, if `actor` belongs to its tenant; NotFound otherwise (outsiders learn
    nothing). With the actor's role. Call inside transaction.atomic."""
    batch = Batch.objects.select_for_update().filter(pk=batch_pk).first()
    role = tenant_role(actor, batch.tenant_id) if batch is not None else None
    if batch is None or role is None:
        raise NotFound("not_found", "no such batch")
    return batch, role


def cast_batch_vote(
    batch_pk: Any,
    actor: Any,
    *,
    verdict: str,
    manifest_seen: str,
    approve: list[str] | None = None,
    reason: str = "",
    step_up: StepUp | None = None,
    page_hash: str = "",
    now: datetime | None = None,
) -> BatchVote:
    """One person's vote on the manifest they saw: approve or reject every member still waiting, or
    (where the batch's rule allows a subset) approve the members `approve` names and reject the rest
    with `reason`. A vote on another manifest than the batch's now is refused (`stale_manifest`)."""
    if verdict not in Vote.Verdict.values:
        raise VoteRefused("bad_verdict", "a vote is approve or reject")
    check_words(verdict, reason=reason)
    reason = (reason or "").strip()
    refusal: ServiceError | None = None
    with transaction.atomic(durable=True):
        batch, role = lock_batch_for(batch_pk, actor)
        clock = now or timezone.now()
        try:
            result = _vote(
                batch, actor, role, verdict, manifest_seen, approve, reason, step_up, page_hash, clock
            )
        except _RefusedAfterRecord as refused:
            refusal = refused.error
    if refusal is not None:
        raise refusal  # after the commit: the refusal's audit event stays
    return result


class _RefusedAfterRecord(Exception):
    """A refusal whose audit event must commit (a failed factor): raised after the transaction."""

    def __init__(self, error: ServiceError) -> None:
        super().__init__(error.message)
        self.error = error


def _vote(
    batch: Batch,
    actor: Any,
    role: str,
    verdict: str,
    manifest_seen: str,
    approve: list[str] | None,
    reason: str,
    step_up: StepUp | None,
    page_hash: str,
    clock: datetime,
) -> BatchVote:
    if batch.revoked_at is not None:
        raise VoteRefused("not_open", "No decision is open here: this batch was revoked.")
    if manifest_seen != batch.manifest_digest:
        raise VoteRefused(
            "stale_manifest",
            "the batch changed since you loaded it (a member was withdrawn or added); reload and review "
            "it again",
            "manifest",
        )
    members = list(batch.members.filter(standing=BatchMember.Standing.IN).order_by("position"))
    waiting: list[tuple[BatchMember, Proposal, VoterSlots]] = []
    for member in members:
        proposal, _ = lock_proposal_with_role(member.proposal_id, actor)
        if proposal.state in OPEN_FOR_VOTES:
            waiting.append((member, proposal, VoterSlots(proposal, actor, role=role)))
    if not waiting:
        raise VoteRefused("not_open", "No decision is open here: every member of this batch was decided.")
    by_request = {proposal.request_id: (member, proposal, slots) for member, proposal, slots in waiting}
    chosen = set(by_request) if approve is None else set(approve)
    if unknown := sorted(chosen - set(by_request)):
        raise VoteRefused(
            "not_in_batch", f"not a member waiting in this batch: {', '.join(unknown)}", "members"
        )
    partial = chosen != set(by_request)
    if partial:
        if verdict != Vote.Verdict.APPROVE or not chosen:
            raise VoteRefused("bad_subset", "choose the members to approve, at least one", "members")
        if not batch.rule.get("partial"):
            raise VoteRefused(
                "partial_not_allowed",
                "this batch's policy approves all of it or nothing; reject it instead",
                "members",
            )
        if not reason:
            raise VoteRefused("reason_required", "say why the members you leave out are rejected", "reason")
    for member, proposal, slots in waiting:
        refusal = refusal_to_vote(
            proposal, actor, proposal.action_digest, clock, slots=slots, batch_vote=True
        )
        if refusal is not None:
            raise VoteRefused(
                refusal.code,
                f"member {member.position} ({proposal.request_id}): {refusal.message}",
                refusal.field,
            )
    steps: dict[Any, tuple[str, datetime, dict[str, Any]]] = {}
    for _, proposal, _slots in waiting:
        step, step_refusal = check_step_up(proposal, actor, step_up)
        if step_refusal is not None:
            raise _RefusedAfterRecord(step_refusal)
        assert step is not None  # no refusal: check_step_up returned the step
        steps[proposal.pk] = (*step, auth_detail(step_up))
    excluded: list[str] = []
    votes: list[Vote] = []
    if partial:
        for member, proposal, slots in waiting:
            if proposal.request_id in chosen:
                continue
            votes.append(
                store_vote(
                    proposal,
                    actor,
                    slots,
                    Vote.Verdict.REJECT,
                    proposal.action_digest,
                    f"left out of the approved part of its batch: {reason}",
                    page_hash,
                    steps[proposal.pk],
                )
            )
            member.standing = BatchMember.Standing.EXCLUDED
            member.save(update_fields=["standing"])
            excluded.append(proposal.request_id)
        manifest = _new_manifest(batch, actor=actor_label(actor), change={"excluded": excluded})
    else:
        manifest = batch.manifest_digest
    for _member, proposal, slots in waiting:
        if proposal.request_id not in chosen and partial:
            continue
        proposal.manifest_digest = manifest
        votes.append(
            store_vote(
                proposal,
                actor,
                slots,
                verdict,
                proposal.action_digest,
                reason if verdict == Vote.Verdict.REJECT else "",
                page_hash,
                steps[proposal.pk],
            )
        )
    record(
        batch.tenant_id,
        actor=actor_label(actor),
        verb=Verb.BATCH_VOTED,
        subject=batch_subject(batch),
        data={
            "verdict": verdict,
            "manifest_seen": manifest_seen,
            "manifest": manifest,
            "members": sorted(chosen) if verdict == Vote.Verdict.APPROVE else sorted(by_request),
            "excluded": excluded,
            "reason": reason,
            "page_hash": page_hash,
        },
    )
    return BatchVote(votes=votes, excluded=excluded, manifest=manifest)


def break_glass_allowed(proposal: Proposal) -> bool:
    """Whether a batch member may be released alone by break-glass: only where every policy version of
    its batch says so (the merged rule's `break_glass`, approvals/policy/batching.py)."""
    member = BatchMember.objects.filter(proposal=proposal).select_related("batch").first()
    return member is not None and bool(member.batch.rule.get("break_glass"))


def may_revoke_batch(batch: Batch, user: Any, role: str) -> bool:
    """A tenant admin, or a person who approved one of its members."""
    if role == TenantMembership.Role.ADMIN:
        return True
    return Vote.objects.filter(
        proposal__batch_member__batch=batch, voter=user, verdict=Vote.Verdict.APPROVE
    ).exists()


def revoke_batch(batch_pk: Any, actor: Any, *, reason: str) -> Batch:
    """Take the whole batch back: every released member whose decision was not consumed is revoked
    (its consume is refused from now on), every member still waiting is cancelled. Members already
    started are left as they are (record a compensation note on their pages)."""
    reason = (reason or "").strip()
    if not reason:
        raise ActionRefused("reason_required", "a revocation needs a reason", "reason")
    with transaction.atomic(durable=True):
        batch, role = lock_batch_for(batch_pk, actor)
        if not may_revoke_batch(batch, actor, role):
            raise ActionRefused(
                "not_eligible", "only an approver of this batch or a tenant admin can revoke it"
            )
        if batch.revoked_at is not None:
            raise Conflict("not_revocable", "this batch was already revoked")
        who = actor_label(actor)
        revoked, cancelled = [], []
        for member in batch.members.filter(standing=BatchMember.Standing.IN).order_by("position"):
            proposal, _ = lock_proposal_with_role(member.proposal_id, actor)
            if proposal.state in RELEASED:
                revoke_proposal(proposal, actor=who, reason=f"batch revoked: {reason}", revoked_by=actor)
                revoked.append(proposal.request_id)
            elif proposal.state in WAITING_FOR_PEOPLE:
                transition(proposal, State.CANCELLED, actor=who, reason=f"batch revoked: {reason}")
                cancelled.append(proposal.request_id)
        batch.revoked_at = timezone.now()
        batch.revoked_by = actor
        batch.revoke_reason = reason
        batch.save(update_fields=["revoked_at", "revoked_by", "revoke_reason"])
        record(
            batch.tenant_id,
            actor=who,
            verb=Verb.BATCH_REVOKED,
            subject=batch_subject(batch),
            data={
                "reason": reason,
                "revoked": revoked,
                "cancelled": cancelled,
                "manifest": batch.manifest_digest,
            },
        )
    return batch
