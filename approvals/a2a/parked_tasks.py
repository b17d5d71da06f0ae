"""Finding tasks whose push was lost: ListTasks(status=AUTH_REQUIRED), agent by agent (DESIGN "A2A
contract", intake 2: "a reconciliation loop ... ListTasks(status=AUTH_REQUIRED) where the agent lets
Reviewer's identity list its tasks, because A2A push is best-effort and never retried").

The worker calls `ParkedTaskLister.reconcile` once per tick. For each agent that is due it reads one page
of its parked tasks and hands every approval request found there to intake, exactly as a push would
(idempotent on agent, task and request id: a request Reviewer already has changes nothing). Bounded:
at most PARKED_TASKS_AGENTS_PER_TICK agents per tick, one page of PARKED_TASKS_PAGE_SIZE tasks each (the
next page on the agent's next turn). Per agent, backing off: an agent is asked every
PARKED_TASKS_LIST_SECONDS while it answers; after a failure the wait doubles up to
PARKED_TASKS_BACKOFF_CAP_SECONDS. Only agents that allow it are asked more than rarely: an agent whose
card does not declare the approval extension, or that refuses ListTasks (unsupported, or not for the
credentials Reviewer presents), goes straight to the cap and is asked again only then. The state is per
worker process and in memory: a restarted worker asks every agent once, which is harmless.

A task found at an agent's card URL is adopted only when its request names that registration
(`request.agent`, the registration's slug). Being found at the URL proves nothing: were two
registrations ever to share a card URL, the other tenant's policy would decide this agent's request
(and sign for its audience). A push and the REST API are authenticated by the agent's own tokens and
need no such statement; a parked task that names no registration waits for one of them.
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from approvals.a2a.client import DeliveryError, ListingRefused, list_parked_requests
from approvals.a2a.push import submit
from approvals.models import Agent
from approvals.schemas import BatchSubmission
from approvals.services.batches import submit_announced_batch
from approvals.services.halts import active_halt
from approvals.services.intake import record_intake_refusal
from lib.errors import HaltedError, IntakeError, QuotaExceeded

log = logging.getLogger(__name__)

PARKED_TASKS_PAGE_SIZE = 50  # A2A's default page size; its maximum is 100
PARKED_TASKS_AGENTS_PER_TICK = 5  # so that listing never starves delivery
PARKED_TASKS_BACKOFF_CAP_SECONDS = 3600


@dataclass
class AgentTurn:
    next_at: datetime
    failures: int = 0
    page_token: str = ""


class ParkedTaskLister:
    def __init__(self, *, every_seconds: int | None = None):
        self.every = timedelta(
            seconds=settings.PARKED_TASKS_LIST_SECONDS if every_seconds is None else every_seconds
        )
        self.turns: dict[int, AgentTurn] = {}
        # (agent id, task id, request id) refused (by intake, or not naming the agent): not offered again.
        self.refused: set[tuple[int, str, str]] = set()

    def reconcile(self, report, now: datetime | None = None) -> None:
        """One bounded pass; adds the proposals it created to report.reconciled."""
        clock = now or timezone.now()
        # Pull agents are not A2A servers: there is nothing to list.
        agents = Agent.objects.filter(delivery=Agent.Delivery.A2A).select_related("tenant").order_by("pk")
        due = [agent for agent in agents if self._turn(agent.id, clock).next_at <= clock]
        # A halted agent's requests would be refused: ask it again once it is resumed.
        due = [agent for agent in due if active_halt(agent.tenant_id, agent.id) is None]
        for agent in due[:PARKED_TASKS_AGENTS_PER_TICK]:
            report.reconciled += self.list_agent(agent, clock)

    def _turn(self, agent_id: int, clock: datetime) -> AgentTurn:
        return self.turns.setdefault(agent_id, AgentTurn(next_at=clock))

    def list_agent(self, agent: Agent, clock: datetime) -> int:
        """Read one page of the agent's parked tasks and take in what is new. Returns how many proposals
        it created."""
        turn = self._turn(agent.id, clock)
        try:
            page = list_parked_requests(agent, page_size=PARKED_TASKS_PAGE_SIZE, page_token=turn.page_token)
        except ListingRefused as refusal:
            turn.failures += 1
            turn.page_token = ""
            turn.next_at = clock + timedelta(seconds=PARKED_TASKS_BACKOFF_CAP_SECONDS)
            log.info("not listing %s's parked tasks for an hour: %s", agent.slug, refusal)
            return 0
        except DeliveryError as error:
            turn.failures += 1
            turn.page_token = ""
            turn.next_at = clock + self._backoff(turn.failures)
            log.info("could not list %s's parked tasks (retry at %s): %s", agent.slug, turn.next_at, error)
            return 0
        turn.failures = 0
        turn.page_token = page.next_page_token
        # More pages: continue on the next tick; a full round done: wait the interval.
        turn.next_at = clock if page.next_page_token else clock + self.every
        for task_id, problem in page.malformed:
            log.warning(
                "%s's task %s is parked with a request Reviewer cannot read: %s", agent.slug, task_id, problem
            )
        taken = 0
        try:
            for submission in page.requests:
                taken += self._take_in(agent, submission)
            for batch in page.batches:
                taken += self._take_in_batch(agent, batch)
        except QuotaExceeded as refusal:
            # Over a quota: the tasks stay parked and are offered again on the agent's next turn, no
            # sooner than it may send again (the refusal is counted and audited by the quotas).
            turn.page_token = ""
            turn.next_at = max(turn.next_at, clock + timedelta(seconds=refusal.retry_after))
            log.info("%s's parked tasks wait: %s", agent.slug, refusal.message)
        return taken

    def _backoff(self, failures: int) -> timedelta:
        seconds = self.every.total_seconds() * 2 ** min(failures, 16)
        return timedelta(seconds=min(seconds, PARKED_TASKS_BACKOFF_CAP_SECONDS))

    def _take_in_batch(self, agent: Agent, parked: BatchSubmission) -> int:
        """A batch parked in a task, taken in as a push would (all or nothing), when every member names
        this registration."""
        key = (agent.id, parked.task_id, parked.batch_id)
        if key in self.refused:
            return 0
        strangers = {member.agent or "(none)" for member in parked.members if member.agent != agent.slug}
        if strangers:
            self.refused.add(key)
            log.warning(
                "not adopting batch task %s found at %s's card URL: members name agents %s, not %r",
                parked.task_id,
                agent.slug,
                sorted(strangers),
                agent.slug,
            )
            return 0
        try:
            batch, created = submit_announced_batch(agent, parked, via="list_tasks")
        except (IntakeError, HaltedError) as error:
            self.refused.add(key)
            # Recorded once, as a refused push is (raises QuotaExceeded past the intake rate).
            record_intake_refusal(
                agent, error, via="list_tasks", task_id=parked.task_id, request_id=parked.batch_id
            )
            log.warning("%s's parked batch task %s refused at intake: %s", agent.slug, parked.task_id, error)
            return 0
        if created:
            log.info(
                "found %s's parked batch task %s by ListTasks: batch %s", agent.slug, parked.task_id, batch.id
            )
        return int(created)

    def _take_in(self, agent: Agent, submission) -> int:
        key = (agent.id, submission.task_id, submission.request.request_id)
        if key in self.refused:
            return 0
        if submission.request.agent != agent.slug:
            self.refused.add(key)  # said once: the task does not change its request while parked
            log.warning(
                "not adopting task %s found at %s's card URL: its request names agent %r, not %r",
                submission.task_id,
                agent.slug,
                submission.request.agent,
                agent.slug,
            )
            return 0
        try:
            proposal, created = submit(agent, submission, via="list_tasks")
        except IntakeError as error:
            self.refused.add(key)  # recorded once in the audit trail by a2a.submit; not again every pass
            log.warning("%s's parked task %s refused at intake: %s", agent.slug, submission.task_id, error)
            return 0
        if created:
            log.info(
                "found %s's parked task %s by ListTasks: proposal %s",
                agent.slug,
                submission.task_id,
                proposal.id,
            )
        return int(created)
