"""The only write path of the approval domain.

Every function here is atomic, changes state only through `transition()`, writes its audit event in the
same transaction, and schedules broadcasts and deliveries with on_commit (events.py) or an outbox row.
Views, consumers, the REST API, management commands and admin actions call these; none of them saves a
domain row itself.

Refusals are exceptions carrying a stable `code` (used by the API, the socket and the tests). A refusal
that must leave a trace (a failed step-up, a vote after expiry) records its audit event and commits
before the exception is raised.
"""

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import rfc8785
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q

from approvals import events, keys, policy
from approvals.canonical import action_digest
from approvals.models import (
    Agent,
    ApproverGroup,
    Decision,
    GroupMembership,
    Halt,
    OutboxMessage,
    Policy,
    PolicyVersion,
    Proposal,
    Tenant,
    TenantMembership,
    Vote,
)
from approvals.schemas import ProposalSubmission
from approvals.signing import decision_claims, sign_decision
from approvals.states import ALLOWED, OPEN_FOR_VOTES, RELEASED, State, check_transition
from audit import chain as audit_chain
from audit.models import Verb

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------------
# Errors


class ServiceError(Exception):
    http_status = 400

    def __init__(self, code: str, message: str, field: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field

    def as_dict(self) -> dict:
        return {"error": {"code": self.code, "message": self.message, "field": self.field}}


class IntakeError(ServiceError):
    http_status = 400


class HaltedError(ServiceError):
    http_status = 503


class NotFound(ServiceError):
    http_status = 404


class VoteRefused(ServiceError):
    http_status = 403


class ConsumeRefused(ServiceError):
    http_status = 409


class Conflict(ServiceError):
    http_status = 409


def now_utc() -> datetime:
    return datetime.now(UTC)


# ---------------------------------------------------------------------------------------------------
# Actors and audit


def user_actor(user) -> str:
    return f"user:{user.get_username()}"


def agent_actor(agent: Agent) -> str:
    return f"agent:{agent.slug}"


SYSTEM = "system"


def record(tenant_id: int | None, *, actor: str, verb: str, subject: str, data: dict | None = None):
    """Append an audit event to the tenant's chain (or the system chain) in the current transaction."""
    return audit_chain.append(
        audit_chain.chain_for_tenant(tenant_id), actor=actor, verb=verb, subject=subject, data=data or {}
    )


def proposal_subject(proposal) -> str:
    return f"proposal:{proposal.id}"


def _audit_time(value: datetime | None) -> str | None:
    return audit_chain.format_time(value) if value else None


# ---------------------------------------------------------------------------------------------------
# The state machine


def transition(proposal: Proposal, target: str, *, actor: str, reason: str = "", data: dict | None = None):
    """The only code that changes Proposal.state. Compare-and-set on (state, rev): a concurrent change
    makes this raise Conflict instead of silently overwriting it."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("transition() must run inside a transaction")
    current = proposal.state
    check_transition(current, target)
    stamp = now_utc()
    fields = {"state": target, "rev": proposal.rev + 1}
    if target in {State.APPROVED, State.REJECTED, State.DENIED, State.ALLOWED, State.INFO_REQUESTED}:
        fields["decided_at"] = stamp
    if target == State.EXECUTING:
        fields["executing_since"] = stamp
    if target in {State.SUCCEEDED, State.FAILED}:
        fields["settled_at"] = stamp
    updated = Proposal.objects.filter(pk=proposal.pk, state=current, rev=proposal.rev).update(**fields)
    if updated != 1:
        raise Conflict("concurrent_change", "the proposal changed meanwhile; reload and try again")
    for name, value in fields.items():
        setattr(proposal, name, value)
    record(
        proposal.tenant_id,
        actor=actor,
        verb=Verb.PROPOSAL_TRANSITIONED,
        subject=proposal_subject(proposal),
        data={"from": current, "to": target, "reason": reason, "rev": proposal.rev, **(data or {})},
    )
    events.proposal_changed(proposal)
    return proposal


# ---------------------------------------------------------------------------------------------------
# Halt (kill switch)


def active_halt(tenant_id: int | None = None, agent_id: int | None = None) -> Halt | None:
    scope = Q(scope=Halt.Scope.GLOBAL)
    if tenant_id is not None:
        scope |= Q(scope=Halt.Scope.TENANT, tenant_id=tenant_id)
    if agent_id is not None:
        scope |= Q(scope=Halt.Scope.AGENT, agent_id=agent_id)
    return Halt.objects.filter(scope, lifted_at__isnull=True).order_by("created_at").first()


def _refuse_if_halted(tenant_id, agent_id, error_class=HaltedError):
    halt = active_halt(tenant_id, agent_id)
    if halt:
        raise error_class(
            "halted",
            f"Reviewer is halted for {halt.scope} ({halt.reason}); nothing is accepted "
            "until an operator resumes it",
        )


def halt(
    *, scope: str, operator, reason: str, tenant: Tenant | None = None, agent: Agent | None = None
) -> Halt:
    """Stop intake, votes and consumes in scope; revoke released-but-unconsumed decisions; queue CancelTask
    for their tasks and for tasks already executing. Tasks still waiting for people are left parked."""
    if not reason.strip():
        raise ServiceError("reason_required", "a halt needs a reason", "reason")
    if (scope == Halt.Scope.TENANT) != (tenant is not None) or (scope == Halt.Scope.AGENT) != (
        agent is not None
    ):
        raise ServiceError(
            "bad_scope", "name a tenant for a tenant halt, an agent for an agent halt, neither for global"
        )
    actor = user_actor(operator) if operator else SYSTEM
    with transaction.atomic():
        record_halt = Halt.objects.create(
            scope=scope, tenant=tenant, agent=agent, reason=reason, operator=operator
        )
        in_scope = Proposal.objects.select_for_update().order_by("pk")
        if tenant:
            in_scope = in_scope.filter(tenant=tenant)
        if agent:
            in_scope = in_scope.filter(agent=agent)
        # Lock every affected proposal before the first audit append takes a chain head: consumes and
        # votes lock their proposal first too, so a halt never deadlocks against them.
        released = list(in_scope.filter(state__in=RELEASED))
        running = list(in_scope.filter(state=State.EXECUTING))
        for proposal in released:
            _revoke(proposal, actor=actor, reason=f"halt: {reason}", revoked_by=operator)
        for proposal in running:
            # Consumed already, so nothing to revoke; but a kill switch also stops the task that runs.
            _enqueue(
                proposal,
                OutboxMessage.Kind.CANCEL,
                message_id=f"cancel-{proposal.id}",
                payload={"reason": f"halt: {reason}"},
            )
        tenant_id = tenant.id if tenant else (agent.tenant_id if agent else None)
        record(
            tenant_id,
            actor=actor,
            verb=Verb.HALT_STARTED,
            subject=f"halt:{record_halt.id}",
            data={
                "scope": scope,
                "tenant": tenant.slug if tenant else None,
                "agent": agent.slug if agent else None,
                "reason": reason,
                "revoked": [str(p.id) for p in released],
                "cancelled_running": [str(p.id) for p in running],
            },
        )
        record_halt.stopped = released + running  # for the caller's report; CancelTask is queued for each
    return record_halt


def resume(
    *,
    operator,
    reason: str = "",
    tenant: Tenant | None = None,
    agent: Agent | None = None,
    everything: bool = False,
) -> int:
    """Lift the active halts of exactly this scope. Returns how many were lifted."""
    actor = user_actor(operator) if operator else SYSTEM
    with transaction.atomic():
        halts = Halt.objects.select_for_update().filter(lifted_at__isnull=True)
        if everything:
            halts = halts.filter(scope=Halt.Scope.GLOBAL)
        elif tenant:
            halts = halts.filter(scope=Halt.Scope.TENANT, tenant=tenant)
        elif agent:
            halts = halts.filter(scope=Halt.Scope.AGENT, agent=agent)
        else:
            raise ServiceError("bad_scope", "name a tenant, an agent or everything")
        lifted = 0
        for item in halts:
            item.lifted_at = now_utc()
            item.lifted_by = operator
            item.save(update_fields=["lifted_at", "lifted_by"])
            tenant_id = item.tenant_id or (item.agent.tenant_id if item.agent_id else None)
            record(
                tenant_id,
                actor=actor,
                verb=Verb.HALT_LIFTED,
                subject=f"halt:{item.id}",
                data={"reason": reason},
            )
            lifted += 1
    return lifted


# ---------------------------------------------------------------------------------------------------
# Intake


def _expiry_for(requested: datetime | None, ttl_seconds: int, created: datetime) -> datetime:
    policy_expiry = created + timedelta(seconds=ttl_seconds)
    return min(requested, policy_expiry) if requested else policy_expiry


def submit_proposal(agent: Agent, submission: ProposalSubmission, *, via: str) -> tuple[Proposal, bool]:
    """Create the proposal for an agent's approval request (idempotent on agent, task, request id) and
    evaluate policy. Returns (proposal, created)."""
    request = submission.request
    # The digest is checked before the replay lookup: a replay must carry the action it names, or a
    # changed action under a known request_id would pass as the same request.
    try:
        recomputed = action_digest(request.action)
    except rfc8785.CanonicalizationError as error:
        raise IntakeError(
            "bad_action", f"action cannot be canonicalized: {error}", "request.action"
        ) from error
    if recomputed != request.action_digest:
        raise IntakeError(
            "digest_mismatch",
            f"action_digest does not match the action: Reviewer computed {recomputed} (RFC 8785 + SHA-256)",
            "request.action_digest",
        )
    existing = Proposal.objects.filter(
        agent=agent, task_id=submission.task_id, request_id=request.request_id
    ).first()
    if existing:
        return _same_request_or_error(existing, request), False

    canonical = rfc8785.dumps(request.action).decode()
    material = len(canonical) + len(rfc8785.dumps(request.consequences))
    if material > settings.PROPOSAL_MAX_BYTES:
        raise IntakeError(
            "too_large",
            f"action and consequences take {material} bytes; the limit is {settings.PROPOSAL_MAX_BYTES}",
            "request.action",
        )
    created_at = now_utc()
    if request.expires_at and request.expires_at <= created_at:
        raise IntakeError("already_expired", "expires_at is in the past", "request.expires_at")

    try:
        with transaction.atomic():
            if request.supersedes:
                # Lock the request this one replaces before the audit chain head, the order a vote on it
                # takes them in; the other order deadlocks against that vote on PostgreSQL.
                list(
                    Proposal.objects.select_for_update()
                    .filter(agent=agent, task_id=submission.task_id, request_id=request.supersedes)
                    .values_list("pk")
                )
            _refuse_if_halted(agent.tenant_id, agent.id)
            proposal = Proposal.objects.create(
                tenant_id=agent.tenant_id,
                agent=agent,
                task_id=submission.task_id,
                context_id=submission.context_id,
                request_id=request.request_id,
                summary=request.summary,
                action=request.action,
                action_canonical=canonical,
                action_digest=recomputed,
                tool=request.action["tool"],
                principal_id=request.principal.id,
                principal_display=request.principal.display,
                agent_version=request.agent_version,
                consequences=request.consequences,
                diff=[d.model_dump() for d in request.diff],
                evidence=[e.model_dump() for e in request.evidence],
                expires_at=request.expires_at
                or created_at + timedelta(seconds=agent.tenant.default_ttl_seconds),
            )
            record(
                agent.tenant_id,
                actor=agent_actor(agent),
                verb=Verb.PROPOSAL_SUBMITTED,
                subject=proposal_subject(proposal),
                data={
                    "via": via,
                    "task_id": proposal.task_id,
                    "context_id": proposal.context_id,
                    "request_id": proposal.request_id,
                    "tool": proposal.tool,
                    "action_digest": proposal.action_digest,
                    "principal": proposal.principal_id,
                    "agent_version": proposal.agent_version,
                    "supersedes": request.supersedes,
                },
            )
            if request.supersedes:
                _supersede(agent, submission.task_id, request.supersedes, proposal, actor=agent_actor(agent))
            _evaluate_and_route(proposal, requested_expiry=request.expires_at, actor=agent_actor(agent))
    except IntegrityError:
        # The same request arrived twice at once (push and REST): the other one created it.
        existing = Proposal.objects.filter(
            agent=agent, task_id=submission.task_id, request_id=request.request_id
        ).first()
        if existing is None:
            raise
        return _same_request_or_error(existing, request), False
    return proposal, True


def record_intake_refusal(
    agent: Agent, error: ServiceError, *, via: str, task_id: str = "", request_id: str = ""
) -> None:
    """Leave a trace of an authenticated agent's request that intake refused (a digest that does not
    match its action, a reused request id, a halt): the attempt itself is evidence."""
    with transaction.atomic():
        record(
            agent.tenant_id,
            actor=agent_actor(agent),
            verb=Verb.INTAKE_REFUSED,
            subject=f"agent:{agent.slug}",
            data={
                "via": via,
                "code": error.code,
                "field": error.field,
                "task_id": task_id[:200],
                "request_id": request_id[:200],
            },
        )


def _same_request_or_error(existing: Proposal, request) -> Proposal:
    if existing.action_digest != request.action_digest:
        raise IntakeError(
            "request_id_reused",
            "this request_id is already known with another action; a changed action needs a new request_id",
            "request.request_id",
        )
    return existing


def _supersede(agent: Agent, task_id: str, old_request_id: str, new: Proposal, *, actor: str):
    old = (
        Proposal.objects.select_for_update()
        .filter(agent=agent, task_id=task_id, request_id=old_request_id)
        .first()
    )
    if old is None:
        raise IntakeError(
            "unknown_supersedes",
            f"supersedes names {old_request_id!r}, which this task never asked for",
            "request.supersedes",
        )
    if State.SUPERSEDED not in ALLOWED[old.state]:
        raise IntakeError(
            "cannot_supersede", f"the request it supersedes is {old.state}", "request.supersedes"
        )
    transition(
        old,
        State.SUPERSEDED,
        actor=actor,
        reason=f"superseded by proposal {new.id}",
        data={"successor": str(new.id)},
    )
    Proposal.objects.filter(pk=new.pk).update(supersedes=old)
    new.supersedes = old


def _evaluate_and_route(proposal: Proposal, *, requested_expiry: datetime | None, actor: str):
    # The same context a policy dry run replays, so a dry run shows what intake would have done.
    context = policy.context_for_proposal(proposal)
    evaluation = policy.evaluate(proposal.tenant, policy.active_versions_for(proposal.tenant), context)
    proposal.requirements = evaluation.requirements
    proposal.risk = evaluation.risk
    proposal.expires_at = _expiry_for(requested_expiry, evaluation.ttl_seconds, proposal.created_at)
    proposal.save(update_fields=["requirements", "risk", "expires_at"])
    proposal.policy_versions.set(evaluation.versions)
    record(
        proposal.tenant_id,
        actor=SYSTEM,
        verb=Verb.POLICY_EVALUATED,
        subject=proposal_subject(proposal),
        data={
            "outcome": evaluation.outcome,
            "policies": [v.ref for v in evaluation.versions],
            "requirements": evaluation.requirements,
            "reason": evaluation.reason,
            "errors": evaluation.errors,
            "expires_at": _audit_time(proposal.expires_at),
        },
    )

    if evaluation.outcome == "deny":
        transition(proposal, State.DENIED, actor=SYSTEM, reason=evaluation.reason)
        _issue_decision(
            proposal,
            Decision.Kind.REJECTED,
            reason=evaluation.reason,
            approvers=_policy_approvers(evaluation),
            policy_ref=_first_ref(evaluation),
        )
    elif evaluation.outcome == "allow":
        transition(proposal, State.ALLOWED, actor=SYSTEM, reason=evaluation.reason)
        _issue_decision(
            proposal,
            Decision.Kind.APPROVED,
            reason=evaluation.reason,
            approvers=_policy_approvers(evaluation),
            policy_ref=_first_ref(evaluation),
        )
    else:
        transition(proposal, State.AWAITING_REVIEW, actor=SYSTEM, reason=evaluation.reason)
        proposal_id = proposal.id
        transaction.on_commit(lambda: _notify_eligible(proposal_id))


def _first_ref(evaluation) -> dict | None:
    return evaluation.versions[0].ref if evaluation.versions else None


def _policy_approvers(evaluation) -> list[dict]:
    return [
        {
            "sub": f"policy:{v.policy.slug}@{v.version}",
            "name": v.policy.name,
            "group": None,
            "auth": {"method": "policy"},
        }
        for v in evaluation.versions
    ]


def _notify_eligible(proposal_id) -> None:
    from approvals import notifications

    try:
        notifications.notify_eligible_reviewers(proposal_id)
    except Exception:  # a mail server outage must not undo or block intake
        log.exception("could not notify reviewers of proposal %s", proposal_id)


# ---------------------------------------------------------------------------------------------------
# Who may decide


def tenant_role(user, tenant_id) -> str | None:
    membership = TenantMembership.objects.filter(user=user, tenant_id=tenant_id).only("role").first()
    return membership.role if membership else None


def proposal_for_user(proposal_id, user) -> Proposal:
    """The proposal, if the user belongs to its tenant; NotFound otherwise (outsiders learn nothing)."""
    proposal = (
        Proposal.objects.select_related("agent", "tenant", "supersedes")
        .filter(pk=proposal_id, tenant__memberships__user=user)
        .first()
    )
    if proposal is None:
        raise NotFound("not_found", "no such proposal")
    return proposal


def threshold_groups(proposal: Proposal, requirements: dict | None = None) -> dict[str, ApproverGroup]:
    requirements = proposal.requirements if requirements is None else requirements
    slugs = [t["group"] for t in requirements.get("thresholds", [])]
    return {g.slug: g for g in ApproverGroup.objects.filter(tenant_id=proposal.tenant_id, slug__in=slugs)}


def user_groups_for(
    proposal: Proposal, user, groups: dict[str, ApproverGroup] | None = None
) -> list[ApproverGroup]:
    """Threshold groups the user is a member of right now."""
    groups = groups if groups is not None else threshold_groups(proposal)
    ids = set(
        GroupMembership.objects.filter(user=user, group__in=groups.values()).values_list(
            "group_id", flat=True
        )
    )
    return [g for g in groups.values() if g.id in ids]


def is_principal(proposal: Proposal, user) -> bool:
    return TenantMembership.objects.filter(
        tenant_id=proposal.tenant_id, user=user, principal_id=proposal.principal_id
    ).exists()


def ineligibility(proposal: Proposal, user) -> tuple[str, str] | None:
    """Why this user may not decide this proposal now, as (code, message); None if they may."""
    role = tenant_role(user, proposal.tenant_id)
    if role is None:
        return "not_found", "no such proposal"
    if role == TenantMembership.Role.COMPLIANCE:
        return "not_eligible", "compliance staff read and export; they do not vote"
    if is_principal(proposal, user) and not proposal.requirements.get("self_approval"):
        return "self_approval", "you are the person this action is for; someone else must decide it"
    if proposal.edited_by_id == user.id:
        return "edit_author", "you edited this proposal; someone else must decide it"
    if not user_groups_for(proposal, user):
        return "not_eligible", "you are not a member of a group this proposal needs"
    return None


# ---------------------------------------------------------------------------------------------------
# Quorum


@dataclass
class Quorum:
    required: list[dict]  # [{"group", "count"}]
    slots: dict[str, list[Vote]]  # group slug -> the approvals that fill it
    met: bool

    def missing(self) -> list[dict]:
        return [
            {"group": t["group"], "count": t["count"] - len(self.slots.get(t["group"], []))}
            for t in self.required
            if len(self.slots.get(t["group"], [])) < t["count"]
        ]


def count_quorum(proposal: Proposal, requirements: dict | None = None) -> Quorum:
    """Place each counting approval in at most one slot, using current group membership.

    A vote counts only while its voter is still a member of a group that needs them, is not the
    principal and did not author the edit. Placement is a bipartite matching (voters to group slots),
    so a person in two groups fills whichever slot completes the quorum, never both. `requirements`
    (default: the proposal's own) lets a policy change ask whether recorded votes meet new ones."""
    requirements = proposal.requirements if requirements is None else requirements
    required = [dict(t) for t in requirements.get("thresholds", [])]
    groups = threshold_groups(proposal, requirements)
    slug_of_group = {group.id: slug for slug, group in groups.items()}
    approvals = list(
        proposal.votes.filter(verdict=Vote.Verdict.APPROVE).select_related("voter").order_by("created_at")
    )
    memberships: dict[int, set[str]] = {}
    for membership in GroupMembership.objects.filter(
        group__in=groups.values(), user__in=[v.voter for v in approvals]
    ):
        memberships.setdefault(membership.user_id, set()).add(slug_of_group[membership.group_id])
    principal_users = set(
        TenantMembership.objects.filter(
            tenant_id=proposal.tenant_id, principal_id=proposal.principal_id
        ).values_list("user_id", flat=True)
    )
    capacity = {t["group"]: int(t["count"]) for t in required}
    assignment: dict[int, str] = {}  # vote index -> group slug

    def candidates(index: int) -> list[str]:
        vote = approvals[index]
        if vote.voter_id == proposal.edited_by_id:
            return []
        if vote.voter_id in principal_users and not requirements.get("self_approval"):
            return []
        return [slug for slug in capacity if slug in memberships.get(vote.voter_id, set())]

    def place(index: int, seen: set[str]) -> bool:
        for slug in candidates(index):
            if slug in seen:
                continue
            seen.add(slug)
            holders = [i for i, s in assignment.items() if s == slug]
            if len(holders) < capacity[slug]:
                assignment[index] = slug
                return True
            for holder in holders:
                if place_elsewhere(holder, seen):
                    assignment[index] = slug
                    return True
        return False

    def place_elsewhere(holder: int, seen: set[str]) -> bool:
        previous = assignment.pop(holder)
        if place(holder, seen):
            return True
        assignment[holder] = previous
        return False

    for index in range(len(approvals)):
        place(index, set())
    slots: dict[str, list[Vote]] = {}
    for index, slug in sorted(assignment.items()):
        slots.setdefault(slug, []).append(approvals[index])
    met = bool(required) and all(len(slots.get(t["group"], [])) >= int(t["count"]) for t in required)
    return Quorum(required=required, slots=slots, met=met)


# ---------------------------------------------------------------------------------------------------
# Votes


def _check_step_up(proposal: Proposal, user, otp_code: str, session) -> tuple[str, datetime] | None:
    """Returns (method, time) when step-up is satisfied, None when it is not."""
    from approvals import stepup

    mode = proposal.requirements.get("step_up", policy.PER_VOTE)
    if otp_code:
        method = stepup.verify_code(user, otp_code)
        if method is None:
            return None
        if session is not None:
            stepup.mark_fresh(session)
        return method, now_utc()
    if mode != policy.PER_VOTE and stepup.fresh_within(session, int(mode)):
        return f"session_step_up_{mode}s", now_utc()
    return None


def cast_vote(
    proposal_id,
    user,
    *,
    verdict: str,
    digest_seen: str,
    reason: str = "",
    otp_code: str = "",
    session=None,
    page_hash: str = "",
    now: datetime | None = None,
) -> Vote:
    """Record one person's approve/reject on the exact digest they saw; decide when the quorum is met
    or any eligible person rejects. Refusals raise VoteRefused (or NotFound for outsiders)."""
    if verdict not in Vote.Verdict.values:
        raise VoteRefused("bad_verdict", "a vote is approve or reject")
    reason = (reason or "").strip()
    if verdict == Vote.Verdict.REJECT and not reason:
        raise VoteRefused("reason_required", "a rejection needs a reason", "reason")
    refusal: VoteRefused | None = None
    with transaction.atomic():
        proposal = (
            Proposal.objects.select_for_update(of=("self",))
            .select_related("agent", "tenant")
            .filter(pk=proposal_id)
            .first()
        )
        if proposal is None or tenant_role(user, proposal.tenant_id) is None:
            raise NotFound("not_found", "no such proposal")
        clock = now or now_utc()
        refusal = _vote_refusal(proposal, user, digest_seen, clock)
        step = None
        if refusal is None:
            step = _check_step_up(proposal, user, otp_code, session)
            if step is None:
                refusal = (
                    VoteRefused(
                        "step_up_failed",
                        "that code is not valid (or was already used); try the current code",
                        "otp_code",
                    )
                    if otp_code
                    else VoteRefused("step_up_required", "this vote needs a fresh one-time code", "otp_code")
                )
                record(
                    proposal.tenant_id,
                    actor=user_actor(user),
                    verb=Verb.STEP_UP_FAILED,
                    subject=proposal_subject(proposal),
                    data={"code": refusal.code},
                )
        if refusal is not None:
            if refusal.code == "expired":
                _expire(proposal, reason="a vote arrived after expiry: silence never approves")
            if refusal.code not in {"step_up_failed", "step_up_required"}:
                record(
                    proposal.tenant_id,
                    actor=user_actor(user),
                    verb=Verb.VOTE_REFUSED,
                    subject=proposal_subject(proposal),
                    data={"code": refusal.code, "verdict": verdict},
                )
        else:
            vote = _store_vote(proposal, user, verdict, digest_seen, reason, page_hash, step)
    if refusal is not None:
        raise refusal
    return vote


def _vote_refusal(
    proposal: Proposal, user, digest_seen: str, clock: datetime, *, once_per_person: bool = True
) -> VoteRefused | None:
    """Why this person may not decide this proposal now (None if they may). Asking and editing are
    open to someone who already voted (once_per_person=False); a second vote is not."""
    halt_record = active_halt(proposal.tenant_id, proposal.agent_id)
    if halt_record:
        return VoteRefused("halted", f"votes are stopped: Reviewer is halted ({halt_record.reason})")
    if proposal.state not in OPEN_FOR_VOTES:
        return VoteRefused(
            "not_open", f"this proposal is {proposal.get_state_display()}; it takes no more votes"
        )
    if clock >= proposal.expires_at:
        return VoteRefused("expired", "this proposal expired; nothing will execute. The agent must ask again")
    if digest_seen != proposal.action_digest:
        return VoteRefused(
            "wrong_digest", "the action changed since you loaded it; reload and review it again", "digest"
        )
    why_not = ineligibility(proposal, user)
    if why_not:
        code, message = why_not
        return VoteRefused(code, message)
    if once_per_person and proposal.votes.filter(voter=user).exists():
        return VoteRefused("already_voted", "you already voted on this proposal; a person counts once")
    return None


def _store_vote(proposal, user, verdict, digest_seen, reason, page_hash, step) -> Vote:
    method, auth_at = step
    groups = user_groups_for(proposal, user)
    vote = Vote.objects.create(
        proposal=proposal,
        voter=user,
        verdict=verdict,
        digest_seen=digest_seen,
        page_hash=page_hash,
        reason=reason,
        auth_method=method,
        auth_at=auth_at,
        group=groups[0] if len(groups) == 1 else None,
    )
    record(
        proposal.tenant_id,
        actor=user_actor(user),
        verb=Verb.VOTE_CAST,
        subject=proposal_subject(proposal),
        data={
            "verdict": verdict,
            "digest_seen": digest_seen,
            "page_hash": page_hash,
            "reason": reason,
            "groups": [g.slug for g in groups],
            "auth": {"method": method, "at": _audit_time(auth_at)},
        },
    )
    if verdict == Vote.Verdict.REJECT:
        transition(proposal, State.REJECTED, actor=user_actor(user), reason=reason)
        _issue_decision(
            proposal,
            Decision.Kind.REJECTED,
            reason=reason,
            approvers=[_approver(vote, None)],
            policy_ref=_pinned_policy_ref(proposal),
        )
        return vote
    quorum = count_quorum(proposal)
    if quorum.met:
        approvers = [_approver(v, slug) for slug, votes in quorum.slots.items() for v in votes]
        transition(
            proposal,
            State.APPROVED,
            actor=user_actor(user),
            reason="quorum reached",
            data={"approved_by": [a["sub"] for a in approvers]},
        )
        _issue_decision(
            proposal,
            Decision.Kind.APPROVED,
            reason="approved by quorum",
            approvers=approvers,
            policy_ref=_pinned_policy_ref(proposal),
            quorum=quorum,
        )
    else:
        events.proposal_changed(proposal)  # a vote short of the quorum; transition() announces the rest
    return vote


def _approver(vote: Vote, group_slug: str | None) -> dict:
    voter = vote.voter
    return {
        "sub": f"user:{voter.get_username()}",
        "name": voter.get_full_name() or voter.get_username(),
        "group": group_slug,
        "auth": {"method": vote.auth_method, "at": _audit_time(vote.auth_at)},
    }


def _pinned_policy_ref(proposal: Proposal) -> dict | None:
    version = proposal.policy_versions.select_related("policy").order_by("policy__slug").first()
    return version.ref if version else None


def request_info(proposal_id, user, *, question: str, digest_seen: str) -> Decision:
    """Ask the agent a question: a needs_info decision; the agent answers with a new proposal."""
    question = (question or "").strip()
    if not question:
        raise VoteRefused("question_required", "write the question the agent must answer", "question")
    with transaction.atomic():
        proposal = (
            Proposal.objects.select_for_update(of=("self",))
            .select_related("agent", "tenant")
            .filter(pk=proposal_id)
            .first()
        )
        if proposal is None or tenant_role(user, proposal.tenant_id) is None:
            raise NotFound("not_found", "no such proposal")
        refusal = _vote_refusal(proposal, user, digest_seen, now_utc(), once_per_person=False)
        if refusal:
            raise refusal
        transition(proposal, State.INFO_REQUESTED, actor=user_actor(user), reason=question)
        return _issue_decision(
            proposal,
            Decision.Kind.NEEDS_INFO,
            reason=question,
            approvers=[_person(user, "none")],
            policy_ref=_pinned_policy_ref(proposal),
        )


def _person(user, method: str) -> dict:
    return {
        "sub": f"user:{user.get_username()}",
        "name": user.get_full_name() or user.get_username(),
        "group": None,
        "auth": {"method": method, "at": _audit_time(now_utc())},
    }


def edit_proposal(proposal_id, user, *, arguments: dict, digest_seen: str, note: str = "") -> Proposal:
    """A reviewer's edit never mutates a proposal: it creates a successor with a new digest that needs
    the full quorum again (and its author cannot approve it); the old one becomes superseded."""
    if not isinstance(arguments, dict):
        raise VoteRefused("bad_arguments", "arguments must be an object", "arguments")
    with transaction.atomic():
        old = (
            Proposal.objects.select_for_update(of=("self",))
            .select_related("agent", "tenant")
            .filter(pk=proposal_id)
            .first()
        )
        if old is None or tenant_role(user, old.tenant_id) is None:
            raise NotFound("not_found", "no such proposal")
        refusal = _vote_refusal(old, user, digest_seen, now_utc(), once_per_person=False)
        if refusal:
            raise refusal
        action = {**old.action, "arguments": arguments}
        if action == old.action:
            raise VoteRefused("no_change", "the edit changes nothing", "arguments")
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
            action_canonical=rfc8785.dumps(action).decode(),
            action_digest=digest,
            tool=old.tool,
            principal_id=old.principal_id,
            principal_display=old.principal_display,
            agent_version=old.agent_version,
            consequences=old.consequences,
            diff=old.diff,
            evidence=old.evidence,
            edited_by=user,
            expires_at=old.expires_at,
        )
        record(
            old.tenant_id,
            actor=user_actor(user),
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
            actor=user_actor(user),
            reason=note or "edited by a reviewer",
            data={"successor": str(new.id)},
        )
        new.supersedes = old
        new.save(update_fields=["supersedes"])
        remaining = max(int((old.expires_at - now_utc()).total_seconds()), 1)
        _evaluate_and_route(
            new, requested_expiry=now_utc() + timedelta(seconds=remaining), actor=user_actor(user)
        )
    return new


# ---------------------------------------------------------------------------------------------------
# Decisions


def supersession_chain(proposal: Proposal) -> list[str]:
    """Request ids this proposal replaces, newest first (what the agent originally asked for is last)."""
    chain, current = [], proposal.supersedes
    while current is not None:
        chain.append(current.request_id)
        current = current.supersedes
    return chain


def _issue_decision(
    proposal: Proposal,
    kind: str,
    *,
    reason: str,
    approvers: list[dict],
    policy_ref: dict | None,
    quorum: Quorum | None = None,
) -> Decision:
    """Sign the decision, store it, and queue its delivery to the agent, all in this transaction."""
    issued = now_utc()
    lifetime = min(
        int(proposal.requirements.get("ttl_seconds") or settings.DECISION_TOKEN_MAX_SECONDS),
        settings.DECISION_TOKEN_MAX_SECONDS,
    )
    consume = kind == Decision.Kind.APPROVED and bool(proposal.requirements.get("consume", True))
    decision = Decision(
        proposal=proposal,
        kind=kind,
        reason=reason[:2000],
        rev=proposal.rev,
        consume_required=consume,
        issued_at=issued,
        expires_at=issued + timedelta(seconds=lifetime),
    )
    quorum_claim = {
        "required": proposal.requirements.get("thresholds", []),
        "approved_by": [a["sub"] for a in approvers if not a["sub"].startswith("policy:")] if quorum else [],
    }
    claims = decision_claims(
        proposal=proposal,
        decision=decision,
        issued_at=issued,
        expires_at=decision.expires_at,
        approvers=approvers,
        quorum=quorum_claim,
        policy=policy_ref,
    )
    # An edited proposal answers a request the agent made earlier on this task: name the chain and the
    # exact action, so the agent can check the edit and execute only what was approved.
    claims["action"] = proposal.action
    claims["replaces"] = supersession_chain(proposal)
    decision.token, decision.kid = sign_decision(claims)
    decision.save()
    record(
        proposal.tenant_id,
        actor=SYSTEM,
        verb=Verb.DECISION_SIGNED,
        subject=proposal_subject(proposal),
        data={
            "jti": str(decision.jti),
            "kid": decision.kid,
            "decision": kind,
            "reason": decision.reason,
            "action_digest": proposal.action_digest,
            "rev": decision.rev,
            "consume": consume,
            "approvers": approvers,
            "policy": policy_ref,
            "expires_at": _audit_time(decision.expires_at),
            "task_id": proposal.task_id,
            "request_id": proposal.request_id,
        },
    )
    _enqueue(
        proposal,
        OutboxMessage.Kind.CONTINUE,
        message_id=f"decision-{decision.jti}",
        payload={"jti": str(decision.jti), "decision": kind, "reason": decision.reason},
    )
    return decision


def _enqueue(proposal: Proposal, kind: str, *, message_id: str, payload: dict) -> OutboxMessage:
    message, _ = OutboxMessage.objects.get_or_create(
        kind=kind,
        message_id=message_id,
        defaults={
            "agent_id": proposal.agent_id,
            "proposal": proposal,
            "payload": payload,
            "next_attempt_at": now_utc(),
        },
    )
    return message


def _revoke(proposal: Proposal, *, actor: str, reason: str, revoked_by=None):
    decision = Decision.objects.select_for_update().get(proposal=proposal)
    transition(proposal, State.REVOKED, actor=actor, reason=reason, data={"jti": str(decision.jti)})
    decision.revoked_at = now_utc()
    decision.revoked_by = revoked_by
    decision.revoke_reason = reason
    decision.save(update_fields=["revoked_at", "revoked_by", "revoke_reason"])
    record(
        proposal.tenant_id,
        actor=actor,
        verb=Verb.DECISION_REVOKED,
        subject=proposal_subject(proposal),
        data={"jti": str(decision.jti), "reason": reason},
    )
    _enqueue(
        proposal, OutboxMessage.Kind.CANCEL, message_id=f"cancel-{proposal.id}", payload={"reason": reason}
    )


def revoke_decision(proposal_id, user, *, reason: str) -> Proposal:
    """Take back a released decision before the agent consumed it; the agent's task is cancelled."""
    reason = (reason or "").strip()
    if not reason:
        raise VoteRefused("reason_required", "a revocation needs a reason", "reason")
    with transaction.atomic():
        proposal = Proposal.objects.select_for_update().filter(pk=proposal_id).first()
        if proposal is None or tenant_role(user, proposal.tenant_id) is None:
            raise NotFound("not_found", "no such proposal")
        role = tenant_role(user, proposal.tenant_id)
        approved_it = proposal.votes.filter(voter=user, verdict=Vote.Verdict.APPROVE).exists()
        if role != TenantMembership.Role.ADMIN and not approved_it:
            raise VoteRefused(
                "not_eligible", "only an approver of this decision or a tenant admin can revoke it"
            )
        if proposal.state not in RELEASED:
            message = (
                "the agent has started the work: it can no longer be revoked; record a compensation note"
                if proposal.state in {State.EXECUTING, State.SUCCEEDED, State.FAILED, State.UNKNOWN}
                else f"there is no released decision to revoke (the proposal is {proposal.state})"
            )
            raise Conflict("not_revocable", message)
        _revoke(proposal, actor=user_actor(user), reason=reason, revoked_by=user)
    return proposal


def note_compensation(proposal_id, user, *, note: str) -> Proposal:
    note = (note or "").strip()
    if not note:
        raise VoteRefused("note_required", "write the compensation note", "note")
    with transaction.atomic():
        proposal = Proposal.objects.select_for_update().filter(pk=proposal_id).first()
        if proposal is None or tenant_role(user, proposal.tenant_id) not in {
            TenantMembership.Role.ADMIN,
            TenantMembership.Role.REVIEWER,
        }:
            raise NotFound("not_found", "no such proposal")
        proposal.compensation_note = (proposal.compensation_note + "\n" + note).strip()[:5000]
        proposal.save(update_fields=["compensation_note"])
        record(
            proposal.tenant_id,
            actor=user_actor(user),
            verb=Verb.COMPENSATION_NOTED,
            subject=proposal_subject(proposal),
            data={"note": note[:2000]},
        )
    return proposal


def consume_decision(agent: Agent, jti, *, rev: int, now: datetime | None = None) -> Proposal:
    """Fencing: atomically move a released decision to executing, right before the side effect.
    Exactly one caller wins; every other gets ConsumeRefused with the reason."""
    clock = now or now_utc()
    refusal: ConsumeRefused | None = None
    with transaction.atomic():
        proposal, decision = _lock_decision(agent, jti)
        refusal = _consume_refusal(proposal, decision, rev, clock)
        if refusal is None:
            decision.consumed_at = clock
            decision.save(update_fields=["consumed_at"])
            transition(
                proposal,
                State.EXECUTING,
                actor=agent_actor(agent),
                reason="decision consumed",
                data={"jti": str(jti)},
            )
            record(
                proposal.tenant_id,
                actor=agent_actor(agent),
                verb=Verb.DECISION_CONSUMED,
                subject=proposal_subject(proposal),
                data={"jti": str(jti), "rev": rev},
            )
        else:
            if refusal.code == "expired" and proposal.state in RELEASED:
                _expire(proposal, reason="decision expired before it was consumed")
            elif refusal.code == "halted":
                # Released while a halt was committing (a vote or an intake raced it): revoke it as the
                # halt would have, so resuming never brings it back.
                halt_record = active_halt(proposal.tenant_id, proposal.agent_id)
                why = halt_record.reason if halt_record else "lifted meanwhile"
                _revoke(proposal, actor=SYSTEM, reason=f"halt: {why}")
            record(
                proposal.tenant_id,
                actor=agent_actor(agent),
                verb=Verb.DECISION_CONSUME_REFUSED,
                subject=proposal_subject(proposal),
                data={"jti": str(jti), "code": refusal.code},
            )
    if refusal is not None:
        raise refusal
    return proposal


def _lock_decision(agent: Agent, jti) -> tuple[Proposal, Decision]:
    """Lock a decision of this agent for a write: its proposal row first, then the decision, the order
    revoke, halt and expiry take them in (the other order deadlocks against them on PostgreSQL). Only the
    proposal row is locked, not the agent and tenant rows it is read with."""
    found = Decision.objects.filter(jti=jti, proposal__agent=agent).values_list("proposal_id", flat=True)
    proposal_id = found.first()
    if proposal_id is None:
        raise NotFound("not_found", "no decision with this id for this agent")
    locked = Proposal.objects.select_for_update(of=("self",)).select_related("agent", "tenant")
    return locked.get(pk=proposal_id), Decision.objects.select_for_update().get(jti=jti)


def _consume_refusal(
    proposal: Proposal, decision: Decision, rev: int, clock: datetime
) -> ConsumeRefused | None:
    if proposal.state == State.SUPERSEDED:
        # Checked first: the decision of a superseded proposal is a needs_info; the answer is the successor.
        return ConsumeRefused("superseded", "this proposal was superseded by a newer request")
    if decision.kind != Decision.Kind.APPROVED:
        return ConsumeRefused("not_approved", f"this decision is {decision.kind}; nothing may execute")
    if decision.revoked_at or proposal.state == State.REVOKED:
        return ConsumeRefused("revoked", "this decision was revoked; nothing may execute")
    if decision.consumed_at or proposal.state in {
        State.EXECUTING,
        State.SUCCEEDED,
        State.FAILED,
        State.UNKNOWN,
    }:
        return ConsumeRefused("consumed", "this decision was already consumed; it releases one execution")
    if proposal.state == State.EXPIRED or clock >= decision.expires_at:
        return ConsumeRefused("expired", "this decision expired; nothing may execute")
    if proposal.state not in RELEASED:
        return ConsumeRefused("not_released", f"the proposal is {proposal.state}")
    halt_record = active_halt(proposal.tenant_id, proposal.agent_id)
    if halt_record:
        return ConsumeRefused("halted", f"Reviewer is halted ({halt_record.reason})")
    if rev != decision.rev:
        return ConsumeRefused("stale_rev", f"the token was signed at rev {decision.rev}, not {rev}")
    return None


def record_outcome(
    agent: Agent, jti, *, status: str, transaction_id: str = "", detail: str = "", via: str = "api"
) -> Proposal:
    """The agent's report of what happened. Idempotent; unknown settles later to succeeded or failed."""
    targets = {"succeeded": State.SUCCEEDED, "failed": State.FAILED, "unknown": State.UNKNOWN}
    if status not in targets:
        raise ServiceError("bad_status", "status is succeeded, failed or unknown", "status")
    with transaction.atomic():
        proposal, decision = _lock_decision(agent, jti)
        target = targets[status]
        if proposal.state == target:
            return proposal  # the same report again (push and API both arrived)
        if proposal.state in RELEASED and not decision.consume_required:
            # No online consumption was required: the outcome report is the first sign it started.
            decision.consumed_at = now_utc()
            decision.save(update_fields=["consumed_at"])
            transition(proposal, State.EXECUTING, actor=agent_actor(agent), reason="outcome reported")
        if proposal.state not in {State.EXECUTING, State.UNKNOWN}:
            raise Conflict(
                "not_executing", f"the proposal is {proposal.state}; it has no execution to report on"
            )
        if proposal.state == State.UNKNOWN and target == State.UNKNOWN:
            return proposal
        proposal.transaction_id = (transaction_id or proposal.transaction_id)[:200]
        proposal.outcome_detail = (detail or "")[:1000]
        proposal.save(update_fields=["transaction_id", "outcome_detail"])
        transition(proposal, target, actor=agent_actor(agent), reason=f"outcome reported ({via})")
        record(
            proposal.tenant_id,
            actor=agent_actor(agent),
            verb=Verb.OUTCOME_RECORDED,
            subject=proposal_subject(proposal),
            data={
                "jti": str(jti),
                "status": status,
                "transaction_id": proposal.transaction_id,
                "idempotency_key": str(jti),
                "detail": proposal.outcome_detail,
                "via": via,
            },
        )
    return proposal


# ---------------------------------------------------------------------------------------------------
# Expiry and reconciliation (run by the worker; votes and consumes check the clock themselves)


def _expire(proposal: Proposal, *, reason: str):
    transition(proposal, State.EXPIRED, actor=SYSTEM, reason=reason)
    _enqueue(
        proposal, OutboxMessage.Kind.CANCEL, message_id=f"cancel-{proposal.id}", payload={"reason": reason}
    )


def expire_due(now: datetime | None = None) -> int:
    """Expire proposals waiting past their time and released decisions not consumed in time."""
    clock = now or now_utc()
    expired = 0
    waiting = Proposal.objects.filter(
        state__in=[State.AWAITING_REVIEW, State.INFO_REQUESTED], expires_at__lte=clock
    )
    released = Proposal.objects.filter(state__in=RELEASED, decision__expires_at__lte=clock)
    for proposal_id in list(waiting.values_list("pk", flat=True)) + list(
        released.values_list("pk", flat=True)
    ):
        with transaction.atomic():
            proposal = Proposal.objects.select_for_update().filter(pk=proposal_id).first()
            if proposal is None:
                continue
            due = (
                proposal.state in {State.AWAITING_REVIEW, State.INFO_REQUESTED}
                and proposal.expires_at <= clock
            ) or (proposal.state in RELEASED and proposal.decision.expires_at <= clock)
            if due:
                _expire(proposal, reason="expired: silence never approves")
                expired += 1
    return expired


def mark_unknown(proposal_id, *, reason: str) -> Proposal:
    """An execution whose result nobody can tell yet; only the agent's own state settles it."""
    with transaction.atomic():
        proposal = Proposal.objects.select_for_update().get(pk=proposal_id)
        if proposal.state == State.EXECUTING:
            transition(proposal, State.UNKNOWN, actor=SYSTEM, reason=reason)
    return proposal


def settle_from_task_state(proposal_id, *, task_state: str, detail: str = "") -> Proposal:
    """Reconciliation: the agent's task state (from GetTask or a push) settles an execution."""
    with transaction.atomic():
        locked = Proposal.objects.select_for_update(of=("self",)).select_related("agent")
        proposal = locked.get(pk=proposal_id)
        decision = getattr(proposal, "decision", None)
    if decision is None:
        return proposal
    if task_state == "TASK_STATE_COMPLETED":
        return record_outcome(
            proposal.agent, decision.jti, status="succeeded", detail=detail, via="task_state"
        )
    if task_state == "TASK_STATE_CANCELED" and proposal.state == State.EXECUTING:
        # A cancel (a halt) can land after the write started: cancelled is no proof nothing happened.
        return mark_unknown(proposal.id, reason="the task was cancelled while executing; outcome not known")
    if task_state in {"TASK_STATE_FAILED", "TASK_STATE_REJECTED"} and proposal.state == State.EXECUTING:
        return record_outcome(
            proposal.agent, decision.jti, status="failed", detail=detail or task_state, via="task_state"
        )
    return proposal


def close_for_ended_task(proposal_id, *, task_state: str) -> Proposal:
    """The agent's task ended (a push or GetTask says so) while its request still waited for people:
    nothing can act on a decision any more, so the request is cancelled rather than left in the queue."""
    with transaction.atomic():
        proposal = Proposal.objects.select_for_update().get(pk=proposal_id)
        if proposal.state in {State.AWAITING_REVIEW, State.INFO_REQUESTED}:
            transition(
                proposal,
                State.CANCELLED,
                actor=agent_actor(proposal.agent),
                reason=f"the agent's task ended ({task_state}) before a decision",
            )
    return proposal


# ---------------------------------------------------------------------------------------------------
# Outbox delivery (run by the worker; the network call happens between these, outside any transaction)


def outbox_backoff_seconds(attempts: int) -> int:
    """1, 2, 4, 8 ... seconds after the 1st, 2nd, 3rd ... failed attempt, capped."""
    return min(2 ** max(attempts - 1, 0), settings.OUTBOX_BACKOFF_CAP_SECONDS)


def claim_due_outbox(
    *, limit: int = 20, lease_seconds: int = 120, now: datetime | None = None
) -> list[OutboxMessage]:
    """Claim due pending messages for one worker: each claim counts an attempt and pushes
    next_attempt_at out by the lease, so no other worker takes the row while it is being delivered
    (and a worker that dies mid-delivery only delays it by the lease). SKIP LOCKED on PostgreSQL lets
    workers claim side by side; elsewhere the compare-and-set on next_attempt_at decides."""
    clock = now or now_utc()
    lease_until = clock + timedelta(seconds=lease_seconds)
    claimed = []
    with transaction.atomic():
        due = OutboxMessage.objects.filter(status=OutboxMessage.Status.PENDING, next_attempt_at__lte=clock)
        if transaction.get_connection().features.has_select_for_update_skip_locked:
            due = due.select_for_update(skip_locked=True)
        for message in due.order_by("next_attempt_at", "id")[:limit]:
            won = OutboxMessage.objects.filter(
                pk=message.pk,
                status=OutboxMessage.Status.PENDING,
                next_attempt_at=message.next_attempt_at,
            ).update(next_attempt_at=lease_until, attempts=message.attempts + 1)
            if won == 1:
                message.next_attempt_at, message.attempts = lease_until, message.attempts + 1
                claimed.append(message)
    return claimed


def _outbox_audit(message: OutboxMessage, verb: str, data: dict):
    proposal = Proposal.objects.only("id", "tenant_id").get(pk=message.proposal_id)
    record(
        proposal.tenant_id,
        actor=SYSTEM,
        verb=verb,
        subject=proposal_subject(proposal),
        data={
            "outbox_id": message.id,
            "kind": message.kind,
            "message_id": message.message_id,
            "attempts": message.attempts,
            **data,
        },
    )


def _locked_pending_outbox(message_id: int) -> OutboxMessage | None:
    """The row, locked, if it still waits for delivery; None once another worker settled it."""
    return (
        OutboxMessage.objects.select_for_update()
        .filter(pk=message_id, status=OutboxMessage.Status.PENDING)
        .first()
    )


def mark_outbox_delivered(message_id: int, *, note: str = "", now: datetime | None = None) -> bool:
    """The agent took the message. False if another worker settled the row first."""
    with transaction.atomic():
        message = _locked_pending_outbox(message_id)
        if message is None:
            return False
        message.status, message.delivered_at = OutboxMessage.Status.DELIVERED, now or now_utc()
        message.last_error = ""
        message.save(update_fields=["status", "delivered_at", "last_error"])
        _outbox_audit(message, Verb.OUTBOX_DELIVERED, {"note": note[:500]})
    return True


def mark_outbox_failed(message_id: int, *, error: str, now: datetime | None = None) -> OutboxMessage | None:
    """A failed attempt: retry with exponential backoff, or dead-letter after OUTBOX_MAX_ATTEMPTS
    (the row and its last error stay for an operator). None if the row is no longer pending."""
    clock = now or now_utc()
    error = error[:2000]
    with transaction.atomic():
        message = _locked_pending_outbox(message_id)
        if message is None:
            return None
        message.last_error = error
        if message.attempts >= settings.OUTBOX_MAX_ATTEMPTS:
            message.status = OutboxMessage.Status.DEAD
            message.save(update_fields=["status", "last_error"])
            _outbox_audit(message, Verb.OUTBOX_DEAD, {"error": error})
        else:
            message.next_attempt_at = clock + timedelta(seconds=outbox_backoff_seconds(message.attempts))
            message.save(update_fields=["next_attempt_at", "last_error"])
            _outbox_audit(
                message,
                Verb.OUTBOX_FAILED,
                {"error": error, "next_attempt_at": _audit_time(message.next_attempt_at)},
            )
    return message


def withdraw_outbox(message_id: int, *, reason: str) -> bool:
    """Never deliver this message: an approval whose decision was revoked or expired before it left
    (a decision that need not be consumed online would otherwise still be acted on). Kept as dead."""
    with transaction.atomic():
        message = _locked_pending_outbox(message_id)
        if message is None:
            return False
        message.status, message.last_error = OutboxMessage.Status.DEAD, f"withdrawn: {reason}"[:2000]
        message.save(update_fields=["status", "last_error"])
        _outbox_audit(message, Verb.OUTBOX_DEAD, {"withdrawn": True, "reason": reason})
    return True


# ---------------------------------------------------------------------------------------------------
# Agents


def register_agent(
    *,
    tenant: Tenant,
    slug: str,
    name: str,
    card_url: str,
    audience: str = "",
    push_token: str,
    api_token: str,
    outbound_auth_scheme: str = Agent.AuthScheme.NONE,
    outbound_auth_credentials: str = "",
    actor: str = SYSTEM,
) -> Agent:
    """Create or update an agent's registration; tokens are stored as sha256 hashes only."""
    from approvals.models import hash_token

    with transaction.atomic():
        owner = Agent.objects.select_for_update().filter(slug=slug).first()
        if owner is not None and owner.tenant_id != tenant.id:
            # Slugs are global: re-registering must never move another tenant's agent (and its tasks) here.
            raise Conflict("slug_taken", f"the agent slug {slug!r} is already taken", "slug")
        agent, created = Agent.objects.update_or_create(
            slug=slug,
            defaults={
                "tenant": tenant,
                "name": name,
                "card_url": card_url,
                "audience": audience or card_url,
                "push_token_hash": hash_token(push_token),
                "api_token_hash": hash_token(api_token),
                "outbound_auth_scheme": outbound_auth_scheme,
                "outbound_auth_credentials": outbound_auth_credentials,
            },
        )
        record(
            tenant.id,
            actor=actor,
            verb=Verb.AGENT_REGISTERED,
            subject=f"agent:{slug}",
            data={"created": created, "card_url": card_url, "audience": agent.audience},
        )
    return agent


def rotate_signing_key(*, actor: str = SYSTEM) -> str:
    with transaction.atomic():
        new_key, retired = keys.rotate()
        record(
            None,
            actor=actor,
            verb=Verb.SIGNING_KEY_ROTATED,
            subject=f"key:{new_key.kid}",
            data={"kid": new_key.kid, "retired": retired},
        )
    return new_key.kid


# ---------------------------------------------------------------------------------------------------
# Configuration: tenants, groups, policy versions
#
# Who may decide and by which rules changes only here: the Django admin, `manage.py setup_tenant` and
# `manage.py policy` call these. `actor` is the user making the change, or None for scripted set-up
# (recorded as system). Policy versions always need people: an author and a different approver.

# Verbs the audit enum does not name yet; the stored string stays the same once it does.
TENANT_CREATED = getattr(Verb, "TENANT_CREATED", "tenant.created")
TENANT_CHANGED = getattr(Verb, "TENANT_CHANGED", "tenant.changed")
GROUP_CREATED = getattr(Verb, "GROUP_CREATED", "group.created")
POLICY_CREATED = getattr(Verb, "POLICY_CREATED", "policy.created")
AGENT_CHANGED = getattr(Verb, "AGENT_CHANGED", "agent.changed")
AGENT_TOKENS_ROTATED = getattr(Verb, "AGENT_TOKENS_ROTATED", "agent.tokens_rotated")

ADMIN_GROUP_SLUG = "admins"
TTL_TOO_SHORT = "the default time to live is at least one second"


class ConfigRefused(ServiceError):
    http_status = 403


class PolicyInvalid(ServiceError):
    """A draft that cannot be stored; `errors` maps each field to what is wrong with it."""

    def __init__(self, errors: dict[str, str]):
        field = next(iter(errors))
        message = "; ".join(f"{name}: {text}" for name, text in errors.items())
        super().__init__("invalid_policy", message, field)
        self.errors = errors


def _config_actor(user) -> str:
    return user_actor(user) if user is not None else SYSTEM


def is_config_admin(user, tenant_id) -> bool:
    """Superusers configure every tenant; a tenant admin configures their own."""
    if user is None or not user.is_active:
        return False
    return user.is_superuser or tenant_role(user, tenant_id) == TenantMembership.Role.ADMIN


def admin_tenant_ids(user) -> list[int] | None:
    """The tenants this user configures; None means all of them (a superuser)."""
    if user.is_superuser:
        return None
    return list(
        TenantMembership.objects.filter(user=user, role=TenantMembership.Role.ADMIN).values_list(
            "tenant_id", flat=True
        )
    )


def _require_config_admin(user, tenant_id) -> None:
    if user is not None and not is_config_admin(user, tenant_id):
        raise ConfigRefused("not_admin", "only an admin of this tenant can change its configuration")


def _require_slug(value: str, field: str = "slug") -> str:
    from django.core.exceptions import ValidationError
    from django.core.validators import validate_slug

    try:
        validate_slug(value)
    except ValidationError:
        raise ServiceError("bad_slug", f"{value!r} is not a slug (letters, digits, - and _)", field) from None
    return value


def create_tenant(*, slug: str, name: str, actor=None, default_ttl_seconds: int = 3600) -> Tenant:
    """A tenant with its admin group, which the fail-closed default asks when no policy matches."""
    if actor is not None and not actor.is_superuser:
        raise ConfigRefused("not_admin", "only a superuser creates tenants")
    _require_slug(slug)
    if default_ttl_seconds < 1:
        raise ServiceError("bad_ttl", TTL_TOO_SHORT, "default_ttl_seconds")
    with transaction.atomic():
        if Tenant.objects.filter(slug=slug).exists():
            raise Conflict("slug_taken", f"a tenant {slug!r} exists already", "slug")
        tenant = Tenant.objects.create(slug=slug, name=name or slug, default_ttl_seconds=default_ttl_seconds)
        admins = ApproverGroup.objects.create(tenant=tenant, slug=ADMIN_GROUP_SLUG, name="Tenant admins")
        tenant.admin_group = admins
        tenant.save(update_fields=["admin_group"])
        record(
            tenant.id,
            actor=_config_actor(actor),
            verb=TENANT_CREATED,
            subject=f"tenant:{slug}",
            data={
                "slug": slug,
                "name": tenant.name,
                "default_ttl_seconds": default_ttl_seconds,
                "admin_group": ADMIN_GROUP_SLUG,
            },
        )
    return tenant


def update_tenant(
    tenant: Tenant,
    *,
    actor=None,
    name: str | None = None,
    default_ttl_seconds: int | None = None,
    admin_group: ApproverGroup | None = None,
) -> Tenant:
    """Change a tenant's name, default TTL or admin group (whom the fail-closed default asks)."""
    _require_config_admin(actor, tenant.id)
    if admin_group is not None and admin_group.tenant_id != tenant.id:
        raise ServiceError("foreign_group", "the admin group must belong to this tenant", "admin_group")
    if default_ttl_seconds is not None and default_ttl_seconds < 1:
        raise ServiceError("bad_ttl", TTL_TOO_SHORT, "default_ttl_seconds")
    with transaction.atomic():
        # No select_related: PostgreSQL cannot lock the nullable side of the outer join it would make.
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
        wanted = {
            "name": name,
            "default_ttl_seconds": default_ttl_seconds,
            "admin_group": admin_group.slug if admin_group is not None else None,
        }
        current = {
            "name": tenant.name,
            "default_ttl_seconds": tenant.default_ttl_seconds,
            "admin_group": tenant.admin_group.slug if tenant.admin_group_id else None,
        }
        changes = {
            key: [current[key], value]
            for key, value in wanted.items()
            if value is not None and value != current[key]
        }
        if not changes:
            return tenant
        if name is not None:
            tenant.name = name
        if default_ttl_seconds is not None:
            tenant.default_ttl_seconds = default_ttl_seconds
        if admin_group is not None:
            tenant.admin_group = admin_group
        tenant.save(update_fields=["name", "default_ttl_seconds", "admin_group"])
        record(
            tenant.id,
            actor=_config_actor(actor),
            verb=TENANT_CHANGED,
            subject=f"tenant:{tenant.slug}",
            data={"changes": changes},
        )
    return tenant


def set_tenant_membership(
    tenant: Tenant, user, *, role: str = TenantMembership.Role.REVIEWER, principal_id: str = "", actor=None
) -> TenantMembership:
    """Make a user a member of the tenant (or change their role or principal id). The principal id is how
    agents name this person in `principal.id`; it is what keeps them from deciding their own requests."""
    _require_config_admin(actor, tenant.id)
    if role not in TenantMembership.Role.values:
        raise ServiceError("bad_role", "the role is reviewer, compliance or admin", "role")
    principal_id = (principal_id or "").strip()
    if len(principal_id) > 200:
        raise ServiceError("bad_principal_id", "a principal id has at most 200 characters", "principal_id")
    with transaction.atomic():
        if (
            principal_id
            and TenantMembership.objects.filter(tenant=tenant, principal_id=principal_id)
            .exclude(user=user)
            .exists()
        ):
            raise Conflict(
                "principal_id_taken",
                f"another member already has principal id {principal_id!r}",
                "principal_id",
            )
        membership = TenantMembership.objects.select_for_update().filter(tenant=tenant, user=user).first()
        previous = {"role": membership.role, "principal_id": membership.principal_id} if membership else None
        if previous == {"role": role, "principal_id": principal_id}:
            return membership
        if role == TenantMembership.Role.COMPLIANCE and _group_slugs_of(tenant, user):
            raise Conflict(
                "compliance_in_group",
                "compliance staff do not vote: remove them from the approver groups first",
                "role",
            )
        if membership is None:
            membership = TenantMembership.objects.create(
                tenant=tenant, user=user, role=role, principal_id=principal_id
            )
        else:
            membership.role, membership.principal_id = role, principal_id
            membership.save(update_fields=["role", "principal_id"])
        record(
            tenant.id,
            actor=_config_actor(actor),
            verb=Verb.MEMBERSHIP_CHANGED,
            subject=f"user:{user.get_username()}",
            data={
                "user": user.get_username(),
                "role": role,
                "principal_id": principal_id,
                "previous": previous,
            },
        )
    return membership


def remove_tenant_membership(tenant: Tenant, user, *, actor=None) -> bool:
    """Take a user out of the tenant, and so out of its approver groups: their approvals stop counting."""
    _require_config_admin(actor, tenant.id)
    with transaction.atomic():
        membership = TenantMembership.objects.select_for_update().filter(tenant=tenant, user=user).first()
        if membership is None:
            return False
        for group in ApproverGroup.objects.filter(tenant=tenant, groupmembership__user=user):
            _remove_group_member(group, user, actor=actor)
        previous = {"role": membership.role, "principal_id": membership.principal_id}
        membership.delete()
        record(
            tenant.id,
            actor=_config_actor(actor),
            verb=Verb.MEMBERSHIP_CHANGED,
            subject=f"user:{user.get_username()}",
            data={"user": user.get_username(), "role": None, "principal_id": "", "previous": previous},
        )
    return True


def _group_slugs_of(tenant: Tenant, user) -> list[str]:
    groups = ApproverGroup.objects.filter(tenant=tenant, groupmembership__user=user)
    return list(groups.values_list("slug", flat=True))


def create_group(tenant: Tenant, *, slug: str, name: str = "", actor=None) -> ApproverGroup:
    _require_config_admin(actor, tenant.id)
    _require_slug(slug)
    with transaction.atomic():
        if ApproverGroup.objects.filter(tenant=tenant, slug=slug).exists():
            raise Conflict("slug_taken", f"the group {slug!r} exists already", "slug")
        group = ApproverGroup.objects.create(
            tenant=tenant, slug=slug, name=name or slug.replace("-", " ").title()
        )
        record(
            tenant.id,
            actor=_config_actor(actor),
            verb=GROUP_CREATED,
            subject=f"group:{slug}",
            data={"slug": slug, "name": group.name},
        )
    return group


def add_group_member(group: ApproverGroup, user, *, actor=None) -> GroupMembership:
    """Make a tenant member eligible to vote where this group is named. Idempotent."""
    _require_config_admin(actor, group.tenant_id)
    with transaction.atomic():
        role = tenant_role(user, group.tenant_id)
        if role is None:
            raise ServiceError(
                "not_a_member",
                f"{user.get_username()} is not a member of this tenant; add them to it first",
                "user",
            )
        if role == TenantMembership.Role.COMPLIANCE:
            raise Conflict(
                "compliance_in_group", "compliance staff read and export; they do not vote", "user"
            )
        membership, created = GroupMembership.objects.get_or_create(group=group, user=user)
        if created:
            record(
                group.tenant_id,
                actor=_config_actor(actor),
                verb=Verb.GROUP_MEMBER_ADDED,
                subject=f"group:{group.slug}",
                data={"group": group.slug, "user": user.get_username()},
            )
    return membership


def remove_group_member(group: ApproverGroup, user, *, actor=None) -> bool:
    """Take a user out of a group. Their approvals on open proposals stop counting at once (the quorum is
    counted with current memberships); returns whether they were a member."""
    _require_config_admin(actor, group.tenant_id)
    with transaction.atomic():
        return _remove_group_member(group, user, actor=actor)


def _remove_group_member(group: ApproverGroup, user, *, actor) -> bool:
    deleted, _ = GroupMembership.objects.filter(group=group, user=user).delete()
    if not deleted:
        return False
    record(
        group.tenant_id,
        actor=_config_actor(actor),
        verb=Verb.GROUP_MEMBER_REMOVED,
        subject=f"group:{group.slug}",
        data={"group": group.slug, "user": user.get_username()},
    )
    # Quorum pages showing this person's approval must re-read: it no longer counts.
    for proposal in Proposal.objects.filter(
        tenant_id=group.tenant_id, state__in=OPEN_FOR_VOTES, votes__voter=user
    ).distinct():
        events.proposal_changed(proposal)
    return True


def create_policy(tenant: Tenant, *, slug: str, name: str = "", actor=None) -> Policy:
    """A named policy with no version yet (it matches nothing until a version is activated)."""
    _require_config_admin(actor, tenant.id)
    _require_slug(slug)
    with transaction.atomic():
        if Policy.objects.filter(tenant=tenant, slug=slug).exists():
            raise Conflict("slug_taken", f"the policy {slug!r} exists already", "slug")
        created = Policy.objects.create(tenant=tenant, slug=slug, name=name or slug.replace("-", " "))
        record(
            tenant.id,
            actor=_config_actor(actor),
            verb=POLICY_CREATED,
            subject=f"policy:{slug}",
            data={"slug": slug, "name": created.name},
        )
    return created


POLICY_VERSION_DEFAULTS = {
    "agent_pattern": "*",
    "tool_pattern": "*",
    "condition": "",
    "thresholds": [],
    "step_up": policy.PER_VOTE,
    "ttl_seconds": 3600,
    "allow_self_approval": False,
    "consume_online": True,
    "risk": "",
}


def _checked_version_fields(tenant: Tenant, fields: dict) -> dict:
    values = {**POLICY_VERSION_DEFAULTS, **fields}
    group_slugs = set(ApproverGroup.objects.filter(tenant=tenant).values_list("slug", flat=True))
    errors = policy.version_field_errors(values, group_slugs)
    if errors:
        raise PolicyInvalid(errors)
    values["step_up"] = policy.validate_step_up(values["step_up"])
    values["thresholds"] = [{"group": t["group"], "count": t["count"]} for t in values["thresholds"]]
    return values


def create_policy_version(policy: Policy, fields: dict, author) -> PolicyVersion:
    """Store a new draft version of a policy. Versions are never edited: a change is a new draft, which
    takes effect only when a different admin activates it (activate_policy_version)."""
    if author is None:
        raise ConfigRefused("author_required", "a policy version needs an author: four eyes are two people")
    _require_config_admin(author, policy.tenant_id)
    with transaction.atomic():
        locked = Policy.objects.select_for_update(of=("self",)).select_related("tenant").get(pk=policy.pk)
        values = _checked_version_fields(locked.tenant, fields)
        latest = locked.versions.order_by("-version").values_list("version", flat=True).first() or 0
        active = locked.active_version
        version = PolicyVersion.objects.create(
            policy=locked, version=latest + 1, status=PolicyVersion.Status.DRAFT, author=author, **values
        )
        record(
            locked.tenant_id,
            actor=user_actor(author),
            verb=Verb.POLICY_VERSION_CREATED,
            subject=f"policy:{locked.slug}@{version.version}",
            data={
                "policy": locked.slug,
                "version": version.version,
                "active_version": active.version if active else None,
                **values,
            },
        )
    return version


def activate_policy_version(
    version: PolicyVersion, approver, *, now: datetime | None = None
) -> PolicyVersion:
    """Four eyes: a second admin approves a draft; it becomes the policy's active version and the version
    it replaces is retired, in one transaction. New proposals pin it; open ones keep what they pinned."""
    if approver is None:
        raise ConfigRefused("approver_required", "activating a policy version needs a second admin")
    with transaction.atomic():
        locked_policy = (
            Policy.objects.select_for_update(of=("self",)).select_related("tenant").get(pk=version.policy_id)
        )
        _require_config_admin(approver, locked_policy.tenant_id)
        draft = PolicyVersion.objects.select_for_update().get(pk=version.pk)
        if draft.status != PolicyVersion.Status.DRAFT:
            raise Conflict(
                "not_draft", f"version {draft.version} is {draft.status}; only a draft can be activated"
            )
        if draft.author_id is None or draft.author_id == approver.pk:
            raise ConfigRefused(
                "four_eyes", "the author of a policy version cannot activate it; another admin must"
            )
        current = (
            locked_policy.versions.select_for_update().filter(status=PolicyVersion.Status.ACTIVE).first()
        )
        if current is not None and current.version > draft.version:
            raise Conflict(
                "stale_draft",
                f"version {current.version} is active and newer than this draft; write a new draft from it",
            )
        # Groups may have changed since the draft was written: it must still name only existing ones.
        _checked_version_fields(
            locked_policy.tenant, {name: getattr(draft, name) for name in policy.VERSION_FIELDS}
        )
        if current is not None:
            current.status = PolicyVersion.Status.RETIRED
            current.save(update_fields=["status"])
        draft.status = PolicyVersion.Status.ACTIVE
        draft.activated_by = approver
        draft.activated_at = now or now_utc()
        draft.save(update_fields=["status", "activated_by", "activated_at"])
        record(
            locked_policy.tenant_id,
            actor=user_actor(approver),
            verb=Verb.POLICY_VERSION_ACTIVATED,
            subject=f"policy:{locked_policy.slug}@{draft.version}",
            data={
                "policy": locked_policy.slug,
                "version": draft.version,
                "author": draft.author.get_username(),
                "retired": current.version if current else None,
            },
        )
        _reevaluate_open_proposals(
            locked_policy.tenant,
            actor=user_actor(approver),
            because=f"policy {locked_policy.slug}@{draft.version} activated",
        )
    draft.policy = locked_policy
    return draft


def _stricter_requirements(old: dict, new: dict) -> dict:
    """What both demand: every group at the higher count, the stricter step-up, self-approval only if
    both allow it, online consumption if either asks for it."""
    counts = {t["group"]: int(t["count"]) for t in old.get("thresholds", [])}
    for threshold in new.get("thresholds", []):
        counts[threshold["group"]] = max(counts.get(threshold["group"], 0), int(threshold["count"]))
    return {
        "thresholds": [{"group": group, "count": count} for group, count in sorted(counts.items())],
        "step_up": policy.stricter_step_up(
            old.get("step_up", policy.PER_VOTE), new.get("step_up", policy.PER_VOTE)
        ),
        "self_approval": bool(old.get("self_approval")) and bool(new.get("self_approval")),
        "consume": bool(old.get("consume", True)) or bool(new.get("consume", True)),
        "ttl_seconds": min(int(old.get("ttl_seconds") or 10**9), int(new.get("ttl_seconds") or 10**9)),
    }


def _reevaluate_open_proposals(tenant: Tenant, *, actor: str, because: str) -> None:
    """A policy change while proposals wait never loosens them, and stops what it now forbids.

    Waiting proposals: a deny now cancels them (the agent's task is cancelled); stricter requirements
    are merged in (more approvals, stricter step-up), so the change routes them to the right people;
    a looser policy changes nothing. Released, unconsumed decisions: a deny, or requirements the
    recorded approvals no longer meet, revoke them."""
    open_states = [State.AWAITING_REVIEW, State.INFO_REQUESTED, *RELEASED]
    versions = policy.active_versions_for(tenant)
    for proposal in (
        Proposal.objects.select_for_update(of=("self",))
        .select_related("agent", "tenant")
        .filter(tenant=tenant, state__in=open_states)
        .order_by("pk")
    ):
        evaluation = policy.evaluate(tenant, versions, policy.context_for_proposal(proposal))
        if evaluation.outcome == "allow":
            continue
        if evaluation.outcome == "deny":
            reason = f"{because}: {evaluation.reason}"
            if proposal.state in RELEASED:
                _revoke(proposal, actor=actor, reason=reason)
            elif State.CANCELLED in ALLOWED[proposal.state]:
                transition(proposal, State.CANCELLED, actor=actor, reason=reason)
                _enqueue(
                    proposal,
                    OutboxMessage.Kind.CANCEL,
                    message_id=f"cancel-{proposal.id}",
                    payload={"reason": reason},
                )
            continue
        merged = _stricter_requirements(proposal.requirements, evaluation.requirements)
        if proposal.state == State.ALLOWED or (
            proposal.state == State.APPROVED and not count_quorum(proposal, merged).met
        ):
            _revoke(proposal, actor=actor, reason=f"{because}: the release no longer meets the policy")
            continue
        if merged == proposal.requirements:
            continue
        proposal.requirements = merged
        proposal.save(update_fields=["requirements"])
        proposal.policy_versions.add(*evaluation.versions)
        record(
            proposal.tenant_id,
            actor=actor,
            verb=Verb.POLICY_EVALUATED,
            subject=proposal_subject(proposal),
            data={
                "outcome": "require_approval",
                "reevaluated": True,
                "reason": because,
                "policies": [v.ref for v in evaluation.versions],
                "requirements": merged,
            },
        )
        events.proposal_changed(proposal)


AGENT_EDITABLE = ("name", "card_url", "audience", "outbound_auth_scheme", "outbound_auth_credentials")


def update_agent(agent: Agent, *, actor=None, **changes) -> Agent:
    """Change an agent's registration (not its slug, tenant or tokens: see rotate_agent_tokens)."""
    unknown = set(changes) - set(AGENT_EDITABLE)
    if unknown:
        raise ServiceError("bad_field", "cannot change " + ", ".join(sorted(unknown)))
    _require_config_admin(actor, agent.tenant_id)
    with transaction.atomic():
        agent = Agent.objects.select_for_update().get(pk=agent.pk)
        changed = [name for name, value in changes.items() if getattr(agent, name) != value]
        if not changed:
            return agent
        for name in changed:
            setattr(agent, name, changes[name])
        agent.save(update_fields=changed)
        # Outbound credentials are secrets: the trail says they changed, never what they are.
        record(
            agent.tenant_id,
            actor=_config_actor(actor),
            verb=AGENT_CHANGED,
            subject=f"agent:{agent.slug}",
            data={
                "changed": changed,
                **{name: changes[name] for name in changed if name != "outbound_auth_credentials"},
            },
        )
    return agent


def rotate_agent_tokens(agent: Agent, *, actor=None) -> tuple[str, str]:
    """New push and API tokens for an agent; the old ones stop working at once. Returns (push, api): the
    only time anyone sees them, since only their hashes are stored."""
    from approvals.models import hash_token, new_token

    _require_config_admin(actor, agent.tenant_id)
    push_token, api_token = new_token(), new_token()
    with transaction.atomic():
        updated = Agent.objects.filter(pk=agent.pk).update(
            push_token_hash=hash_token(push_token), api_token_hash=hash_token(api_token)
        )
        if updated != 1:
            raise NotFound("not_found", "no such agent")
        record(
            agent.tenant_id,
            actor=_config_actor(actor),
            verb=AGENT_TOKENS_ROTATED,
            subject=f"agent:{agent.slug}",
            data={"rotated": ["push_token", "api_token"]},
        )
    return push_token, api_token


# ---------------------------------------------------------------------------------------------------
# A person's second factor (django-otp devices). Codes and keys never reach the audit trail.

BACKUP_CODE_COUNT = 10


def _person_chains(user) -> list[int | None]:
    """A device belongs to a person, not a tenant: every tenant they work in records the change."""
    return list(TenantMembership.objects.filter(user=user).values_list("tenant_id", flat=True)) or [None]


def record_sign_in_code_refused(user, *, throttled: bool) -> None:
    """The right password with a wrong (or throttled) one-time code: the password may be known to
    someone else, which the person's tenants should see. Nothing typed is recorded. (A wrong password
    is not recorded: anyone could flood the trail with those.)"""
    with transaction.atomic():
        for tenant_id in _person_chains(user):
            record(
                tenant_id,
                actor=user_actor(user),
                verb=Verb.SIGN_IN_CODE_REFUSED,
                subject=f"user:{user.get_username()}",
                data={"throttled": throttled},
            )


def _enrolling_device(device_model, user):
    return device_model.objects.select_for_update().filter(user=user, confirmed=False).order_by("id").first()


def start_totp_enrollment(user):
    """The authenticator a person is setting up: the same unconfirmed device until they confirm it."""
    from django_otp.plugins.otp_totp.models import TOTPDevice

    with transaction.atomic():
        device = _enrolling_device(TOTPDevice, user)
        if device is None:
            device = TOTPDevice.objects.create(user=user, name="authenticator", confirmed=False)
    return device


def confirm_totp_enrollment(user, *, code: str) -> tuple[object, list[str]]:
    """Confirm the authenticator with a code it shows and issue backup codes. Returns (device, codes):
    the codes are shown once. A wrong code counts against django-otp's throttle, so it commits first."""
    from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
    from django_otp.plugins.otp_totp.models import TOTPDevice

    refusal: ServiceError | None = None
    with transaction.atomic():
        device = _enrolling_device(TOTPDevice, user)
        if device is None:
            raise Conflict("no_enrollment", "no authenticator is being set up; start again", "otp_token")
        if not device.verify_token((code or "").strip().replace(" ", "")):
            refusal = ServiceError(
                "bad_code",
                "that is not the code your authenticator shows now; type the current six digits",
                "otp_token",
            )
        else:
            device.confirmed = True
            device.save(update_fields=["confirmed"])
            StaticDevice.objects.filter(user=user).delete()
            backup = StaticDevice.objects.create(user=user, name="backup codes", confirmed=True)
            codes = [StaticToken.random_token() for _ in range(BACKUP_CODE_COUNT)]
            StaticToken.objects.bulk_create([StaticToken(device=backup, token=c) for c in codes])
            for tenant_id in _person_chains(user):
                record(
                    tenant_id,
                    actor=user_actor(user),
                    verb=Verb.DEVICE_ENROLLED,
                    subject=f"user:{user.get_username()}",
                    data={"device": "totp", "backup_codes": BACKUP_CODE_COUNT},
                )
    if refusal is not None:
        raise refusal
    return device, codes


def reset_devices(user, by, *, reason: str = "") -> int:
    """An admin removes a person's authenticators and backup codes (a lost phone). Sessions verified
    with them stop being verified; the person enrolls again at their next sign-in. Returns how many."""
    from django_otp import devices_for_user

    shared_admin = TenantMembership.objects.filter(
        user=by,
        role=TenantMembership.Role.ADMIN,
        tenant_id__in=TenantMembership.objects.filter(user=user).values("tenant_id"),
    ).exists()
    if not (by.is_superuser or shared_admin):
        raise VoteRefused(
            "not_allowed", "only an admin of one of this person's tenants can reset their devices"
        )
    with transaction.atomic():
        devices = list(devices_for_user(user, confirmed=None))
        for device in devices:
            device.delete()
        for tenant_id in _person_chains(user):
            record(
                tenant_id,
                actor=user_actor(by),
                verb=Verb.DEVICE_RESET,
                subject=f"user:{user.get_username()}",
                data={"devices_removed": len(devices), "reason": reason},
            )
    return len(devices)
