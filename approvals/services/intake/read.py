"""Intake's one read: the quota rows' lock, then everything intake decides on, in one round trip
(approvals/storage/intake.py and approvals/storage/quotas.py hold the statements)."""

import uuid
from dataclasses import dataclass
from datetime import datetime

from approvals.models import Agent, Proposal
from approvals.policy.evaluation import classified_target_key
from approvals.policy.history import policy_counts, policy_counts_expression, read_policy_counts
from approvals.services.grants import RECENTLY_ENDED
from approvals.services.quotas import (
    CountCaps,
    Hold,
    OpenCounts,
    count_again,
    hold_from_rows,
    hold_quotas,
    locking_statement,
    open_counts_subqueries,
)
from approvals.storage import intake as storage
from approvals.storage.grants import grants_named_expression
from approvals.storage.halts import active_halt_expression
from lib.errors import NotFound


@dataclass
class Found:
    """What intake reads before it writes, in one query (see read_for_intake)."""

    existing_id: uuid.UUID | None  # an earlier proposal with this agent, task and request id, or None
    halt_id: int | None  # the oldest halt in force on the agent, its tenant or everything, or None
    history: dict  # policy.evaluation_context's `history` counts
    versions: list  # the tenant's active policy versions, with their policies
    open_counts: OpenCounts  # what waits for people, the agent's and the tenant's (quotas)
    # Whether the agent has standing grants a call could meet (approvals/services/grants.py reads them
    # only then).
    grants_named: bool = False


def hold_and_read(agent: Agent, proposal: Proposal, now: datetime) -> tuple[Hold, Found]:
    """Lock the quota rows (services/quotas.py), then read everything intake decides on, in one round
    trip on PostgreSQL: two statements in one text (approvals/storage/intake.py, `lock_and_read`), so
    the read, a statement of its own, sees every proposal committed by the intakes that held the lock
    before (READ COMMITTED), and the lock, which every intake of the tenant waits for, is held one
    round trip less.

    The read: the tenant's active policy versions with their policies, and on every row the replay
    check, the halt check, the open-proposal counts of the quotas and the target's history counts
    (uncorrelated scalar subqueries: PostgreSQL and SQLite compute each once). Plain SQL built once per
    process (approvals/storage/intake.py); its values are read on every request and nothing is cached
    across requests, so a halt or a policy change committed before this read counts at once, in every
    process. An agent deleted since it authenticated gets no row.

    The counts are capped by the limits read with the agent when it authenticated, and made only where
    the quota row's bound (`open_at_most`, services/quotas.py) is not under that ceiling; where the
    quotas say the lock read otherwise (`count_again`), the read runs again after the lock, counting in
    full."""
    caps = CountCaps.for_agent(agent)
    read, scalars = _read_statement(agent, proposal, caps, now)
    locked, rows = storage.lock_and_read(locking_statement(agent), read)
    hold = hold_from_rows(agent, locked)
    counts = _open_counts(rows, caps)
    if hold is None or count_again(hold, caps, counts):
        hold = hold or hold_quotas(agent, now)
        caps = CountCaps.of(hold.agent_limit, hold.tenant_limit)
        read, scalars = _read_statement(agent, proposal, caps, now, count_always=True)
        rows = storage.read(read)
        counts = _open_counts(rows, caps)
    return hold, _found(agent, proposal, rows, scalars=scalars, open_counts=counts)


def _open_counts(rows: list, caps: CountCaps) -> OpenCounts:
    """The one read's open-proposal counts (None: not counted, the quota row's bound under the ceiling)."""
    if not rows:  # the agent was deleted since it authenticated: _found says so
        return OpenCounts(agent=0, tenant=0)
    agent_open, tenant_open = rows[0][2:4]
    return OpenCounts(agent=agent_open, tenant=tenant_open, caps=caps)


def _read_statement(
    agent: Agent, proposal: Proposal, caps: CountCaps, now: datetime, *, count_always: bool = False
) -> tuple[tuple[str, tuple], int]:
    """The one read (its text and parameters), and how many scalar subqueries lead its rows (the
    standing grants' is the fifth; the history counts' the sixth, when the proposal has a target).
    `count_always`: count what waits whatever the quota rows' bounds."""
    subqueries = [
        storage.replay_expression(agent.id, proposal.task_id, proposal.request_id),
        active_halt_expression(agent.tenant_id, agent.id),
        *open_counts_subqueries(agent, caps, always=count_always),  # the agent's count, then the tenant's
        grants_named_expression(agent.id, now - RECENTLY_ENDED),
    ]
    history = policy_counts_expression(proposal)
    if history is not None:
        subqueries.append(history)
    return storage.one_read(agent, subqueries), len(subqueries)


def _found(agent: Agent, proposal: Proposal, rows: list, *, scalars: int, open_counts: OpenCounts) -> Found:
    """What the one read's rows say (see hold_and_read)."""
    if not rows:  # the agent was deleted since it authenticated
        raise NotFound("unknown_agent", "this agent is no longer registered")
    existing_id, halt_id = rows[0][:2]
    versions = storage.loaded_versions(rows, agent.tenant, skip=scalars)
    counts = read_policy_counts(rows[0][5] if scalars > 5 else None)
    # The admins' classification may key this tool's target otherwise (a family of equivalent tools, a
    # named target argument): then the history is read again under that key, one more query only then.
    classified = classified_target_key(proposal.action, agent.slug, versions)
    if classified != proposal.target_key:
        proposal.target_key = classified
        counts = policy_counts(proposal)
    return Found(
        # SQLite gives a UUID column's text, PostgreSQL a UUID.
        existing_id=None if existing_id is None else uuid.UUID(str(existing_id)),
        halt_id=halt_id,
        history=counts,
        versions=versions,
        open_counts=open_counts,
        grants_named=rows[0][4] is not None,
    )
