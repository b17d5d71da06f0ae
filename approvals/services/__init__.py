"""The only write path of the approval domain, one module per concern (README "The services package").

Every function here is atomic, changes state only through `transition()`, writes its audit event in the
same transaction, and schedules broadcasts and deliveries with on_commit (events.py) or an outbox row.
Views, consumers, the REST API, management commands and admin actions call these; none of them saves a
domain row itself. Callers import a verb from the module that defines it
(`from approvals.services.votes import cast_vote`): this package re-exports nothing.

Refusals are exceptions carrying a stable `code` (lib/errors.py; used by the API, the socket and the
tests). A refusal that must leave a trace (a failed step-up, a vote after expiry) records its audit event
and commits before the exception is raised.
"""
