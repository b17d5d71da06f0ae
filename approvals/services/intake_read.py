"""Intake's one read: everything intake decides on, in one round trip of plain SQL built once per
process (services/intake.py writes what this read decides)."""

import uuid
from dataclasses import dataclass
from functools import lru_cache

from django.db import connection
from django.db.models import UUIDField
from django.db.models.expressions import RawSQL

from approvals.models import Agent, Policy, PolicyVersion, Proposal
from approvals.policy.evaluation import classified_target_key
from approvals.policy.history import policy_counts, policy_counts_expression, read_policy_counts
from approvals.services.halts import active_halt_expression
from approvals.services.quotas import Hold, OpenCounts, open_counts_expressions
from approvals.sql import model_columns, quoted_names
from lib.errors import NotFound


@dataclass
class Found:
    """What intake reads before it writes, in one query (see read_for_intake)."""

    existing_id: uuid.UUID | None  # an earlier proposal with this agent, task and request id, or None
    halt_id: int | None  # the oldest halt in force on the agent, its tenant or everything, or None
    history: dict  # policy.evaluation_context's `history` counts
    versions: list  # the tenant's active policy versions, with their policies
    open_counts: OpenCounts  # what waits for people, the agent's and the tenant's (quotas)


def read_for_intake(agent: Agent, proposal: Proposal, hold: Hold) -> Found:
    """One round trip for everything intake decides on: the tenant's active policy versions with their
    policies, and on every row the replay check, the halt check, the open-proposal counts of the quotas
    (read after their lock, services/quotas.py) and the target's history counts (uncorrelated scalar
    subqueries: PostgreSQL and SQLite compute each once). The statement is plain SQL built once per
    process (_intake_sql); its values are read on every request and nothing is cached across requests,
    so a halt or a policy change committed before this read counts at once, in every process. The rows
    hang off the agent's own row, so a tenant with no active version still gets one row (its version
    columns null), and an agent deleted since it authenticated gets none."""
    subqueries = [
        _replay_expression(agent.id, proposal.task_id, proposal.request_id),
        active_halt_expression(agent.tenant_id, agent.id),
        *open_counts_expressions(hold),  # the agent's count, then the tenant's
    ]
    history = policy_counts_expression(proposal)
    if history is not None:
        subqueries.append(history)
    texts = tuple(subquery.sql for subquery in subqueries)
    params = [param for subquery in subqueries for param in subquery.params]
    with connection.cursor() as cursor:
        cursor.execute(
            _intake_sql(connection.vendor, texts),
            (*params, PolicyVersion.Status.ACTIVE, agent.tenant_id, agent.id),
        )
        rows = cursor.fetchall()
    if not rows:  # the agent was deleted since it authenticated
        raise NotFound("unknown_agent", "this agent is no longer registered")
    existing_id, halt_id, agent_open, tenant_open = rows[0][:4]
    versions = _versions_from(rows, agent.tenant, skip=len(texts))
    counts = read_policy_counts(rows[0][4] if history is not None else None)
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
        open_counts=OpenCounts(agent=agent_open, tenant=tenant_open),
    )


def _versions_from(rows: list, tenant, *, skip: int) -> list[PolicyVersion]:
    """The active versions of _intake_sql's rows (none when its version columns are null), each with its
    policy, whose tenant is the agent's (as active_versions_for gives them)."""
    version_columns, policy_columns = _version_columns(connection.vendor)
    versions = []
    for row in rows:
        if row[skip] is None:  # the version's id: no active version
            continue
        version = version_columns.load(row[skip : skip + version_columns.width])
        policy = policy_columns.load(row[skip + version_columns.width :])
        policy.tenant = tenant
        version.policy = policy
        versions.append(version)
    return versions


def _version_columns(vendor: str):
    return model_columns(PolicyVersion, "version", vendor), model_columns(Policy, "policy", vendor)


@lru_cache
def _intake_sql(vendor: str, subqueries: tuple[str, ...]) -> str:
    """The one read's text, for the scalar subqueries' texts (each built once per process itself)."""
    version_columns, policy_columns = _version_columns(vendor)
    agents, agent = quoted_names(Agent)
    policies, policy = quoted_names(Policy)
    versions, version = quoted_names(PolicyVersion)
    scalars = ", ".join(f"({text})" for text in subqueries)
    return (
        f"SELECT {scalars}, {version_columns.select}, {policy_columns.select}"  # noqa: S608
        f' FROM {agents} AS "intake_agent"'
        f' LEFT OUTER JOIN ({policies} AS "policy" INNER JOIN {versions} AS "version"'
        f' ON "version".{version("policy")} = "policy".{policy("id")} AND "version".{version("status")} = %s)'
        f' ON "policy".{policy("tenant")} = %s'
        f' WHERE "intake_agent".{agent("id")} = %s'
        f' ORDER BY "policy".{policy("slug")}'
    )


def _replay_expression(agent_id: int, task_id: str, request_id: str) -> RawSQL:
    """The id of this agent's earlier proposal with this task and request id, as a scalar subquery (plain
    SQL built once per process, like the others of read_for_intake)."""
    # Only names from the model and placeholders go into the SQL; every value is a parameter.
    return RawSQL(_replay_sql(connection.vendor), (agent_id, task_id, request_id), output_field=UUIDField())  # noqa: S611


@lru_cache
def _replay_sql(vendor: str) -> str:
    table, column = quoted_names(Proposal)
    return (
        f"SELECT {column('id')} FROM {table}"  # noqa: S608
        f" WHERE {column('agent')} = %s AND {column('task_id')} = %s AND {column('request_id')} = %s"
        " LIMIT 1"
    )
