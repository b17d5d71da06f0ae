"""The worker's reconciliation of executions with the agents' own task state (GetTask).

An execution that has run longer than EXECUTING_RECONCILE_SECONDS settles from a terminal task or
becomes unknown; an unknown one settles once the task completed (services.reconcile.apply_task_state);
a request still awaiting review is closed if its task ended (its push may have been lost: A2A push is
best-effort). Nothing here ever approves anything.
"""

import logging
import threading
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from approvals.a2a.client import DeliveryError, get_task_state
from approvals.models import Agent, Proposal
from approvals.services.reconcile import apply_task_state, mark_unknown
from approvals.states import WAITING_FOR_PEOPLE, State
from approvals.worker.report import TickReport

log = logging.getLogger(__name__)

# How often one execution's task is asked for its state once it is overdue or unknown. Requests still
# awaiting review are asked every EXECUTING_RECONCILE_SECONDS: a lost push is rare, a queue is long.
RECONCILE_EVERY_SECONDS = 30
# GetTask calls per pass at most, so one pass stays short.
RECONCILE_BATCH = 20


class ExecutionReconciler:
    """What the passes remember: when each proposal's task was last asked, and whose waiting requests
    come next."""

    def __init__(self, stop: threading.Event):
        self.stop = stop
        # proposal id -> when its task was last asked: GetTask at most every RECONCILE_EVERY_SECONDS.
        self._last_checked: dict[str, datetime] = {}
        # Whose waiting requests the last pass looked at, and where each agent's next look goes on.
        self._waiting_agent = 0
        self._waiting_after: dict[int, uuid.UUID | None] = {}

    def reconcile(self, report: TickReport, now: datetime | None = None) -> None:
        """One bounded pass (RECONCILE_BATCH GetTask calls at most); counts what changed in the report."""
        clock = now or timezone.now()
        overdue = clock - timedelta(seconds=settings.EXECUTING_RECONCILE_SECONDS)
        # A pull agent has no task state to ask for (no card URL): its outcome is what it reports.
        proposals = Proposal.objects.select_related("agent").filter(agent__delivery=Agent.Delivery.A2A)
        executions = list(proposals.filter(state=State.EXECUTING, executing_since__lte=overdue)) + list(
            proposals.filter(state=State.UNKNOWN)
        )
        due = [p for p in executions if self._due(p, clock, RECONCILE_EVERY_SECONDS)]
        waiting = self._next_waiting(proposals.filter(created_at__lte=overdue, state__in=WAITING_FOR_PEOPLE))
        due += [p for p in waiting if self._due(p, clock, settings.EXECUTING_RECONCILE_SECONDS)]
        for proposal in due[:RECONCILE_BATCH]:
            if self.stop.is_set():
                return
            self._last_checked[str(proposal.id)] = clock
            if self._reconcile_one(proposal):
                report.reconciled += 1
        # A check older than both intervals is due again anyway: what is kept is bounded by the checks
        # of one interval, not by the number of waiting requests.
        horizon = clock - timedelta(
            seconds=max(RECONCILE_EVERY_SECONDS, settings.EXECUTING_RECONCILE_SECONDS)
        )
        self._last_checked = {key: at for key, at in self._last_checked.items() if at > horizon}

    def _next_waiting(self, waiting) -> list[Proposal]:
        """The next RECONCILE_BATCH requests waiting for people of one A2A agent, the agents taking
        turns, each agent's from where its last turn stopped (id order, over the index of what waits by
        agent and id) and starting over after its last: each request gets its turn however long the
        queue, and a tick reads at most one agent's waiting requests (its open ceiling bounds them),
        never the whole queue."""
        agents = sorted(Agent.objects.filter(delivery=Agent.Delivery.A2A).values_list("id", flat=True))
        if not agents:
            return []
        agent_id = next((a for a in agents if a > self._waiting_agent), agents[0])
        self._waiting_agent = agent_id
        waiting = waiting.filter(agent_id=agent_id).order_by("id")
        after = self._waiting_after.get(agent_id)
        if after is not None:
            waiting = waiting.filter(id__gt=after)
        batch = list(waiting[:RECONCILE_BATCH])
        self._waiting_after[agent_id] = batch[-1].id if len(batch) == RECONCILE_BATCH else None
        return batch

    def _due(self, proposal: Proposal, clock: datetime, every: int) -> bool:
        last = self._last_checked.get(str(proposal.id))
        return last is None or (clock - last).total_seconds() >= every

    def _reconcile_one(self, proposal: Proposal) -> bool:
        """Ask the agent for the task's state; returns whether the proposal changed."""
        agent = proposal.agent
        try:
            snapshot = get_task_state(agent, proposal.task_id)
            why = f"the task is still {snapshot.state}"
        except DeliveryError as error:
            snapshot, why = None, str(error)
        if snapshot is not None and snapshot.is_terminal:
            changed = apply_task_state(agent, proposal.task_id, snapshot.state, detail=snapshot.detail)
            if changed:
                log.info(
                    "reconciled proposal %s from task %s: %s", proposal.id, proposal.task_id, snapshot.state
                )
            return bool(changed)
        if proposal.state == State.EXECUTING:
            # Never re-approve: an execution nobody can account for waits in unknown for the agent's word.
            mark_unknown(
                proposal.id,
                reason=f"executing for over {settings.EXECUTING_RECONCILE_SECONDS}s "
                f"without an outcome; {why}",
            )
            log.warning("proposal %s is unknown: %s", proposal.id, why)
            return True
        return False
