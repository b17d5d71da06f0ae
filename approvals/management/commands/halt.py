"""The kill switch.

    manage.py halt (--all | --tenant SLUG | --agent SLUG) --reason "..." [--operator USERNAME]

While halted, intake is refused (503), no vote is accepted and no decision can be consumed; released
decisions that were not consumed yet are revoked, and CancelTask is queued for their tasks and for tasks
already executing. Reads still work. The halt is a database row, so every process sees it at once and a
restarted process comes back halted. `manage.py resume` with the same flag lifts it.
"""

from approvals.management.commands._base import (
    OperatorCommand,
    add_scope_arguments,
    cancel_note,
    describe,
    scope_flag,
    scope_from_options,
)
from approvals.services import halts
from approvals.states import State


class Command(OperatorCommand):
    help = (
        "Halt Reviewer for everything, a tenant or an agent: refuse intake, votes and consumes, revoke "
        "unconsumed decisions and queue CancelTask for affected tasks. Lift it with `manage.py resume`."
    )

    def add_arguments(self, parser):
        add_scope_arguments(parser)
        parser.add_argument("--reason", required=True, help="why (audited, shown to agents)")
        self.add_operator_argument(parser, "halting")

    def handle(self, *args, **options):
        scope, tenant, agent = scope_from_options(options)
        halt = self.call_service(
            halts.halt,
            scope=scope,
            actor=self.operator(options),
            reason=options["reason"],
            tenant=tenant,
            agent=agent,
        )
        revoked = sum(1 for proposal in halt.stopped if proposal.state == State.REVOKED)
        cancelled = sum(1 for proposal in halt.stopped if proposal.state == State.CANCELLED)
        running = sum(1 for proposal in halt.stopped if proposal.state == State.EXECUTING)
        self.stdout.write(f"halted {describe(tenant, agent)} (halt {halt.id}): {halt.reason}")
        # Reviewer never calls a pull agent (no card URL): its tasks get no CancelTask, and saying one
        # was queued would send the operator looking for it.
        called = sum(1 for proposal in halt.stopped if not proposal.agent.is_pull)
        self.stdout.write(
            f"  {revoked} unconsumed decision(s) revoked, {cancelled} waiting request(s) cancelled, "
            f"{running} running task(s) stopped; {cancel_note(called, len(halt.stopped))}"
        )
        self.stdout.write(f"  lift it with: manage.py resume {scope_flag(tenant, agent)}")
