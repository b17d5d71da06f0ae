"""`manage.py resume (--all | --tenant SLUG | --agent SLUG) [--reason "..."] [--operator USERNAME]`.

Lifts the halt of exactly that scope. Revoked decisions stay revoked: agents ask again. Another halt
that still covers the scope (a global one, or the tenant of an agent) keeps it halted; the command says so.
"""

from django.core.management.base import CommandError
from django.db.models import Q

from approvals.management.commands._base import (
    OperatorCommand,
    add_scope_arguments,
    describe,
    scope_from_options,
)
from approvals.models import Halt
from approvals.services.halts import resume


class Command(OperatorCommand):
    help = "Lift the halt of one scope (give the same flag `manage.py halt` was given)."

    def add_arguments(self, parser):
        add_scope_arguments(parser)
        parser.add_argument("--reason", default="", help="why it is safe again: recorded in the audit trail")
        self.add_operator_argument(parser, "resuming")

    def handle(self, *args, **options):
        scope, tenant, agent = scope_from_options(options)
        lifted = self.call_service(
            resume,
            actor=self.operator(options),
            reason=options["reason"],
            tenant=tenant,
            agent=agent,
            everything=scope == Halt.Scope.GLOBAL,
        )
        still = still_active(tenant, agent)
        if not lifted:
            active = f"; still active: {', '.join(still)}" if still else "; nothing is halted"
            raise CommandError(f"{describe(tenant, agent)} has no halt of its own to lift{active}")
        self.stdout.write(f"resumed {describe(tenant, agent)} ({lifted} halt(s) lifted)")
        for item in still:
            self.stdout.write(f"  still halted: {item}")


def still_active(tenant, agent) -> list[str]:
    """Active halts that still cover this scope, or part of it."""
    if tenant:
        covers = (
            Q(scope=Halt.Scope.GLOBAL)
            | Q(scope=Halt.Scope.TENANT, tenant=tenant)
            | Q(scope=Halt.Scope.AGENT, agent__tenant=tenant)
        )
    elif agent:
        covers = (
            Q(scope=Halt.Scope.GLOBAL)
            | Q(scope=Halt.Scope.TENANT, tenant_id=agent.tenant_id)
            | Q(scope=Halt.Scope.AGENT, agent=agent)
        )
    else:
        covers = Q()  # everything: any halt left stops a part of it
    active = Halt.objects.filter(covers, lifted_at__isnull=True).select_related("tenant", "agent")
    return [f"{describe(h.tenant, h.agent)} (halt {h.id}: {h.reason})" for h in active.order_by("created_at")]
