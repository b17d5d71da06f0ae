"""Intake's statements (approvals/services/intake/ holds the rules): its one read, sent with the quota
rows' lock, and the proposal inserted with its pinned policy versions.

Both run under the tenant's quota lock, which every intake of the tenant waits for: bench rows R3
(intake throughput) and R7 / R1r (the allowed call)."""

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from django.db import connection
from django.db.models import UUIDField
from django.db.models.expressions import RawSQL

from approvals.models import Agent, Policy, PolicyVersion, Proposal
from approvals.storage.rows import (
    ModelColumns,
    insert_sql,
    insert_statement,
    model_columns,
    quoted_names,
    stored,
)
from lib.storage.held_writes import write
from tenants.models import Tenant


def version_columns(vendor: str) -> tuple[ModelColumns, ModelColumns]:
    """The columns of the one read's version and policy, in the order it selects them."""
    return model_columns(PolicyVersion, "version", vendor), model_columns(Policy, "policy", vendor)


@lru_cache
def one_read_sql(vendor: str, subqueries: tuple[str, ...]) -> str:
    """The tenant's active policy versions with their policies, ordered by the policy's slug, each row
    led by the given scalar subqueries' values. The rows hang off the agent's own row, so a tenant with
    no active version still gets one row (its version columns null), and an agent deleted since it
    authenticated gets none. Parameters: the subqueries', the active status, the tenant's id, the
    agent's id.

    R7 / R1r / R3: under cProfile the read fell from 0.324 to 0.082 s per 40 intakes against the ORM's
    query of the versions with the same subqueries annotated (bench/HISTORY.md, intake branch of
    2026-12-02); its subqueries as plain text cost less CPU than the four ORM queries they replaced had
    (bench/HISTORY.md, "R3 misses its target, and why")."""
    versions_select, policies_select = version_columns(vendor)
    agents, agent = quoted_names(Agent)
    policies, policy = quoted_names(Policy)
    versions, version = quoted_names(PolicyVersion)
    scalars = ", ".join(f"({text})" for text in subqueries)
    return (
        f"SELECT {scalars}, {versions_select.select}, {policies_select.select}"  # noqa: S608
        f' FROM {agents} AS "intake_agent"'
        f' LEFT OUTER JOIN ({policies} AS "policy" INNER JOIN {versions} AS "version"'
        f' ON "version".{version("policy")} = "policy".{policy("id")} AND "version".{version("status")} = %s)'
        f' ON "policy".{policy("tenant")} = %s'
        f' WHERE "intake_agent".{agent("id")} = %s'
        f' ORDER BY "policy".{policy("slug")}'
    )


# A statement's text and parameters; the rows a cursor fetched.
Statement = tuple[str, tuple[Any, ...]]
Rows = list[tuple[Any, ...]]


def one_read(agent: Agent, subqueries: Sequence[RawSQL]) -> Statement:
    """one_read_sql for this agent, led by `subqueries` (scalar subqueries: the replay check, the halt
    check, the open counts, the history counts), and its parameters."""
    params = (
        *(param for subquery in subqueries for param in subquery.params),
        PolicyVersion.Status.ACTIVE,
        agent.tenant_id,
        agent.id,
    )
    return one_read_sql(connection.vendor, tuple(subquery.sql for subquery in subqueries)), params


def lock_and_read(lock: Statement, read: Statement) -> tuple[Rows, Rows]:
    """Run the quota rows' lock (approvals/storage/quotas.py, `locking_statement`), then the one read:
    both statements' rows. On PostgreSQL the two go in one text, one round trip (why the read stays a
    statement of its own: approvals/services/intake/read.py, `hold_and_read`)."""
    lock_sql, lock_params = lock
    read_sql, read_params = read
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"{lock_sql};\n{read_sql}", (*lock_params, *read_params))
            locked = cursor.fetchall()
            cursor.nextset()
        else:
            cursor.execute(lock_sql, lock_params)
            locked = cursor.fetchall()
            cursor.execute(read_sql, read_params)
        rows: Rows = cursor.fetchall()
    return locked, rows


def read(statement: Statement) -> Rows:
    """Run the one read alone (after the lock): its rows."""
    with connection.cursor() as cursor:
        cursor.execute(*statement)
        rows: Rows = cursor.fetchall()
    return rows


def loaded_versions(rows: Rows, tenant: Tenant, *, skip: int) -> list[PolicyVersion]:
    """The active versions of the one read's rows, after their `skip` scalars (none when the version
    columns are null), each with its policy, whose tenant is `tenant` (as active_versions_for gives
    them)."""
    version_part, policy_part = version_columns(connection.vendor)
    versions = []
    for row in rows:
        if row[skip] is None:  # the version's id: no active version
            continue
        version = version_part.load(row[skip : skip + version_part.width])
        policy = policy_part.load(row[skip + version_part.width :])
        policy.tenant = tenant
        version.policy = policy
        versions.append(version)
    return versions


def replay_expression(agent_id: int, task_id: str, request_id: str) -> RawSQL:
    """The id of this agent's earlier proposal with this task and request id, as a scalar subquery."""
    # Only names from the model and placeholders go into the SQL; every value is a parameter.
    return RawSQL(replay_sql(connection.vendor), (agent_id, task_id, request_id), output_field=UUIDField())  # noqa: S611


@lru_cache
def replay_sql(vendor: str) -> str:
    """A scalar subquery of the one read: the id of the agent's earlier proposal with this task and
    request id. Parameters: the agent's id, the task id, the request id."""
    table, column = quoted_names(Proposal)
    return (
        f"SELECT {column('id')} FROM {table}"  # noqa: S608
        f" WHERE {column('agent')} = %s AND {column('task_id')} = %s AND {column('request_id')} = %s"
        " LIMIT 1"
    )


def insert_proposal(proposal: Proposal, versions: list[PolicyVersion]) -> Proposal:
    """Insert an evaluated proposal and pin its versions; returns the stored proposal (`rows.stored`).
    On PostgreSQL one statement (the proposal's INSERT in a WITH, the pins' INSERT reading its id),
    elsewhere the two INSERTs one after the other; held with the caller's other writes
    (lib/storage/held_writes.py). The values are prepared by the fields as the ORM's INSERT prepares them
    (created_at set now, the JSON adapted). No save signals: nothing listens for Proposal's.

    R7 / R1r: intake's CPU per allowed call fell from 6.18 to 5.45 ms, the allowed call from 2.90 to
    2.67 bare requests, and intake is a statement shorter (bench/HISTORY.md, intake branch of
    2026-12-02); its ORM twin is `Proposal.objects.create()` and `policy_versions.add()`."""
    insert, values = insert_statement(proposal)
    pins = [version.pk for version in versions]
    if connection.vendor == "postgresql" and pins:
        write(_proposal_with_pins_sql(connection.vendor, len(pins)), (*values, *pins))
    else:
        write(insert, values)
        if pins:
            proposal_id = Proposal._meta.pk.get_db_prep_value(proposal.pk, connection)
            rows = [value for pin in pins for value in (proposal_id, pin)]
            write(_pins_sql(connection.vendor, len(pins)), rows)
    return stored(proposal)


def _pin_names() -> tuple[str, str, str]:
    through = Proposal.policy_versions.through
    quote = connection.ops.quote_name
    return (
        quote(through._meta.db_table),
        quote(through._meta.get_field("proposal").column),
        quote(through._meta.get_field("policyversion").column),
    )


@lru_cache
def _pins_sql(vendor: str, count: int) -> str:
    table, proposal_column, version_column = _pin_names()
    rows = ", ".join(["(%s, %s)"] * count)
    return f"INSERT INTO {table} ({proposal_column}, {version_column}) VALUES {rows}"  # noqa: S608


@lru_cache
def _proposal_with_pins_sql(vendor: str, count: int) -> str:
    table, proposal_column, version_column = _pin_names()
    pk = connection.ops.quote_name(Proposal._meta.pk.column)
    pins = ", ".join(["(%s::bigint)"] * count)
    return (
        f'WITH "new_proposal" AS ({insert_sql(Proposal, vendor)} RETURNING {pk})'  # noqa: S608
        f" INSERT INTO {table} ({proposal_column}, {version_column})"
        f' SELECT "new_proposal".{pk}, "pin"."id" FROM "new_proposal"'
        f' CROSS JOIN (VALUES {pins}) AS "pin"("id")'
    )
