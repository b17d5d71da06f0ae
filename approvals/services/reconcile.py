"""Expiry and reconciliation run by the worker: expired proposals, unknown outcomes, ended tasks."""

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from approvals.models import Agent, Proposal
from approvals.services.common import agent_actor
from approvals.services.decisions import record_outcome
from approvals.services.lifecycle import expire_proposal, transition
from approvals.states import RELEASED, WAITING_FOR_PEOPLE, State
from audit.labels import SYSTEM
from lib.errors import ServiceError

log = logging.getLogger(__name__)

# A2A task states after which the agent's task can no longer act (TaskState names).
TERMINAL_TASK_STATES = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
)


def expire_due(now: datetime | None = None) -> int:
    """Expire proposals waiting past their time and released decisions not consumed in time."""
    clock = now or timezone.now()
    expired = 0
    waiting = Proposal.objects.filter(state__in=WAITING_FOR_PEOPLE, expires_at__lte=clock)
    released = Proposal.objects.filter(state__in=RELEASED, decision__expires_at__lte=clock)
    for proposal_id in list(waiting.values_list("pk", flat=True)) + list(
        released.values_list("pk", flat=True)
    ):
        with transaction.atomic(durable=True):
            proposal = Proposal.objects.select_for_update().filter(pk=proposal_id).first()
            if proposal is None:
                continue
            due = (proposal.state in WAITING_FOR_PEOPLE and proposal.expires_at <= clock) or (
                proposal.state in RELEASED and proposal.decision.expires_at <= clock
            )
            if due:
                expire_proposal(proposal, reason="expired: silence never approves")
                expired += 1
    return expired


def mark_unknown(proposal_id, *, reason: str) -> Proposal:
    """An execution whose result nobody can tell yet; only the agent's own state settles it."""
    with transaction.atomic(durable=True):
        proposal = Proposal.objects.select_for_update().get(pk=proposal_id)
        if proposal.state == State.EXECUTING:
            transition(proposal, State.UNKNOWN, actor=SYSTEM, reason=reason)
    return proposal


def settle_from_task_state(proposal_id, *, task_state: str, detail: str = "") -> Proposal:
    """Reconciliation: the agent's task state (from GetTask or a push) settles an execution."""
    with transaction.atomic(durable=True):
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
    with transaction.atomic(durable=True):
        proposal = Proposal.objects.select_for_update().get(pk=proposal_id)
        if proposal.state in WAITING_FOR_PEOPLE:
            transition(
                proposal,
                State.CANCELLED,
                actor=agent_actor(proposal.agent),
                reason=f"the agent's task ended ({task_state}) before a decision",
            )
    return proposal


def apply_task_state(agent: Agent, task_id: str, task_state: str, *, detail: str = "") -> list[Proposal]:
    """What a task's terminal state tells Reviewer (from a push or GetTask). It settles an execution
    through settle_from_task_state (which decides what each state proves: an outcome already
    unknown settles only on COMPLETED, so a failed task never invites a duplicate approval), and closes
    a request still waiting for people, since its task can no longer act. Never approves anything.
    Returns what changed."""
    if task_state not in TERMINAL_TASK_STATES:
        return []
    changed = []
    waiting = (State.EXECUTING, State.UNKNOWN, *WAITING_FOR_PEOPLE, *RELEASED)
    for proposal in Proposal.objects.filter(agent=agent, task_id=task_id, state__in=waiting).select_related(
        "decision"
    ):
        before = proposal.state
        try:
            if before in WAITING_FOR_PEOPLE:
                after = close_for_ended_task(proposal.id, task_state=task_state).state
            elif before in RELEASED and proposal.decision.consume_required:
                continue  # released, never consumed: nothing ran; expiry closes it
            else:
                after = settle_from_task_state(proposal.id, task_state=task_state, detail=detail).state
        except ServiceError as error:
            log.warning(
                "task %s of %s is %s, but proposal %s stays %s: %s",
                task_id,
                agent.slug,
                task_state,
                proposal.id,
                before,
                error.message,
            )
            continue
        if after != before:
            changed.append(proposal)
    return changed
