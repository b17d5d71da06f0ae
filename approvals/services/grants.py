"""Standing grants: asking for one, its approval, the calls it decides, revocation, recertification.

The rules (the terms, whether a call fits, where policies forbid grants) are
approvals/policy/grants.py; the rows approvals/models/grants.py.

- A grant is asked for with an approval request of `reviewer.grant` (intake: `grant_terms_or_error`
  before its transaction, `plan_grant` inside it). Policy evaluates it like any request, but only
  people decide it (approvals/policy/evaluation.py); `grant_decided` makes it active or declined when
  its decision is signed.
- Every later call is submitted and evaluated by policy as usual. Only a call policy sends to people
  may be decided by a grant instead: `plan_grant` locks the agent's grants in force (SELECT ... FOR
  UPDATE, after intake's quota lock), and the first that fits is spent with the call
  (`GrantPlan.carry_out`: an UPDATE held with intake's other writes, under that lock, so concurrent
  calls never spend past it). A call that does not fit goes to people, and the grants it missed are
  recorded with why, for the proposal page.
- `revoke_grant` ends it at once and revokes the released, unconsumed decisions made under it;
  `ask_for_renewals` and `lapse_expired_grants` are worker jobs (approvals/worker/jobs.py).
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from approvals.models import Decision, Grant, GrantMiss, GrantUse, PolicyVersion, Proposal, Vote
from approvals.policy.evaluation import Evaluation, context_for_proposal
from approvals.policy.grants import (
    GrantTerms,
    GrantTermsError,
    amount_left,
    amount_of,
    applies_to,
    forbidding_call,
    forbidding_request,
    is_grant_request,
    misfit,
    parse_terms,
)
from approvals.selectors import tenant_role
from approvals.services.common import proposal_subject
from approvals.services.lifecycle import revoke_proposal
from approvals.states import RELEASED
from approvals.storage.rows import insert_held, update_held
from audit.labels import SYSTEM, actor_label
from audit.models import Verb
from audit.trail import audit_time, record
from lib.errors import Conflict, IntakeError, NotFound, RevokeRefused
from tenants.models import TenantMembership

# Ended grants still named on the page of a call that would have fitted them, this long after.
RECENTLY_ENDED = timedelta(days=7)


def grant_subject(grant: Grant) -> str:
    return f"grant:{grant.id}"


# ---------------------------------------------------------------------------------------------------
# Intake


def grant_terms_or_error(action: dict[str, Any], principal_id: str, now: datetime) -> GrantTerms | None:
    """The terms of a grant request (None for any other tool); IntakeError `bad_grant` naming the
    argument when a term cannot be granted (a condition that does not compile, a window in the past...)."""
    if not is_grant_request(str(action.get("tool") or "")):
        return None
    try:
        return parse_terms(action.get("arguments") or {}, principal_id=principal_id, now=now)
    except GrantTermsError as error:
        raise IntakeError("bad_grant", error.message, f"request.action.arguments.{error.key}") from error


@dataclass
class GrantPlan:
    """What intake does about grants for one proposal, decided under the grants' lock, written with the
    proposal (`carry_out`)."""

    terms: GrantTerms | None = None  # a grant request: the Grant row to create
    use: Grant | None = None  # the grant that decides this call
    amount: Decimal | None = None
    currency: str = ""
    uses_left: int = 0
    amount_left: dict[str, str] = field(default_factory=dict)
    misses: list[tuple[Grant, str]] = field(default_factory=list)

    @property
    def claim(self) -> dict[str, Any] | None:
        """The decision's `grant` claim (docs/agents/decision-token.md)."""
        if self.use is None:
            return None
        return {"id": str(self.use.id), "uses_left": self.uses_left, "amount_left": self.amount_left}

    def approvers(self) -> list[dict[str, Any]]:
        """The decision's approvers: the grant, with the people who approved it."""
        assert self.use is not None
        return [
            {
                "sub": f"grant:{self.use.id}",
                "name": f"standing grant {str(self.use.id)[:8]}",
                "group": None,
                "auth": {"method": "grant"},
                "reason": "",
                "reservation": "",
                "approved_by": list(self.use.approved_by),
            }
        ]

    def carry_out(self, proposal: Proposal) -> None:
        """Write it, in intake's transaction, right after the proposal's insert: the grant requested, or
        the grant spent (before the decision is signed), or the misses recorded."""
        if self.terms is not None:
            create_requested(proposal, self.terms)
        if self.use is not None:
            _spend(self, proposal)
        for grant, reason in self.misses:
            insert_held(GrantMiss(grant=grant, proposal=proposal, reason=reason[:300]))


def plan_grant(
    proposal: Proposal,
    evaluation: Evaluation,
    versions: list[PolicyVersion],
    history: dict[str, Any],
    now: datetime,
    terms: GrantTerms | None,
    *,
    grants_named: bool = True,
) -> GrantPlan | None:
    """Inside intake's transaction, after policy evaluated the proposal. A grant request: refused
    (`grant_forbidden`) where a policy forbids grants for its tools. A call policy sends to people: the
    agent's grants in force that name it are locked; the first that fits (the one expiring first)
    decides it (the evaluation becomes an allow under the grant, consumed online); the others that name
    it are misses. None: nothing to do (allowed or denied by policy, and no grant names it).
    `grants_named`: intake's one read says whether the agent has any grant to read (no query if not)."""
    if terms is not None:
        forbidding = forbidding_request(versions, proposal.agent.slug, terms.tool_pattern)
        if forbidding is not None:
            raise IntakeError(
                "grant_forbidden",
                f"policy {forbidding.policy.slug}@{forbidding.version} forbids grants "
                f"for {terms.tool_pattern}",
                "request.action.arguments.tool_pattern",
            )
        return GrantPlan(terms=terms)
    if evaluation.outcome != "require_approval" or not grants_named:
        return None
    grants = [
        grant
        for grant in Grant.objects.select_for_update()
        .filter(
            Q(state=Grant.State.ACTIVE) | Q(state__in=[Grant.State.REVOKED, Grant.State.LAPSED]),
            agent=proposal.agent,
            expires_at__gt=now - RECENTLY_ENDED,
        )
        .order_by("expires_at", "id")
        if applies_to(grant, principal_id=proposal.principal_id, tool=proposal.tool)
    ]
    if not grants:
        return None
    context = context_for_proposal(proposal, history=history, versions=versions)
    forbidding = forbidding_call(versions, context)
    plan = GrantPlan()
    for grant in grants:
        why: str | None = misfit(grant, context, now)
        if forbidding is not None:
            why = f"policy {forbidding.policy.slug}@{forbidding.version} forbids grants for this call"
        if why is None:
            _use(plan, grant, proposal, evaluation)
            return plan
        plan.misses.append((grant, why))
    return plan


def _use(plan: GrantPlan, grant: Grant, proposal: Proposal, evaluation: Evaluation) -> None:
    """The call fits `grant`: what it spends and leaves, and the evaluation it is decided by."""
    figure, currency = amount_of(proposal.action.get("arguments") or {})
    plan.use, plan.misses = grant, []
    plan.amount, plan.currency = figure, currency if figure is not None else ""
    if grant.max_amount and figure is not None:
        grant.spent = {**grant.spent, currency: str(Decimal(grant.spent.get(currency, "0")) + figure)}
    plan.uses_left = grant.max_uses - grant.uses - 1
    plan.amount_left = amount_left(grant)
    left = ", ".join(f"{c} {a}" for c, a in plan.amount_left.items())
    evaluation.outcome = "allow"
    evaluation.reason = (
        f"allowed under standing grant {grant.id}: {plan.uses_left} uses{' and ' + left if left else ''} left"
    )
    # Online consumption, whatever the policy asked: a revoked grant must be able to stop its calls.
    evaluation.consume = True
    proposal.requirements = evaluation.requirements


def _spend(plan: GrantPlan, proposal: Proposal) -> None:
    grant = plan.use
    assert grant is not None
    # The row is locked (FOR UPDATE) since plan_grant read it active and under its budget, so nobody can
    # have changed it: the spend is held with intake's other writes, one round trip for all of them.
    assert grant.state == Grant.State.ACTIVE and grant.uses < grant.max_uses
    grant.uses += 1
    update_held(grant, ("uses", "spent"))
    insert_held(
        GrantUse(
            grant=grant,
            proposal=proposal,
            currency=plan.currency,
            amount=plan.amount,
            uses_left=plan.uses_left,
            amount_left=plan.amount_left,
        )
    )
    record(
        proposal.tenant_id,
        actor=SYSTEM,
        verb=Verb.GRANT_USED,
        subject=proposal_subject(proposal),
        data={
            "grant": str(grant.id),
            "tool": proposal.tool,
            "amount": "" if plan.amount is None else str(plan.amount),
            "currency": plan.currency,
            "uses_left": plan.uses_left,
            "amount_left": plan.amount_left,
        },
    )


def create_requested(proposal: Proposal, terms: GrantTerms, *, renews: Grant | None = None) -> Grant:
    """The Grant row of a grant request just stored (intake, or a renewal: services/grant_renewals.py)."""
    grant = Grant.objects.create(
        tenant_id=proposal.tenant_id,
        proposal=proposal,
        agent=proposal.agent,
        principal_id=terms.principal,
        tool_pattern=terms.tool_pattern,
        condition=terms.condition,
        not_before=terms.not_before,
        expires_at=terms.expires_at,
        max_uses=terms.max_uses,
        max_amount=terms.max_amount,
        environment=terms.environment,
        data_class=terms.data_class,
        renews=renews,
    )
    record(
        proposal.tenant_id,
        actor=SYSTEM,
        verb=Verb.GRANT_REQUESTED,
        subject=grant_subject(grant),
        data={
            "proposal": str(proposal.id),
            **({"renews": str(renews.id)} if renews is not None else {}),
            **_terms_data(grant),
        },
    )
    return grant


def _terms_data(grant: Grant) -> dict[str, Any]:
    return {
        "principal": grant.principal_id,
        "tool_pattern": grant.tool_pattern,
        "condition": grant.condition,
        "not_before": audit_time(grant.not_before) if grant.not_before else None,
        "expires_at": audit_time(grant.expires_at),
        "max_uses": grant.max_uses,
        "max_amount": grant.max_amount,
        "environment": grant.environment,
        "data_class": grant.data_class,
    }


# ---------------------------------------------------------------------------------------------------
# Its decision


def grant_decided(proposal: Proposal, decision: Decision, approvers: list[dict[str, Any]]) -> None:
    """Called when a grant request's decision is signed (approvals/services/decisions.py), in its
    transaction: approved by people, the grant is in force; anything else declines it."""
    grant = Grant.objects.select_for_update().filter(proposal=proposal).first()
    if grant is None or grant.state != Grant.State.PROPOSED:
        return
    now = decision.issued_at
    people = [a["sub"] for a in approvers if not a["sub"].startswith("policy:")]
    if decision.kind == Decision.Kind.APPROVED and people:
        grant.state = Grant.State.ACTIVE
        grant.activated_at = now
        grant.approved_by = people
        grant.save(update_fields=["state", "activated_at", "approved_by"])
        verb = Verb.GRANT_ACTIVATED
    else:
        grant.state = Grant.State.DECLINED
        grant.ended_at = now
        grant.end_reason = decision.reason[:2000]
        grant.save(update_fields=["state", "ended_at", "end_reason"])
        verb = Verb.GRANT_DECLINED
    record(
        proposal.tenant_id,
        actor=SYSTEM,
        verb=verb,
        subject=grant_subject(grant),
        data={"proposal": str(proposal.id), "decision": decision.kind, "approved_by": people},
    )


# ---------------------------------------------------------------------------------------------------
# Revocation


def may_manage(grant: Grant, user: Any) -> bool:
    """Who may revoke a grant (and renew it): a tenant admin, or a person who approved it."""
    if tenant_role(user, grant.tenant_id) == TenantMembership.Role.ADMIN:
        return True
    return Vote.objects.filter(
        proposal_id=grant.proposal_id, voter=user, verdict=Vote.Verdict.APPROVE
    ).exists()


def revoke_grant(grant_id: Any, actor: Any, *, reason: str) -> Grant:
    """End a grant in force at once, with a reason; the released decisions made under it that the agent
    has not consumed yet are revoked with it (their consume is refused, their tasks cancelled)."""
    reason = (reason or "").strip()
    if not reason:
        raise RevokeRefused("reason_required", "a revocation needs a reason", "reason")
    with transaction.atomic(durable=True):
        grant = Grant.objects.select_for_update().filter(pk=grant_id, tenant__memberships__user=actor).first()
        if grant is None:
            raise NotFound("not_found", "no such grant")
        if not may_manage(grant, actor):
            raise RevokeRefused(
                "not_eligible", "only an approver of this grant or a tenant admin can revoke it"
            )
        if grant.state != Grant.State.ACTIVE:
            raise Conflict(
                "not_revocable", f"the grant is {grant.state}; only a grant in force can be revoked"
            )
        now = timezone.now()
        grant.state = Grant.State.REVOKED
        grant.ended_at, grant.ended_by, grant.end_reason = now, actor, reason[:2000]
        grant.save(update_fields=["state", "ended_at", "ended_by", "end_reason"])
        released = list(
            Proposal.objects.select_for_update(of=("self",))
            .select_related("agent", "tenant")
            .filter(grant_use__grant=grant, state__in=sorted(RELEASED))
            .order_by("id")
        )
        for proposal in released:
            revoke_proposal(
                proposal, actor=actor_label(actor), reason=f"grant revoked: {reason}"[:2000], revoked_by=actor
            )
        record(
            grant.tenant_id,
            actor=actor_label(actor),
            verb=Verb.GRANT_REVOKED,
            subject=grant_subject(grant),
            data={
                "reason": reason[:2000],
                "uses": grant.uses,
                "decisions_revoked": [str(p.id) for p in released],
            },
        )
    return grant


# ---------------------------------------------------------------------------------------------------
# Recertification (worker jobs)


def renewal_notice(grant: Grant) -> timedelta:
    """How long before its expiry a grant's approvers are asked: GRANT_RENEWAL_NOTICE_SECONDS, or a
    fifth of its window when that is shorter (a one-day grant is not flagged at its start)."""
    start = grant.not_before or grant.activated_at or grant.created_at
    return min(timedelta(seconds=settings.GRANT_RENEWAL_NOTICE_SECONDS), (grant.expires_at - start) / 5)


def ask_for_renewals(now: datetime | None = None, batch: int = 100) -> list[tuple[Grant, list[Any]]]:
    """Record, once for each grant in force that nears its expiry, that its approvers are asked to renew
    it or let it lapse (a renewal is a new grant request they vote on; nothing renews by itself). Returns
    each grant asked about with its approvers, for the worker to tell them after the commit
    (approvals/notify/grant_renewals.py)."""
    now = now or timezone.now()
    horizon = now + timedelta(seconds=settings.GRANT_RENEWAL_NOTICE_SECONDS)
    asked = []
    candidates = Grant.objects.filter(
        state=Grant.State.ACTIVE, renewal_asked_at=None, expires_at__lte=horizon, expires_at__gt=now
    ).order_by("expires_at")[:batch]
    for candidate in candidates:
        if candidate.expires_at - renewal_notice(candidate) > now:
            continue
        with transaction.atomic(durable=True):
            grant = (
                Grant.objects.select_for_update(of=("self",))
                .filter(pk=candidate.pk, state=Grant.State.ACTIVE, renewal_asked_at=None)
                .select_related("proposal", "agent")
                .first()
            )
            if grant is None:
                continue
            grant.renewal_asked_at = now
            grant.save(update_fields=["renewal_asked_at"])
            people = _approvers_of(grant)
            record(
                grant.tenant_id,
                actor=SYSTEM,
                verb=Verb.GRANT_RENEWAL_ASKED,
                subject=grant_subject(grant),
                data={"expires_at": audit_time(grant.expires_at), "asked": [actor_label(p) for p in people]},
            )
        asked.append((grant, people))
    return asked


def _approvers_of(grant: Grant) -> list[Any]:
    votes = Vote.objects.filter(proposal_id=grant.proposal_id, verdict=Vote.Verdict.APPROVE).select_related(
        "voter"
    )
    return [vote.voter for vote in votes if vote.voter.is_active]


def lapse_expired_grants(now: datetime | None = None, batch: int = 200) -> int:
    """Grants whose expiry passed: in force, they lapse (never renewed silently); asked for and never
    decided, they lapse too. One transaction each. Returns how many lapsed."""
    now = now or timezone.now()
    due = list(
        Grant.objects.filter(
            state__in=[Grant.State.ACTIVE, Grant.State.PROPOSED], expires_at__lte=now
        ).values_list("pk", flat=True)[:batch]
    )
    lapsed = 0
    for pk in due:
        with transaction.atomic(durable=True):
            changed = Grant.objects.filter(
                pk=pk, state__in=[Grant.State.ACTIVE, Grant.State.PROPOSED], expires_at__lte=now
            ).update(state=Grant.State.LAPSED, ended_at=now, end_reason="expired")
            if changed:
                grant = Grant.objects.get(pk=pk)
                record(
                    grant.tenant_id,
                    actor=SYSTEM,
                    verb=Verb.GRANT_LAPSED,
                    subject=grant_subject(grant),
                    data={
                        "expires_at": audit_time(grant.expires_at),
                        "uses": grant.uses,
                        "spent": grant.spent,
                    },
                )
                lapsed += 1
    return lapsed
