"""Intake quotas: a token bucket per agent and per tenant (a burst, refilled at a sustained rate) and a
ceiling of open proposals (those waiting for people) per agent and per tenant. Intake asks them inside
its own transaction (approvals/services/intake/); the admin sets the limits (`set_agent_limits`,
`set_tenant_limits`; empty: the settings' defaults).

Where the state lives: in PostgreSQL (QuotaState rows), not in Redis or in a process. Every Daphne
process shares the database, so the limit holds across all of them; the bucket is spent in the same
transaction as the proposal it lets in, so a rolled-back intake spends nothing and a committed one
cannot escape the count; and the ceiling has to be counted in the database anyway, under a lock that
the bucket then shares for free. Redis is optional (the in-memory channel layer), and a bucket there
would be a second store that can disagree with the rows after a rollback.

Concurrency: the locking statement (approvals/storage/quotas.py) locks the tenant's QuotaState row
and then the agent's (in that order everywhere, so two intakes cannot deadlock), before intake reads
anything it decides on. On PostgreSQL's READ COMMITTED the counts intake reads next (in its one read,
`open_counts_subqueries`) are a new statement, so they see every proposal committed by the intakes that
held the lock before; the lock is held to commit, so no two intakes of a tenant count at once, and N
parallel submissions never take it past its ceiling. The price: one tenant's intakes are serialized
(each holds the lock for its own transaction), so intake keeps that transaction to a few round trips:
the lock and the read sent together (approvals/services/intake/read.py), then the writes, held together
where nothing reads them back (lib/storage/held_writes.py), then the COMMIT.

Counting what waits costs a row per waiting proposal, under the tenant's lock: at thousands waiting,
milliseconds of the database's time for every intake. So each quota row keeps `open_at_most`, a bound
on its owner's proposals that wait for people: intake adds one for each proposal it lets into the queue
(under the lock, so none is missed), nothing takes one away when a proposal is decided, and intake counts
only when the bound has reached the ceiling (or is unknown, null), then sets it to what it counted. The
bound never falls below the truth, because only intake puts a proposal into the queue (a reviewer's edit
replaces one waiting proposal by at most one), so a bound under the ceiling means the count is too; and a
queue that drains is counted again once, when the bound meets the ceiling.

Over a limit, intake stores nothing and raises QuotaExceeded (429, Retry-After). The refusal is
counted on the agent's row (the queue's banner reads it), and only the first refusal of a window
(QUOTA_AUDIT_WINDOW_SECONDS) writes an audit event, `intake.throttled`, carrying how many the window
before refused: a flood of refused requests writes one event per agent per window, not one per request.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from approvals.models import Agent, QuotaState
from approvals.services.common import agent_actor
from approvals.services.tenants import require_config_admin
from approvals.storage import quotas as storage
from audit.labels import actor_label, agent_label, tenant_label
from audit.models import Verb
from audit.trail import audit_time, record
from lib.errors import QuotaExceeded, ServiceError
from tenants.models import Tenant

LIMIT_FIELDS = ("intake_burst", "intake_per_minute", "open_proposals_max")
# A rate of 0 stops intake; the agent is told to come back after this long (an admin must raise it).
STOPPED_RETRY_AFTER_SECONDS = 3600


@dataclass(frozen=True)
class Limits:
    burst: int
    per_minute: int
    open_max: int


def agent_limits(agent: Agent) -> Limits:
    return _limits(agent, "AGENT")


def tenant_limits(tenant: Tenant) -> Limits:
    return _limits(tenant, "TENANT")


def _limits(owner, prefix: str) -> Limits:
    return _limits_of([getattr(owner, field) for field in LIMIT_FIELDS], prefix)


def _limits_of(own: Sequence[int | None], prefix: str) -> Limits:
    """Limits from an owner's own three values (LIMIT_FIELDS order; None: the installation's default)."""
    burst, per_minute, open_max = (
        value if value is not None else getattr(settings, f"{prefix}_{setting}")
        for value, setting in zip(own, ("INTAKE_BURST", "INTAKE_PER_MINUTE", "OPEN_PROPOSALS"), strict=True)
    )
    return Limits(burst=burst, per_minute=per_minute, open_max=open_max)


@dataclass
class Hold:
    """The two locked rows of one intake (the tenant's bucket; the agent's bucket and throttle window) and
    the limits as they are now (read with the rows, in the locking statement: an admin's change counts
    from the next intake, whatever agent object the caller holds)."""

    agent: Agent
    tenant_state: QuotaState
    agent_state: QuotaState
    agent_limit: Limits
    tenant_limit: Limits


def hold_quotas(agent: Agent, now: datetime) -> Hold:
    """Lock the tenant's and the agent's quota rows, tenant first, in the caller's transaction (creating
    them, full, on the agent's first intake)."""
    hold = hold_from_rows(agent, _locked_rows(agent))
    if hold is None:
        # ON CONFLICT DO NOTHING: a concurrent first intake may create them too; then read both, locked.
        tenant_full = tenant_limits(agent.tenant).burst
        QuotaState.objects.bulk_create(
            [
                QuotaState(tenant_id=agent.tenant_id, agent=None, tokens=tenant_full, refilled_at=now),
                QuotaState(
                    tenant_id=agent.tenant_id, agent=agent, tokens=agent_limits(agent).burst, refilled_at=now
                ),
            ],
            ignore_conflicts=True,
        )
        hold = hold_from_rows(agent, _locked_rows(agent))
    assert hold is not None  # (both rows exist now)
    return hold


def locking_statement(agent: Agent) -> tuple[str, tuple]:
    """The statement that locks the agent's and its tenant's quota rows (tenant first) and reads them
    with the limits their owners have now (approvals/storage/quotas.py); its rows go to hold_from_rows."""
    return storage.locking_statement(agent, LIMIT_FIELDS)


def _locked_rows(agent: Agent) -> list:
    return storage.locked_rows(agent, LIMIT_FIELDS)


def hold_from_rows(agent: Agent, rows: list) -> Hold | None:
    """The Hold of the locking statement's rows; None when the rows do not exist yet (the agent's first
    intake: hold_quotas creates them)."""
    if len(rows) < 2:
        return None
    tenant_row, agent_row = storage.locked_quotas(rows, LIMIT_FIELDS)
    return Hold(
        agent=agent,
        tenant_state=tenant_row.state,
        agent_state=agent_row.state,
        agent_limit=_limits_of(agent_row.agent_limits, "AGENT"),
        tenant_limit=_limits_of(tenant_row.tenant_limits, "TENANT"),
    )


# ---------------------------------------------------------------------------------------------------
# The open-proposal counts, read in intake's one read after the lock


@dataclass(frozen=True)
class CountCaps:
    """How far the open-proposal counts go: just past each ceiling, so a count costs at most the
    ceiling's rows of an index, whatever the history."""

    agent: int
    tenant: int

    @classmethod
    def of(cls, agent_limit: Limits, tenant_limit: Limits) -> "CountCaps":
        return cls(agent=agent_limit.open_max + 1, tenant=tenant_limit.open_max + 1)

    @classmethod
    def for_agent(cls, agent: Agent) -> "CountCaps":
        """The caps of the limits read with the agent when it authenticated (checked under the lock)."""
        return cls.of(agent_limits(agent), tenant_limits(agent.tenant))

    def cover(self, hold: Hold) -> bool:
        """Whether counts this far decide against the ceilings the lock read: not when an admin raised
        one since the agent authenticated (its row is read with the agent, its limits again under the
        lock). Intake then counts again with the new caps."""
        return self.agent >= hold.agent_limit.open_max + 1 and self.tenant >= hold.tenant_limit.open_max + 1


def open_counts_subqueries(agent: Agent, caps: CountCaps, *, always: bool = False) -> tuple:
    """Scalar subqueries (approvals/storage/quotas.py) counting the agent's and the tenant's proposals
    that wait for people (in that order), each capped (CountCaps), and null where the owner's quota row
    bounds the count under the ceiling (`open_at_most`, unless `always`): the count is then not made."""
    return storage.open_counts_subqueries(agent, agent_cap=caps.agent, tenant_cap=caps.tenant, always=always)


@dataclass(frozen=True)
class OpenCounts:
    """What waits for people, the agent's and the tenant's: a count (capped at `caps`), or None where the
    quota row's bound was under the ceiling and nothing was counted."""

    agent: int | None
    tenant: int | None
    caps: CountCaps | None = None  # None: the counts are exact

    def under_ceilings(self, hold: "Hold") -> bool:
        """Whether what was not counted is bounded under the ceilings the lock read (an admin may have
        lowered one since the agent authenticated: then intake counts)."""
        return _bounded(self.agent, hold.agent_state, hold.agent_limit) and _bounded(
            self.tenant, hold.tenant_state, hold.tenant_limit
        )


def count_again(hold: Hold, caps: CountCaps, counts: OpenCounts) -> bool:
    """Whether intake must count again, in full, after the lock: the caps the counts were made with, or
    the bounds they relied on, do not decide against the ceilings the lock read (an admin changed a
    limit since the agent authenticated). Intake counts again too on the agent's first intake, when the
    quota rows did not exist yet."""
    return not caps.cover(hold) or not counts.under_ceilings(hold)


def _bounded(counted: int | None, state: QuotaState, limit: Limits) -> bool:
    return counted is not None or (state.open_at_most is not None and state.open_at_most < limit.open_max)


def _bound_after(counted: int | None, cap: int | None, state: QuotaState, waiting: bool) -> int | None:
    """The owner's bound once this intake commits: what was counted (unknown where the count stopped
    at its cap) or the bound as it was, plus the proposal let into the queue."""
    if counted is None:
        known = state.open_at_most
    else:
        known = counted if cap is None or counted < cap else None
    return None if known is None else known + int(waiting)


# ---------------------------------------------------------------------------------------------------
# Spending, refusing


def spend_or_refuse(
    hold: Hold, counts: OpenCounts, *, waiting: bool, now: datetime, via: str
) -> QuotaExceeded | None:
    """Let one new proposal in (spend a token of both buckets) or refuse it: returns the refusal, already
    counted and (once per window) audited, for the caller to raise after its transaction commits. A
    proposal policy decides at intake (`waiting` false) never enters the queue: only the rates count it."""
    agent_limit, tenant_limit = hold.agent_limit, hold.tenant_limit
    refusal = None
    # A count not made: the bound, under the ceiling, says there is room.
    if waiting and counts.agent is not None and counts.agent >= agent_limit.open_max:
        refusal = QuotaExceeded(
            "too_many_open",
            f"this agent has {agent_limit.open_max} proposals waiting for people, its ceiling",
            retry_after=settings.QUOTA_OPEN_RETRY_AFTER_SECONDS,
        )
    elif waiting and counts.tenant is not None and counts.tenant >= tenant_limit.open_max:
        refusal = QuotaExceeded(
            "tenant_too_many_open",
            f"this agent's tenant has {tenant_limit.open_max} proposals waiting for people, its ceiling",
            retry_after=settings.QUOTA_OPEN_RETRY_AFTER_SECONDS,
        )
    agent_tokens = _available(hold.agent_state, agent_limit, now)
    tenant_tokens = _available(hold.tenant_state, tenant_limit, now)
    if refusal is None and agent_tokens < 1:
        refusal = QuotaExceeded(
            "rate_limited",
            f"this agent may send {agent_limit.burst} proposals at once and {agent_limit.per_minute} "
            "a minute",
            retry_after=_seconds_to_a_token(agent_tokens, agent_limit),
        )
    elif refusal is None and tenant_tokens < 1:
        refusal = QuotaExceeded(
            "tenant_rate_limited",
            f"this agent's tenant may take {tenant_limit.burst} proposals at once and "
            f"{tenant_limit.per_minute} a minute",
            retry_after=_seconds_to_a_token(tenant_tokens, tenant_limit),
        )
    if refusal is not None:
        _note_refusal(hold, refusal, now=now, via=via)
        return refusal
    caps = counts.caps
    agent_bound = _bound_after(counts.agent, caps.agent if caps else None, hold.agent_state, waiting)
    tenant_bound = _bound_after(counts.tenant, caps.tenant if caps else None, hold.tenant_state, waiting)
    # One UPDATE for both rows, already locked (approvals/storage/quotas.py), held with intake's writes.
    storage.spend(
        hold.agent_state.pk,
        hold.tenant_state.pk,
        tokens=(agent_tokens - 1, tenant_tokens - 1),
        bounds=(agent_bound, tenant_bound),
        now=now,
    )
    return None


def _available(state: QuotaState, limit: Limits, now: datetime) -> float:
    # A clock that went back (another process's) refills nothing rather than draining the bucket.
    elapsed = max((now - state.refilled_at).total_seconds(), 0.0)
    return min(float(limit.burst), state.tokens + elapsed * limit.per_minute / 60)


def _seconds_to_a_token(tokens: float, limit: Limits) -> int:
    if limit.per_minute <= 0 or limit.burst < 1:
        return STOPPED_RETRY_AFTER_SECONDS
    return max(1, math.ceil((1 - tokens) * 60 / limit.per_minute))


def _note_refusal(hold: Hold, refusal: QuotaExceeded, *, now: datetime, via: str) -> None:
    """Count the refusal in the agent's throttle window; the window's first refusal writes the audit event,
    with what the window before refused."""
    state, agent = hold.agent_state, hold.agent
    window = timedelta(seconds=settings.QUOTA_AUDIT_WINDOW_SECONDS)
    if state.throttled_at is None or now - state.throttled_at >= window:
        record(
            agent.tenant_id,
            actor=agent_actor(agent),
            verb=Verb.INTAKE_THROTTLED,
            subject=agent_label(agent.slug),
            data={
                "via": via,
                "code": refusal.code,
                "retry_after": refusal.retry_after,
                "window_seconds": settings.QUOTA_AUDIT_WINDOW_SECONDS,
                # The refusals of the window before, which had no event of their own after its first.
                "previous_window": None
                if state.throttled_at is None
                else {
                    "at": audit_time(state.throttled_at),
                    "code": state.throttled_limit,
                    "refused": state.refused,
                },
            },
        )
        state.throttled_at, state.throttled_limit, state.refused = now, refusal.code, 1
    else:
        state.refused += 1
    state.last_refused_at = now
    state.save(update_fields=["throttled_at", "throttled_limit", "refused", "last_refused_at"])


# ---------------------------------------------------------------------------------------------------
# Setting the limits (the admin)


def set_agent_limits(agent: Agent, *, actor=None, **limits: int | None) -> Agent:
    """Set an agent's own limits (None: the installation's default)."""
    require_config_admin(actor, agent.tenant_id)
    with transaction.atomic():
        locked = Agent.objects.select_for_update().get(pk=agent.pk)
        _set_limits(locked, limits, actor=actor, tenant_id=agent.tenant_id, subject=agent_label(agent.slug))
    return locked


def set_tenant_limits(tenant: Tenant, *, actor=None, **limits: int | None) -> Tenant:
    """Set the limits of all a tenant's agents together (None: the installation's default)."""
    require_config_admin(actor, tenant.id)
    with transaction.atomic():
        locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
        _set_limits(locked, limits, actor=actor, tenant_id=tenant.id, subject=tenant_label(tenant.slug))
    return locked


def _set_limits(owner, limits: dict, *, actor, tenant_id: int, subject: str) -> None:
    unknown = set(limits) - set(LIMIT_FIELDS)
    if unknown:
        raise ServiceError("bad_field", "not a quota: " + ", ".join(sorted(unknown)))
    for name, value in limits.items():
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ServiceError("bad_quota", f"{name} is a whole number, 0 or more, or empty", name)
    changes = {
        name: [getattr(owner, name), value] for name, value in limits.items() if getattr(owner, name) != value
    }
    if not changes:
        return
    for name, (_, value) in changes.items():
        setattr(owner, name, value)
    owner.save(update_fields=list(changes))
    record(
        tenant_id,
        actor=actor_label(actor),
        verb=Verb.QUOTA_CHANGED,
        subject=subject,
        data={"changes": changes},
    )
