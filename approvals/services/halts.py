"""The kill switch: halting and resuming a tenant or one agent."""

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from approvals.models import Agent, Halt, Proposal, QuotaState
from approvals.services.lifecycle import enqueue_cancel, revoke_proposal, transition
from approvals.states import RELEASED, WAITING_FOR_PEOPLE, State

# Intake's one read and the consume's claim ask for a halt inside a statement they make anyway: the same
# question as active_halt, as plain SQL (its bench row and test are in approvals/storage/halts.py).
from audit.labels import actor_label
from audit.models import Verb
from audit.trail import record
from lib.errors import HaltedError, ServiceError
from tenants.models import Tenant


def active_halts(tenant_id: int | None = None, agent_id: int | None = None):
    """The halts in force on everything, the tenant or the agent, oldest first."""
    scope = Q(scope=Halt.Scope.GLOBAL)
    if tenant_id is not None:
        scope |= Q(scope=Halt.Scope.TENANT, tenant_id=tenant_id)
    if agent_id is not None:
        scope |= Q(scope=Halt.Scope.AGENT, agent_id=agent_id)
    return Halt.objects.filter(scope, lifted_at__isnull=True).order_by("created_at")


def active_halt(tenant_id: int | None = None, agent_id: int | None = None) -> Halt | None:
    return active_halts(tenant_id, agent_id).first()


def refuse_halted(halt: Halt, error_class=HaltedError):
    raise error_class(
        "halted",
        f"Reviewer is halted for {halt.scope} ({halt.reason}); nothing is accepted "
        "until an operator resumes it",
    )


def halt(*, scope: str, actor, reason: str, tenant: Tenant | None = None, agent: Agent | None = None) -> Halt:
    """Stop intake, votes and consumes in scope; revoke released-but-unconsumed decisions; cancel what still
    waits for people; queue CancelTask for all their tasks and for tasks already executing.

    An operator halting a runaway agent expects nothing of it to stay pending: a request
    parked for review is cancelled too, not left to be approved after a resume. The agent asks again
    once it runs again."""
    if not reason.strip():
        raise ServiceError("reason_required", "a halt needs a reason", "reason")
    if (scope == Halt.Scope.TENANT) != (tenant is not None) or (scope == Halt.Scope.AGENT) != (
        agent is not None
    ):
        raise ServiceError(
            "bad_scope", "name a tenant for a tenant halt, an agent for an agent halt, neither for global"
        )
    label = actor_label(actor)
    with transaction.atomic():
        record_halt = Halt.objects.create(
            scope=scope, tenant=tenant, agent=agent, reason=reason, operator=actor
        )
        _wait_for_intakes_in_flight(tenant or (agent.tenant if agent else None))
        in_scope = Proposal.objects.select_for_update().order_by("pk")
        if tenant:
            in_scope = in_scope.filter(tenant=tenant)
        if agent:
            in_scope = in_scope.filter(agent=agent)
        # Lock every affected proposal before the first audit append takes a chain head: consumes and
        # votes lock their proposal first too, so a halt never deadlocks against them.
        released = list(in_scope.filter(state__in=RELEASED))
        waiting = list(in_scope.filter(state__in=WAITING_FOR_PEOPLE))
        running = list(in_scope.filter(state=State.EXECUTING))
        for proposal in released:
            revoke_proposal(proposal, actor=label, reason=f"halt: {reason}", revoked_by=actor)
        for proposal in waiting:
            transition(proposal, State.CANCELLED, actor=label, reason=f"halt: {reason}")
            enqueue_cancel(proposal, reason=f"halt: {reason}")
        for proposal in running:
            # Consumed already, so nothing to revoke; but a kill switch also stops the task that runs.
            enqueue_cancel(proposal, reason=f"halt: {reason}")
        tenant_id = tenant.id if tenant else (agent.tenant_id if agent else None)
        record(
            tenant_id,
            actor=label,
            verb=Verb.HALT_STARTED,
            subject=f"halt:{record_halt.id}",
            data={
                "scope": scope,
                "tenant": tenant.slug if tenant else None,
                "agent": agent.slug if agent else None,
                "reason": reason,
                "revoked": [str(p.id) for p in released],
                "cancelled_waiting": [str(p.id) for p in waiting],
                "cancelled_running": [str(p.id) for p in running],
            },
        )
        # For the caller's report; CancelTask is queued for each.
        record_halt.stopped = released + waiting + running
    return record_halt


def _wait_for_intakes_in_flight(tenant: Tenant | None) -> None:
    """Lock the tenant's quota row (every tenant's, for a global halt), as every intake of the tenant
    does from before its halt check until its commit (approvals/storage/quotas.py). An intake that
    checked before this halt existed has committed once the lock is ours, so the proposals read next
    include what it let in (a decision it consumed for its agent is then cancelled with the rest); an
    intake that comes later waits for this halt to commit and reads it. Tenant rows in id order, as
    two halts take them. (A tenant's very first intake creates that row, so a halt during that one
    intake does not wait for it.)"""
    rows = QuotaState.objects.select_for_update().filter(agent__isnull=True).order_by("tenant_id")
    if tenant is not None:
        rows = rows.filter(tenant=tenant)
    list(rows.values_list("pk", flat=True))


def resume(
    *,
    actor,
    reason: str = "",
    tenant: Tenant | None = None,
    agent: Agent | None = None,
    everything: bool = False,
) -> int:
    """Lift the active halts of exactly this scope. Returns how many were lifted."""
    label = actor_label(actor)
    with transaction.atomic(durable=True):
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
            item.lifted_at = timezone.now()
            item.lifted_by = actor
            item.save(update_fields=["lifted_at", "lifted_by"])
            tenant_id = item.tenant_id or (item.agent.tenant_id if item.agent else None)
            record(
                tenant_id,
                actor=label,
                verb=Verb.HALT_LIFTED,
                subject=f"halt:{item.id}",
                data={"reason": reason},
            )
            lifted += 1
    return lifted
