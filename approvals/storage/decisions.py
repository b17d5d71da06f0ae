"""The consume in one statement (approvals/services/decisions.py holds the rule and the refusals).

Bench rows R7 and R1r (the allowed call: submit, verify, consume): a released consume is 4 statements
over HTTP (the token, BEGIN, this claim, COMMIT; it was 9), and its request costs about as much CPU as a
bare read. With intake's audit events in one INSERT and the quota spend as one statement, it moved R7
from 0.15-0.16x to 0.21-0.23x and R1r from 6.9-7.3x to 4.6-5.1x (bench/HISTORY.md, allowed branch
of 2026-12-02). Its ORM twin is the step-by-step path consume_decision takes on SQLite and
for a refusal."""

from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any
from uuid import UUID

from django.db import connection
from django.utils import timezone

from approvals.models import Agent, Decision, Proposal
from approvals.states import RELEASED, State
from approvals.storage.halts import active_halt_expression
from approvals.storage.rows import quoted_names

# What the audit events accepted in the claim read of its `claimed` rows (audit.statement_events'
# `source`, `subject_sql` and an event's `data_sql`): the proposal as their subject, and for its
# transition the state it left and its new rev.
CLAIMED = "claimed"
CLAIMED_SUBJECT_SQL = "'proposal:' || claimed.id::text"
CLAIMED_TRANSITION_SQL = "jsonb_build_object('from', claimed.previous, 'rev', claimed.rev)"


@lru_cache
def claim_sql(halt_sql: str, audit: str) -> str:
    """PostgreSQL only. The proposal moves to executing (its rev raised, `executing_since` set) and its
    decision is marked consumed only if the decision is this agent's, approved, at this rev, neither
    consumed nor revoked, before both deadlines, the proposal released, and no halt in force
    (`halt_sql`, a scalar subquery that is null when none is); `audit` appends the audit events from
    the `claimed` rows. Returns the claimed proposal's id and new rev, or no row. Parameters: executing,
    the time it started, the jti, the agent's id, the released states (two), approved, the rev, the
    clock twice, the halt's, the clock, the audit's.

    The proposal row is locked before the decision's, the order revoke, halt and expiry take them in; a
    consume that waits for the proposal's lock re-checks its state once the holder commits (READ
    COMMITTED), so a racing consume, revoke or expiry leaves nothing to claim."""
    proposals, proposal = quoted_names(Proposal)
    decisions, decision = quoted_names(Decision)
    return (
        f"WITH claimed AS (UPDATE {proposals} AS p SET {proposal('state')} = %s,"  # noqa: S608
        f" {proposal('rev')} = p.{proposal('rev')} + 1, {proposal('executing_since')} = %s"
        f" FROM {decisions} AS d, {proposals} AS before"
        f" WHERE d.{decision('jti')} = %s AND p.{proposal('id')} = d.{decision('proposal')}"
        f" AND before.{proposal('id')} = p.{proposal('id')} AND p.{proposal('agent')} = %s"
        f" AND p.{proposal('state')} IN (%s, %s) AND d.{decision('kind')} = %s AND d.{decision('rev')} = %s"
        f" AND d.{decision('consumed_at')} IS NULL AND d.{decision('revoked_at')} IS NULL"
        f" AND %s < d.{decision('expires_at')} AND %s < p.{proposal('expires_at')} AND ({halt_sql}) IS NULL"
        f" RETURNING p.{proposal('id')} AS id, p.{proposal('rev')} AS rev,"
        f" before.{proposal('state')} AS previous),"
        f" spent AS (UPDATE {decisions} AS d SET {decision('consumed_at')} = %s FROM claimed"
        f" WHERE d.{decision('proposal')} = claimed.id),"
        f" {audit} SELECT id, rev FROM claimed"
    )


def claim(
    agent: Agent, jti: UUID | str, rev: int, clock: datetime, *, audit: str, audit_params: Sequence[Any]
) -> Proposal | None:
    """Run claim_sql for this agent's decision `jti` signed at `rev`, with the halt check read in the
    statement (no cache) and `audit` (the audit events' part, from the `claimed` rows, and its
    parameters): the claimed proposal, loaded with what the statement returned (any other field is read
    when asked for: Django's deferred fields) and `agent` on it; None when nothing was claimed."""
    halt = active_halt_expression(agent.tenant_id, agent.id)
    params = [State.EXECUTING, timezone.now(), jti, agent.id, *RELEASED, Decision.Kind.APPROVED, rev]
    params += [clock, clock, *halt.params, clock, *audit_params]
    with connection.cursor() as cursor:
        cursor.execute(claim_sql(halt.sql, audit), params)
        row = cursor.fetchone()
    if row is None:
        return None
    known = {"id": row[0], "tenant_id": agent.tenant_id, "agent_id": agent.id, "state": State.EXECUTING}
    known["rev"] = row[1]
    fields = [field.attname for field in Proposal._meta.concrete_fields if field.attname in known]
    proposal = Proposal.from_db(connection.alias, fields, [known[name] for name in fields])
    proposal.agent = agent
    return proposal
